"""The rules of ORCH-INV-200..299 (failure, cancellation, cleanup).

ORCH-INV-200/201: an AR abort at a final-output stage delivers the generated prefix; diffusion
emits no partial output. 202: an abort is committed only after the physical abort succeeded.
203/204: a parent's abort reaches its children and companions; a lost companion fails the
parent; the parent goes with its last child. 205: a worker's RPC error reaches its caller and
ends nothing. 206: a request-scoped failure ends only its request's family. 207: only the last
final-output message is terminal. 208: no state is kept after a terminal. 209: an abort request
ends the request. 210/211: a dying engine or a shutdown ends every open request.

Handles ``AbortRequested``, ``AbortSent``, ``AbortCommitted`` and ``Released``; judges client
messages and reports where the request-state rules call it; holds the rules about a whole step
(``after_*``, ``end_of_step``) and about the end of a history (``at_end``).
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_fsm.invariants.checks import (
    ABORT_ENDS,
    ABORT_PREFIX,
    COMMIT_AFTER_PHYSICAL,
    COMPANION_GATE,
    DIFFUSION_WHOLE,
    FATAL_REACHES_ALL,
    LAST_FINAL_TERMINAL,
    NO_STATE_AFTER_TERMINAL,
    ONE_TERMINAL,
    PARALLEL_ABORT,
    REQUEST_SCOPED,
    RPC_ERRORS,
    SHUTDOWN_ENDS_ALL,
)
from omni_fsm.invariants.judge import Judge, fact, said
from omni_fsm.invariants.rules_ar import cache_freed
from omni_fsm.invariants.view import View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import Outcome, Role, StageKind

# -- client messages (judged for ``rules_lifecycle.on_emitted``) ---------------------------------


def before_terminal(j: Judge, o: ob.Emitted, view: View, kind: StageKind | None) -> None:
    """Judge a message that is not the terminal: nothing partial from diffusion or once aborting, no abort."""
    if not o.stage_final:  # a partial output
        if kind is StageKind.DIFFUSION:
            j.fail(DIFFUSION_WHOLE, o.rid, f"a partial output of diffusion stage {o.stage}: {fact(o)}")
        if view.abort_requested:
            j.fail(ABORT_ENDS, o.rid, f"output after the abort was requested: {fact(o)}")
    if o.outcome is Outcome.ABORTED and o.sample < 0:  # a sample's own abort ends only that sample
        j.fail(LAST_FINAL_TERMINAL, o.rid, f"an abort message that is not the terminal: {fact(o)}")


def finished_terminal(j: Judge, o: ob.Emitted, view: View) -> None:
    """Judge a terminal: one that finished comes from the last stage, unless the stage it ends at reported the
    prompt ignored (the history shows it: a ``StageFinished`` with ``stop=IGNORED`` there, for the request or,
    for an ``n>1`` parent, its samples). A ``length`` finish with no tokens is no such report: it goes on."""
    ignored_prompt = view.ignored_at == o.stage
    if o.outcome is Outcome.FINISHED and o.stage != len(j.kinds) - 1 and not ignored_prompt:
        j.fail(LAST_FINAL_TERMINAL, o.rid, f"finished at stage {o.stage}, not at the last final-output stage "
                                           f"({len(j.kinds) - 1})")


def aborted_terminal(j: Judge, o: ob.Emitted, view: View, kind: StageKind | None) -> None:
    """Judge an abort terminal: AR at a final-output stage carries the prefix, diffusion carries nothing."""
    if o.outcome is Outcome.ABORTED and not view.children:
        if kind is StageKind.AR and j.final[o.stage] and view.stage == o.stage and o.cumulative != view.generated:
            j.fail(ABORT_PREFIX, o.rid, f"abort at stage {o.stage} carries {o.cumulative} tokens of {view.generated} "
                                        "generated")
        if kind is StageKind.DIFFUSION and o.cumulative:
            j.fail(DIFFUSION_WHOLE, o.rid, f"the abort of diffusion stage {o.stage} carried a partial result "
                                           f"({o.cumulative}): {fact(o)}")


# -- aborts ---------------------------------------------------------------------------------------


def on_abort_requested(j: Judge, o: ob.AbortRequested) -> None:
    view = j.view(o.rid)
    if view is not None:  # a new abort asked: it is owed its own answer
        view.abort_requested, view.abort_answered = True, False
        if o.parent is not None and j.sees_callers:  # its parent's: the answer is the parent's, not the client's
            view.parent_asked = True


def on_abort_sent(j: Judge, o: ob.AbortSent) -> None:
    view = j.view(o.rid)
    if view is not None:
        view.abort_sent, view.abort_ok = o.stage, False


def on_abort_committed(j: Judge, o: ob.AbortCommitted) -> None:
    view = j.view(o.rid)
    if view is None:
        return
    if view.abort_sent >= 0 and not view.abort_ok and view.finished_at != view.abort_sent:
        j.fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed before the physical abort at stage {view.abort_sent}")
    elif view.abort_sent < 0 and view.stage >= 0 and view.finished_at != view.stage:
        j.fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed with no physical abort at its stage {view.stage}")
    view.committed = True


def abort_failed(j: Judge, event: ev.AbortFailed, outputs: Sequence[ob.Observation], view: View) -> None:
    """Judge a runtime's report that the physical abort failed: the abort is not committed."""
    if view.abort_requested and any(isinstance(o, ob.AbortCommitted) and o.rid == event.rid for o in outputs):
        j.fail(COMMIT_AFTER_PHYSICAL, event.rid, f"a failed physical abort was committed (AbortFailed at stage "
                                                 f"{event.stage})")


# -- companions, RPC errors -------------------------------------------------------------------------


def companions_done(j: Judge, o: ob.Forwarded, view: View) -> None:
    """Judge a forward: every companion of the request forwarded is done."""
    if view.companions_done < view.companions:
        j.fail(COMPANION_GATE, o.rid, f"forwarded {o.src} -> {o.dst} with {view.companions_done}/{view.companions} "
                                      "companions done")


def rpc_error_carried(j: Judge, o: ob.RpcAnswered) -> None:
    """Judge a correlated RPC answer: a failed one carries the worker's error."""
    if not o.ok and not o.error:
        j.fail(RPC_ERRORS, None, f"RPC {o.call_id} ({o.method.value}) failed without the worker's error")


# -- state dropped ----------------------------------------------------------------------------------


def on_released(j: Judge, o: ob.Released) -> None:
    view = j.view(o.rid)
    if view is None:
        return
    cache_freed(j, o.rid, view)
    # done: its stage reported it finished normally and it was not sent on (released where it finished)
    finished_companion = view.done_at >= 0 and view.done_at == view.stage
    view.settle()
    parent = j.view(view.parent)
    if parent is None:
        return
    if view.role is Role.CHILD:
        parent.open_children -= 1
    elif view.role is Role.COMPANION:
        if finished_companion:
            parent.companions_done += 1
        elif not parent.released and not parent.abort_requested and parent.terminals == 0:
            j.lost_companions.append((view.parent, o.rid))  # the parent must fail in this very step (``end_of_step``)


# -- rules about a whole step -------------------------------------------------------------------------


def after_request_event(j: Judge, event: ev.RequestEvent, outputs: Sequence[ob.Observation], what: str) -> None:
    """Judge a step whose input is about one request (``what``: a failure of it, a rejected report about it, or
    the event's name): the terminals it produced are of that request's family only (itself, its parent, samples and
    companions). A failure is request-scoped, and an event about one request is no cause to end another."""
    family = _family(j, event.rid)
    for o in outputs:
        if isinstance(o, ob.Emitted) and o.finished and o.rid not in family:
            j.fail(REQUEST_SCOPED, o.rid, f"ended by {what} of request {event.rid} ({fact(event)}): {fact(o)}")


def _family(j: Judge, rid: int) -> set[int]:
    view = j.view(rid)
    root = view.parent if view is not None and view.parent >= 0 else rid
    root_view = j.view(root)
    members = {root, rid}
    if root_view is not None:
        members.update(root_view.children)
        members.update(r for r, v in j.views.items() if v.parent == root)
    return members


def lost_other_replica(j: Judge, event: ev.ReplicaLost, view: View) -> None:
    """Judge a replica's loss acted on for a request bound to another replica: a lost replica ends only the
    requests bound to it."""
    j.fail(REQUEST_SCOPED, event.rid, f"ended by the loss of replica {event.replica} of stage {event.stage}; "
                                      f"it is bound to replica {view.replica}")


def after_rpc_failed(j: Judge, event: ev.RpcFailed, outputs: Sequence[ob.Observation], dropped: bool,
                     terminal_rids: list[int]) -> None:
    """Judge a step that reported a worker's RPC error: it reached the caller (the worker's own error, not another
    text), and ended nothing."""
    answers = [o for o in outputs if isinstance(o, ob.RpcAnswered) and o.call_id == event.call_id]
    if not dropped and (not answers or answers[0].ok or not answers[0].error):
        got = fact(answers[0]) if answers else "no answer"
        j.fail(RPC_ERRORS, None, f"worker error {event.error!r} of RPC {event.call_id} did not reach its caller "
                                 f"(it got {got})")
    elif not dropped and answers[0].error != event.error:
        j.fail(RPC_ERRORS, None, f"RPC {event.call_id} answered with error {answers[0].error!r}, "
                                 f"not the worker's {event.error!r}")
    ended = [fact(o) for o in outputs if isinstance(o, ob.EngineChanged) or (isinstance(o, ob.Emitted) and o.finished)]
    if ended:
        j.fail(RPC_ERRORS, None, f"a worker error of RPC {event.call_id} ended requests or the engine: "
                                 f"{', '.join(ended)}")


def after_engine_died(j: Judge, outputs: Sequence[ob.Observation]) -> None:
    """Judge the step the engine died in: every open request got a fatal terminal."""
    _all_open_end(j, outputs, Outcome.FATAL, FATAL_REACHES_ALL)


def after_shutdown(j: Judge, outputs: Sequence[ob.Observation]) -> None:
    """Judge a shutdown's step: every open request got an aborted terminal."""
    _all_open_end(j, outputs, Outcome.ABORTED, SHUTDOWN_ENDS_ALL)


def _all_open_end(j: Judge, outputs: Sequence[ob.Observation], outcome: Outcome, check: str) -> None:
    ended = {o.rid: o.outcome for o in outputs if isinstance(o, ob.Emitted) and o.finished}
    for rid, view in j.views.items():
        if view.role is Role.CLIENT and not view.released and view.terminals == 0 and rid not in ended:
            j.fail(check, rid, f"open request got no terminal ({outcome.value} expected)")
    for rid, got in ended.items():
        if got is not outcome:
            j.fail(check, rid, f"ended {got.value if got else None}, expected {outcome.value}")


def after_abort(j: Judge, rid: int, outputs: Sequence[ob.Observation]) -> None:
    """Judge the step that requested request ``rid``'s abort: it reached every child and companion."""
    view = j.view(rid)
    if view is None:
        return
    asked = {o.rid for o in outputs if isinstance(o, ob.AbortRequested)}
    ended = {o.rid for o in outputs if isinstance(o, ob.Released)}
    for dep, dview in j.views.items():
        if dview.parent != rid or dview.released or dview.abort_requested or dep in asked or dep in ended:
            continue
        check = PARALLEL_ABORT if dview.role is Role.CHILD else COMPANION_GATE
        j.fail(check, dep, f"the abort of parent {rid} did not reach this {dview.role.value}")


def after_abort_done(j: Judge, event: ev.AbortDone, outputs: Sequence[ob.Observation]) -> None:
    """Judge a step whose physical abort of a request succeeded: an aborting request ended, and a client request
    that ended in this step got its terminal here, as an abort (provable now, not at the end marker)."""
    rid, done = event.rid, f"the physical abort at stage {event.stage} succeeded"
    view = j.view(rid)
    if view is None or (not view.abort_requested and not view.released):
        return
    if not view.released:
        j.fail(ABORT_ENDS, rid, f"{done} but the request did not end")
        return
    if view.role is not Role.CLIENT or not any(isinstance(o, ob.Released) and o.rid == rid for o in outputs):
        return
    ends = [o for o in outputs if isinstance(o, ob.Emitted) and o.rid == rid and o.finished]
    wrong = next((o for o in ends if o.outcome is not Outcome.ABORTED), None)
    if not ends and view.terminals == 0:  # it had no terminal before this step, and got none in it
        j.fail(ONE_TERMINAL, rid, f"{done} and the request ended without a terminal")
    elif wrong is not None:
        j.fail(ABORT_ENDS, rid, f"{done} but the request ended {said(wrong.outcome)}: {fact(wrong)}")


def end_of_step(j: Judge, outputs: Sequence[ob.Observation], terminal_rids: list[int]) -> None:
    """Judge the end of every step: a lost companion failed its parent, ended requests left no state."""
    if j.lost_companions:
        ends = {o.rid: o for o in outputs if isinstance(o, ob.Emitted) and o.finished}
        failed = {o.rid for o in outputs if isinstance(o, ob.Emitted) and o.finished and o.outcome is Outcome.FAILED}
        for parent_rid, companion in j.lost_companions:
            if parent_rid not in failed:
                end = ends.get(parent_rid)
                how = "it did not end" if end is None else f"it ended {said(end.outcome)}"
                j.fail(COMPANION_GATE, parent_rid, f"a companion was lost but the parent did not fail: companion "
                                                   f"{companion} released unfinished, {how} (failed expected)")
        j.lost_companions.clear()
    released = {o.rid for o in outputs if isinstance(o, ob.Released)}
    for rid in terminal_rids:
        if rid not in released and rid in j.views:
            end = next(o for o in outputs if isinstance(o, ob.Emitted) and o.finished and o.rid == rid)
            j.fail(NO_STATE_AFTER_TERMINAL, rid, f"terminal emitted but its state was kept (no Released): {fact(end)}")
    for rid in released:
        parent = j.view(j.views[rid].parent) if rid in j.views else None
        if parent is not None and parent.children and parent.open_children == 0 and not parent.released:
            j.fail(PARALLEL_ABORT, j.views[rid].parent, f"the last child ({rid}) ended but the parent was kept")


# -- end of history ------------------------------------------------------------------------------------


def at_end(j: Judge, rid: int, view: View) -> None:
    """Judge request ``rid`` at the end of a complete history: no state is kept for it."""
    if not view.released:
        j.fail(NO_STATE_AFTER_TERMINAL, rid, "state still kept at the end")
