"""The rules of ORCH-INV-100..199 (request state and ordering).

ORCH-INV-100: no work for a request after its terminal. 101: one terminal per client request, with
the outcome its cause calls for. 102: the client's messages in stage order, the terminal last.
103: a terminal carries an outcome and a finish reason of the closed set, the one its stage reported.
104: children and companions are never client-visible. 105: an n>1 parent ends after its last child.
106: each RPC or abort answer matches its own call, once; every RPC is answered. 107: a report about
an ended request is dropped, and its step does nothing else. 108: admission follows the control
plane. 109: slots are taken at the dispatched stage, once, within capacity.

Handles the observations of a request's life (``Submitted``, ``Dispatched``, ``Emitted``,
``SlotTaken``, ``SlotFreed``), of the control plane and its answers (``EngineChanged``,
``RpcSent``, ``RpcAnswered``, ``AbortAnswered``), and a runtime's report (``on_report``); the
other sections' rules about them are called from here, where they apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_fsm.invariants import upstream as up
from omni_fsm.invariants.checks import (
    ADMISSION,
    ANSWERS_CORRELATED,
    DEPENDENTS_INVISIBLE,
    FINISH_REASON,
    LATE_EVENTS_DROPPED,
    NO_WORK_AFTER_TERMINAL,
    ONE_TERMINAL,
    PARENT_AFTER_CHILDREN,
    SLOTS,
    STAGE_ORDER,
)
from omni_fsm.invariants.judge import Judge, fact, said
from omni_fsm.invariants.rules_ar import assigned_replica, assigned_work, through_adapter, upstream_status
from omni_fsm.invariants.rules_failure import (
    abort_failed,
    aborted_terminal,
    before_terminal,
    finished_terminal,
    lost_other_replica,
    rpc_error_carried,
)
from omni_fsm.invariants.view import View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import STOP_REASON, EngineState, FinishReason, Outcome, Role, StageKind, StopKind

_R = FinishReason
_REASONS = {Outcome.FINISHED: {_R.STOP, _R.LENGTH, _R.REPETITION}, Outcome.ABORTED: {_R.ABORT},
            Outcome.FAILED: {_R.ERROR}, Outcome.FATAL: {_R.ERROR}}
#: the outcome an accepted runtime report that ends its request calls for (a rejected one: failed; an abort
#: requested before may turn a finish into an abort; AbortDone: ORCH-INV-209); a report not here ends nothing
_ENDS_AS = {ev.StageFinished: Outcome.FINISHED, ev.StageAborted: Outcome.ABORTED, ev.StageFailed: Outcome.FAILED,
            ev.ReplicaLost: Outcome.FAILED}
#: an n>1 parent's outcome is the worst of its samples': this order
_SEVERITY = {Outcome.FINISHED: 0, Outcome.ABORTED: 1, Outcome.FAILED: 2, Outcome.FATAL: 3}

# -- a request's life ------------------------------------------------------------------------------


def on_submitted(j: Judge, o: ob.Submitted) -> None:
    view = View(role=o.role, parent=o.parent, companions=o.companions,
                while_sleeping=j.engine is EngineState.SLEEPING)
    j.views[o.rid] = view
    parent = j.view(o.parent)
    if parent is not None and o.role is Role.CHILD:
        parent.children = (*parent.children, o.rid)
        parent.open_children += 1


def working_view(j: Judge, rid: int, what: str, stage: int) -> View | None:
    """Return the view of ``rid`` given work at ``stage`` (``None``: never seen); work after its terminal fails."""
    view = j.view(rid)
    if view is not None and view.over:
        j.fail(NO_WORK_AFTER_TERMINAL, rid, f"{what} {stage} after its terminal")
    return view


def on_dispatched(j: Judge, o: ob.Dispatched) -> None:
    view = working_view(j, o.rid, "dispatched to stage", o.stage)
    if view is None:
        return
    through_adapter(j, o, view)
    view.replica = o.replica
    if o.stage == 0 and j.engine in (EngineState.PAUSED, EngineState.SLEEPING):
        j.fail(ADMISSION, o.rid, f"admitted (dispatched to stage 0) while the engine is {j.engine.value}")
    view.stage, view.forwarded_to, view.generated, view.status = o.stage, -1, 0, up.WAITING


def on_report(j: Judge, event: ev.StageEvent, outputs: Sequence[ob.Observation], dropped: bool,
              rejected: bool) -> None:
    """Judge a runtime's report about a request (acted on only while it is live, at its stage); take it in."""
    view = j.view(event.rid)
    if view is None or view.released:
        _late_report(j, event, outputs, dropped)
        return
    if dropped or not assigned_work(j, event, view):
        return
    if j.sees_replicas and event.replica != view.replica:
        if isinstance(event, ev.ReplicaLost):
            lost_other_replica(j, event, view)
        else:
            assigned_replica(j, event, view)
    _ends_as_reported(j, event, outputs, view, rejected)
    if isinstance(event, ev.StageOutput):
        view.generated += event.tokens
    elif isinstance(event, (ev.StageFinished, ev.StageAborted)) and not rejected:  # the stage ended it itself
        view.finished_at = event.stage
        if isinstance(event, ev.StageFinished):
            view.done_at = event.stage
            if event.stop is StopKind.IGNORED:  # nothing generated: the request ends where it is
                view.ignored_at = event.stage
                parent = j.view(view.parent) if view.role is Role.CHILD else None
                if parent is not None:  # a sample's prompt is its parent's: the parent ends there too
                    parent.ignored_at = event.stage
    elif isinstance(event, ev.AbortDone):
        view.abort_ok = True
    elif isinstance(event, ev.AbortFailed):
        abort_failed(j, event, outputs, view)
    upstream_status(j, event, view, rejected)


def _ends_as_reported(j: Judge, event: ev.StageEvent, outputs: Sequence[ob.Observation], view: View,
                      rejected: bool) -> None:
    """Judge the end a runtime's accepted report about a client request or a sample causes in its step: the request's
    terminal (a sample's end message) has the outcome the report calls for (ORCH-INV-101) and, finished, the reason
    its stage reported (ORCH-INV-103); a parent that ends with that sample ends no better than the sample did."""
    if isinstance(event, ev.AbortDone) and not rejected:
        return  # the physical abort's end is ORCH-INV-209's
    if view.role is Role.CLIENT:
        client, sample = event.rid, -1
    else:
        parent = j.view(view.parent) if view.role is Role.CHILD else None
        if parent is None or event.rid not in parent.children:
            return  # a companion's report: its parent's end is no end of the request whose report it is
        client, sample = view.parent, parent.children.index(event.rid)
    expected = Outcome.FAILED if rejected else _ENDS_AS.get(type(event))
    name = ("a rejected " if rejected else "") + f"{type(event).__name__} at stage {event.stage}"
    for o in outputs:
        if not isinstance(o, ob.Emitted) or o.rid != client or o.outcome is None:
            continue
        if o.sample == sample and (o.finished or sample >= 0):  # the request's own end
            _judge_cause(j, event, o, o.outcome, expected, name, view.abort_requested and not rejected)
        elif sample >= 0 and o.finished and (expected is None or _SEVERITY[o.outcome] < _SEVERITY[expected]):
            j.fail(ONE_TERMINAL, client, f"parent ended {o.outcome.value} as its sample {sample} ended by {name} "
                                         f"({said(expected)} expected)")


def _judge_cause(j: Judge, event: ev.StageEvent, o: ob.Emitted, outcome: Outcome, expected: Outcome | None,
                 name: str, aborting: bool) -> None:
    """Judge the end ``o`` (with ``outcome``) of the request ``event`` is about against what ``event`` calls for."""
    if expected is None:
        j.fail(ONE_TERMINAL, o.rid, f"ended {outcome.value} by {name}, which ends nothing")
    elif outcome is not expected and not (aborting and outcome is Outcome.ABORTED):
        j.fail(ONE_TERMINAL, o.rid, f"ended {outcome.value} by {name} ({expected.value} expected)")
    if isinstance(event, ev.StageFinished) and expected is Outcome.FINISHED and outcome is Outcome.FINISHED \
            and o.reason is not STOP_REASON[event.stop]:
        j.fail(FINISH_REASON, o.rid, f"finished with reason {said(o.reason)}; its stage reported "
                                     f"{event.stop.value} ({STOP_REASON[event.stop].value} expected)")


def _late_report(j: Judge, event: ev.StageEvent, outputs: Sequence[ob.Observation], dropped: bool) -> None:
    """Judge a report about a request that ended (or never was): its step drops that very report (a ``Dropped``
    naming the request and the report's type) and observes nothing else: no other request's terminal, no engine
    change, no slot move. (Work or a message for the ended request itself is ORCH-INV-100/101/102/109's.)"""
    name = type(event).__name__
    if not dropped:
        instead = [o.event for o in outputs if isinstance(o, ob.Dropped) and o.rid == event.rid]
        j.fail(LATE_EVENTS_DROPPED, event.rid, f"{name} of stage {event.stage} for an ended request was acted on"
               + (f" ({', '.join(instead)} dropped instead)" if instead else ""))
        return
    drop = next(o for o in outputs if isinstance(o, ob.Dropped) and o.rid == event.rid and o.event == name)
    ended = event.rid if j.view(event.rid) is not None else None
    others = [fact(o) for o in outputs if o is not drop and getattr(o, "rid", None) != ended]
    if others:
        j.fail(LATE_EVENTS_DROPPED, event.rid, f"the step that dropped a late {name} also observed {', '.join(others)}")


# -- client messages ---------------------------------------------------------------------------------


def on_emitted(j: Judge, o: ob.Emitted) -> None:
    view = j.view(o.rid)
    if view is None or view.role is not Role.CLIENT:
        whose = "never submitted" if view is None else f"the {view.role.value} of request {view.parent}"
        j.fail(DEPENDENTS_INVISIBLE, o.rid, f"a message to the client for a request it never submitted ({whose}): "
                                            f"{fact(o)}")
        return
    if o.finished and view.terminals:
        j.fail(ONE_TERMINAL, o.rid, f"a second terminal: {fact(o)}")
    elif view.terminals:
        j.fail(STAGE_ORDER, o.rid, f"a message after the terminal: {fact(o)}")
    _judge_stage_order(j, o, view)
    kind = j.kinds[o.stage] if 0 <= o.stage < len(j.kinds) else None
    if o.finished:
        _judge_terminal(j, o, view, kind)
    else:
        before_terminal(j, o, view, kind)


def _judge_stage_order(j: Judge, o: ob.Emitted, view: View) -> None:
    last = view.last_emit_stage
    if o.sample >= 0:  # each sample's stream is ordered on its own
        stages = view.sample_stages + (-1,) * (o.sample + 1 - len(view.sample_stages))
        last = stages[o.sample]
        view.sample_stages = (*stages[: o.sample], max(last, o.stage), *stages[o.sample + 1 :])
    else:
        view.last_emit_stage = max(last, o.stage)
    if o.stage < last:
        j.fail(STAGE_ORDER, o.rid, f"stage {o.stage} message after a stage {last} message")


def _judge_terminal(j: Judge, o: ob.Emitted, view: View, kind: StageKind | None) -> None:
    if o.outcome is None or o.reason not in _REASONS[o.outcome]:
        j.fail(FINISH_REASON, o.rid, f"terminal at stage {o.stage} with outcome {said(o.outcome)} and finish reason "
                                     f"{said(o.reason)}")
    if view.open_children:
        still = [c for c in view.children if c in j.views and not j.views[c].released]
        j.fail(PARENT_AFTER_CHILDREN, o.rid, f"parent ended {said(o.outcome)} with {view.open_children} children "
                                             f"still open ({', '.join(map(str, still))})")
    finished_terminal(j, o, view)
    if view.while_sleeping and (o.outcome is not Outcome.FAILED or view.stage >= 0):
        done = f"dispatched to stage {view.stage}" if view.stage >= 0 else f"ended {said(o.outcome)}"
        j.fail(ADMISSION, o.rid, f"submitted while sleeping but not refused with error ({done})")
    aborted_terminal(j, o, view, kind)
    view.terminals += 1


# -- slots -------------------------------------------------------------------------------------------


def on_slot_taken(j: Judge, o: ob.SlotTaken) -> None:
    view = working_view(j, o.rid, "scheduled again at stage", o.stage)
    if view is None:
        return
    if view.slot >= 0 or o.stage != view.stage:
        held = f"already holds one at stage {view.slot}" if view.slot >= 0 else "holds none"
        j.fail(SLOTS, o.rid, f"took a slot at stage {o.stage} ({held}; dispatched to stage {view.stage})")
    j.slots[o.stage] += 1
    if j.slots[o.stage] > j.capacity:
        j.fail(SLOTS, o.rid, f"stage {o.stage} holds {j.slots[o.stage]} slots, capacity {j.capacity}")
    view.slot = o.stage


def on_slot_freed(j: Judge, o: ob.SlotFreed) -> None:
    view = j.view(o.rid)
    if view is None:
        return
    if view.slot != o.stage:
        j.fail(SLOTS, o.rid, f"freed a slot at stage {o.stage} it did not hold")
    else:
        j.slots[o.stage] -= 1
    view.slot = -1


# -- the control plane and the answers to calls --------------------------------------------------------


def on_engine_changed(j: Judge, o: ob.EngineChanged) -> None:
    j.engine = o.state


def on_rpc_sent(j: Judge, o: ob.RpcSent) -> None:
    j.rpcs[o.call_id] = o.method


def on_rpc_answered(j: Judge, o: ob.RpcAnswered) -> None:
    method = j.rpcs.pop(o.call_id, None)
    if method is None or method is not o.method:
        j.fail(ANSWERS_CORRELATED, None, f"answer to RPC {o.call_id} ({o.method.value}) matches no open call")
    else:
        rpc_error_carried(j, o)


def on_abort_call(j: Judge, event: ev.Abort) -> None:
    """Take in a client's abort call of a known request: it is owed one answer of its call id."""
    view = j.view(event.rid)
    if view is not None and j.sees_callers and event.parent is None:
        view.calls = view.calls | {event.call_id}


def on_abort_answered(j: Judge, o: ob.AbortAnswered) -> None:
    view = j.view(o.rid)
    # owed: an abort asked and not yet withdrawn, or (the callers seen) a client's call or the parent's abort still
    # open; a refused abort answers every caller in turn, and the first answer withdraws the abort
    if view is None or not (view.abort_requested or view.calls or view.parent_asked):
        j.fail(ANSWERS_CORRELATED, o.rid, f"an abort answer with no abort caller: {fact(o)}")
        return
    if j.sees_callers:
        _answers_its_caller(j, o, view)
    elif view.abort_answered:
        j.fail(ANSWERS_CORRELATED, o.rid, "a second answer to the same abort (no new abort was asked)")
    if o.ok:
        view.abort_answered = True
    else:  # the abort was refused: the request is no longer aborting
        view.abort_requested, view.abort_sent, view.abort_ok = False, -1, False


def _answers_its_caller(j: Judge, o: ob.AbortAnswered, view: View) -> None:
    """Judge an abort answer by its caller: the client's open call of that id (once), or the parent that aborted
    this dependent; the answer to a parent's abort never reaches the client (ORCH-INV-104)."""
    if o.parent is None and o.call_id in view.calls:
        view.calls = view.calls - {o.call_id}
    elif o.parent is None and view.parent_asked:
        j.fail(DEPENDENTS_INVISIBLE, o.rid, f"the answer to parent {view.parent}'s abort of its {view.role.value} "
                                            f"reached the client (as call {o.call_id})")
        view.parent_asked = False
    elif o.parent is None:
        j.fail(ANSWERS_CORRELATED, o.rid, f"an answer to abort call {o.call_id}, which is not open "
                                          "(answered already, or never made)")
    elif o.parent == view.parent and view.parent_asked:
        view.parent_asked = False
    else:
        j.fail(ANSWERS_CORRELATED, o.rid, f"an answer owed to parent {o.parent}, which did not abort it")


def after_rpc_done(j: Judge, event: ev.RpcDone, outputs: Sequence[ob.Observation]) -> None:
    """Judge the step that completed an RPC: its caller got the answer."""
    if not any(isinstance(o, ob.RpcAnswered) and o.call_id == event.call_id and o.ok for o in outputs):
        answered = [fact(o) for o in outputs if isinstance(o, ob.RpcAnswered)]
        j.fail(ANSWERS_CORRELATED, None, f"RPC {event.call_id} completed but its caller got no answer (the step "
                                         f"answered {', '.join(answered) or 'no call'})")


# -- end of history -----------------------------------------------------------------------------------


def rpcs_at_end(j: Judge) -> None:
    """Judge the control plane at the end of a complete history: every RPC sent was answered."""
    for call_id, method in sorted(j.rpcs.items()):
        j.fail(ANSWERS_CORRELATED, None, f"RPC {call_id} ({method.value}) was never answered")


def at_end(j: Judge, rid: int, view: View) -> None:
    """Judge request ``rid`` at the end of a complete history: a client request got exactly one terminal, and each
    abort call of it its answer."""
    if view.role is Role.CLIENT and view.terminals != 1:
        j.fail(ONE_TERMINAL, rid, f"{view.terminals} terminals at the end (exactly one expected)")
    for call in sorted(view.calls):
        j.fail(ANSWERS_CORRELATED, rid, f"abort call {call} was never answered")
