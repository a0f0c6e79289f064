"""The invariants: predicates over an observable history, written from the contracts.

They never consult the lifecycle table. A history is a sequence of *steps*: one input event
(what the client or a runtime did) followed by the observations the engine produced for it.
``Monitor.step`` judges one step; the facts it keeps per request are the minimum the
predicates need (memory: a small view per open request plus one per distinct id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm._vocab import EngineState, Outcome, Role, StageKind
from omni_fsm.invariants import upstream as up


@attrs.frozen
class Violation:
    """One broken invariant: which, for which request, at which step, and why."""

    invariant: str
    check: str
    rid: int | None
    step: int
    message: str

    def __str__(self) -> str:
        who = "engine" if self.rid is None else f"request {self.rid}"
        return f"{self.invariant} ({self.check}) at step {self.step}, {who}: {self.message}"


@attrs.frozen
class CheckInfo:
    """A named check and the invariant it implements."""

    name: str
    invariant: str
    doc: str


CHECKS: dict[str, CheckInfo] = {}


def _check(invariant: str, name: str, doc: str) -> str:
    CHECKS[name] = CheckInfo(name, invariant, doc)
    return name


ROUTE_AFTER_FINISH = _check("ORCH-INV-001", "routing_only_after_stage_finish",
                            "the orchestrator forwards a request only after its stage reported it finished")
NEXT_LOGICAL_STAGE = _check("ORCH-INV-002", "forward_to_next_logical_stage",
                            "a forward goes to the next stage of the pipeline description, never elsewhere")
NO_WORK_AFTER_TERMINAL = _check("ORCH-INV-100", "no_work_after_terminal",
                                "nothing is dispatched, forwarded or scheduled for a request after its terminal")
ONE_TERMINAL = _check("ORCH-INV-101", "one_terminal_per_request",
                      "every submitted client request gets exactly one terminal message")
STAGE_ORDER = _check("ORCH-INV-102", "client_messages_in_stage_order",
                     "the client's messages come in stage order, the terminal last")
FINISH_REASON = _check("ORCH-INV-103", "terminal_has_finish_reason",
                       "every terminal carries an outcome and a finish reason from the closed set")
DEPENDENTS_INVISIBLE = _check("ORCH-INV-104", "dependents_never_client_visible",
                              "children and companions never appear to the client as requests")
PARENT_AFTER_CHILDREN = _check("ORCH-INV-105", "parent_terminal_after_last_child",
                               "an n>1 parent's terminal comes after its last child ended, never before")
ANSWERS_CORRELATED = _check("ORCH-INV-106", "answers_reach_their_callers",
                            "each RPC or abort answer matches its own call, once")
LATE_EVENTS_DROPPED = _check("ORCH-INV-107", "late_events_dropped",
                             "a report for an ended request is dropped: never acted on, never fatal")
ADMISSION = _check("ORCH-INV-108", "admission_follows_control_plane",
                   "no admission while paused or sleeping; a submit while sleeping ends as error")
SLOTS = _check("ORCH-INV-109", "slots_within_capacity",
               "slots are taken at the dispatched stage, once, never beyond capacity")
ABORT_PREFIX = _check("ORCH-INV-200", "ar_abort_delivers_prefix",
                      "an AR abort at a final-output stage delivers the generated prefix")
DIFFUSION_WHOLE = _check("ORCH-INV-201", "diffusion_abort_no_partial",
                         "diffusion emits no partial output; its abort carries nothing")
COMMIT_AFTER_PHYSICAL = _check("ORCH-INV-202", "abort_commit_after_physical_abort",
                               "abort state is committed only after the physical abort succeeded")
PARALLEL_ABORT = _check("ORCH-INV-203", "parallel_abort_reaches_children",
                        "a parent's abort reaches every child; the parent goes with its last child")
COMPANION_GATE = _check("ORCH-INV-204", "companions_gate_parent",
                        "no forward before every companion is done; a lost companion fails the parent")
RPC_ERRORS = _check("ORCH-INV-205", "rpc_errors_propagate",
                    "a worker's RPC exception reaches its caller and ends no request")
REQUEST_SCOPED = _check("ORCH-INV-206", "failure_is_request_scoped",
                        "a request-scoped failure ends only that request (and its dependents)")
LAST_FINAL_TERMINAL = _check("ORCH-INV-207", "only_last_final_message_terminal",
                             "with several final-output stages only the last message is terminal")
NO_STATE_AFTER_TERMINAL = _check("ORCH-INV-208", "no_state_after_terminal",
                                 "after a request's terminal no state is kept for it")
ABORT_ENDS = _check("ORCH-INV-209", "abort_ends_request",
                    "after an abort request: no more output, and the request ends once aborted physically")
FATAL_REACHES_ALL = _check("ORCH-INV-210", "fatal_reaches_every_request",
                           "when the engine dies every open request gets one fatal terminal")
SHUTDOWN_ENDS_ALL = _check("ORCH-INV-211", "shutdown_ends_every_request",
                           "shutdown ends every open request as aborted")
SHUTDOWN_ORDER = _check("ORCH-INV-300", "orchestrator_stops_first",
                        "the orchestrator stops before any runtime, and nothing happens after")
AR_UPSTREAM = _check("AR-INV-001", "ar_status_follows_upstream",
                     "accepted AR status changes follow upstream vLLM's RequestStatus transitions")
THROUGH_ADAPTER = _check("AR-INV-002", "stage_input_through_adapter",
                         "a request reaches a later stage only through a forward (its input adapter)")
ASSIGNED_WORK = _check("AR-INV-003", "work_only_where_assigned",
                       "runtime reports are acted on only for the stage the request was assigned to")
CACHE_FREED = _check("AR-INV-200", "terminal_frees_cache",
                     "a request's slot (its KV cache) is freed before its state is dropped")

_AR_STATUS: dict[type, str] = {
    ev.Scheduled: up.RUNNING, ev.Preempted: up.PREEMPTED, ev.AwaitGrammar: up.GRAMMAR,
    ev.AwaitRemoteKVs: up.REMOTE_KVS, ev.AwaitStreamingReq: up.STREAMING,
    ev.AwaitChunk: up.CHUNK, ev.InputReady: up.WAITING, ev.StageFinished: up.FINISHED,
}
_REASONS = {Outcome.FINISHED: {"stop", "length", "repetition"}, Outcome.ABORTED: {"abort"},
            Outcome.FAILED: {"error"}, Outcome.FATAL: {"error"}}


#: The order of ``View.snapshot()``'s fields (the explorer reads snapshots by these names).
VIEW_FIELDS = ("role", "parent", "children", "open_children", "companions", "companions_done", "stage",
               "forwarded_to", "finished_at", "generated", "status", "last_emit_stage", "sample_stages",
               "terminals", "abort_requested", "abort_sent", "abort_ok", "committed", "slot", "released",
               "while_sleeping")  # fmt: skip


@attrs.define(slots=True)
class View:
    """What the history has shown about one request so far."""

    role: Role = Role.CLIENT
    parent: int = -1
    children: tuple[int, ...] = ()  #: n>1 parent: child ids in sample order
    open_children: int = 0
    companions: int = 0
    companions_done: int = 0
    stage: int = -1  #: last stage dispatched to
    forwarded_to: int = -1  #: a forward was just made to this stage
    finished_at: int = -1  #: the runtime reported the request finished at this stage
    generated: int = 0  #: tokens the runtime reported at the current stage
    status: str = up.WAITING  #: AR status at the current stage
    last_emit_stage: int = -1
    sample_stages: tuple[int, ...] = ()  #: n>1 parent: last stage messaged, per sample
    terminals: int = 0
    abort_requested: bool = False
    abort_sent: int = -1  #: stage a physical abort was sent to (-1: none pending)
    abort_ok: bool = False
    committed: bool = False  #: its abort was committed: it is over, whatever it is told later
    slot: int = -1  #: stage whose slot it holds
    released: bool = False
    while_sleeping: bool = False  #: submitted while the engine slept

    def snapshot(self) -> tuple[Any, ...]:
        """Return the view as a hashable tuple, in ``VIEW_FIELDS`` order."""
        return (self.role, self.parent, self.children, self.open_children, self.companions,
                self.companions_done, self.stage, self.forwarded_to, self.finished_at, self.generated,
                self.status, self.last_emit_stage, self.sample_stages, self.terminals, self.abort_requested,
                self.abort_sent, self.abort_ok, self.committed, self.slot, self.released, self.while_sleeping)

    @property
    def over(self) -> bool:
        """Return whether the request is over for the client (terminal, committed abort, or dropped)."""
        return self.released or self.terminals > 0 or self.committed

    def settle(self) -> None:
        """Forget what no rule reads once the request's state is dropped (bounded memory)."""
        keep = (self.role, self.parent, self.terminals)
        self.__init__()  # type: ignore[misc]
        self.role, self.parent, self.terminals, self.released = (*keep, True)


class Monitor:
    """Judges a history step by step against every invariant; collects the violations."""

    def __init__(self, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int = 1 << 30) -> None:
        self.kinds, self.final, self.capacity = tuple(kinds), tuple(final), capacity
        self.views: dict[int, View] = {}
        self.engine = EngineState.RUNNING
        self.slots = [0] * len(self.kinds)
        self.rpcs: dict[int, Any] = {}  #: call id -> method, while unanswered
        self.stopped = 0  #: 1 once the orchestrator stopped, 2 once the runtimes did
        self.steps = 0
        self.violations: list[Violation] = []
        self._lost_companions: list[int] = []  #: parents whose companion was lost in this step

    # -- reporting -------------------------------------------------------------------------

    def _fail(self, check: str, rid: int | None, message: str) -> None:
        self.violations.append(Violation(CHECKS[check].invariant, check, rid, self.steps, message))

    def _view(self, rid: int) -> View | None:
        return self.views.get(rid)

    # -- one step ------------------------------------------------------------------------------

    def step(self, event: ev.Event | None, outputs: Sequence[ob.Observation]) -> list[Violation]:
        """Judge one step (an input event and what the engine produced for it); return new violations."""
        self.steps += 1
        before = len(self.violations)
        about = event.rid if isinstance(event, ev.RequestEvent) else -1
        dropped = any(isinstance(o, ob.Dropped) and o.rid == about for o in outputs)
        rejected = any(isinstance(o, ob.Rejected) and o.rid == about for o in outputs)
        terminal_rids = [o.rid for o in outputs if isinstance(o, ob.Emitted) and o.finished]
        if isinstance(event, ev.StageEvent):
            self._runtime_report(event, outputs, dropped, rejected)
        for obs in outputs:
            handler = _HANDLERS.get(type(obs))
            if handler is not None:
                handler(self, obs)
        if event is not None:
            self._step_rules(event, outputs, dropped, terminal_rids, rejected)
        return self.violations[before:]

    def _runtime_report(self, event: ev.StageEvent, outputs: Sequence[ob.Observation], dropped: bool,
                        rejected: bool) -> None:
        view = self._view(event.rid)
        if view is None or view.released:
            if not dropped:
                self._fail(LATE_EVENTS_DROPPED, event.rid, f"{type(event).__name__} for an ended request was acted on")
            return
        if dropped:
            return
        if event.stage != view.stage:
            self._fail(ASSIGNED_WORK, event.rid, f"{type(event).__name__} at stage {event.stage} acted on; "
                                                 f"assigned stage is {view.stage}")
            return
        if isinstance(event, ev.StageOutput):
            view.generated += event.tokens
        elif isinstance(event, ev.StageFinished) and not rejected:
            view.finished_at = event.stage
        elif isinstance(event, ev.AbortDone):
            view.abort_ok = True
        elif isinstance(event, ev.AbortFailed) and view.abort_requested and any(
            isinstance(o, ob.AbortCommitted) and o.rid == event.rid for o in outputs
        ):
            self._fail(COMMIT_AFTER_PHYSICAL, event.rid, "a failed physical abort was committed")
        target = _AR_STATUS.get(type(event))
        if target is not None and not rejected and self.kinds[event.stage] is StageKind.AR:
            if not up.allowed(view.status, target):
                self._fail(AR_UPSTREAM, event.rid, f"{view.status} -> {target} is not an upstream transition")
            view.status = target

    # -- rules about a whole step ---------------------------------------------------------------

    def _step_rules(self, event: ev.Event, outputs: Sequence[ob.Observation], dropped: bool,
                    terminal_rids: list[int], rejected: bool) -> None:
        if isinstance(event, ev.StageEvent) and not dropped and (
            rejected or isinstance(event, (ev.StageFailed, ev.ReplicaLost))
        ):
            family = self._family(event.rid)
            for rid in terminal_rids:
                if rid not in family:
                    self._fail(REQUEST_SCOPED, rid, f"ended by a failure of request {event.rid}")
        elif isinstance(event, ev.RpcFailed):
            answers = [o for o in outputs if isinstance(o, ob.RpcAnswered) and o.call_id == event.call_id]
            if not dropped and (not answers or answers[0].ok or not answers[0].error):
                self._fail(RPC_ERRORS, None, f"worker error of RPC {event.call_id} did not reach its caller")
            if terminal_rids or any(isinstance(o, ob.EngineChanged) for o in outputs):
                self._fail(RPC_ERRORS, None, f"a worker error of RPC {event.call_id} ended requests or the engine")
        elif isinstance(event, ev.RpcDone) and not dropped:
            if not any(isinstance(o, ob.RpcAnswered) and o.call_id == event.call_id and o.ok for o in outputs):
                self._fail(ANSWERS_CORRELATED, None, f"RPC {event.call_id} completed but its caller got no answer")
        elif isinstance(event, ev.EngineDied):
            self._all_open_end(outputs, Outcome.FATAL, FATAL_REACHES_ALL)
        elif isinstance(event, ev.Shutdown):
            self._all_open_end(outputs, Outcome.ABORTED, SHUTDOWN_ENDS_ALL)
        elif isinstance(event, ev.Abort) and any(isinstance(o, ob.AbortRequested) and o.rid == event.rid
                                                 for o in outputs):
            self._abort_reaches(event.rid, outputs)
        elif isinstance(event, ev.AbortDone) and not dropped:
            view = self._view(event.rid)
            if view is not None and not view.released and view.abort_requested:
                self._fail(ABORT_ENDS, event.rid, "the physical abort succeeded but the request did not end")
        failed = {o.rid for o in outputs if isinstance(o, ob.Emitted) and o.finished and o.outcome is Outcome.FAILED}
        for lost_parent in self._lost_companions:
            if lost_parent not in failed:
                self._fail(COMPANION_GATE, lost_parent, "a companion was lost but the parent did not fail")
        self._lost_companions.clear()
        released = {o.rid for o in outputs if isinstance(o, ob.Released)}
        for rid in terminal_rids:
            if rid not in released and rid in self.views:
                self._fail(NO_STATE_AFTER_TERMINAL, rid, "terminal emitted but its state was kept")
        for rid in released:
            parent = self._view(self.views[rid].parent) if rid in self.views else None
            if parent is not None and parent.children and parent.open_children == 0 and not parent.released:
                self._fail(PARALLEL_ABORT, self.views[rid].parent, "the last child ended but the parent was kept")

    def _family(self, rid: int) -> set[int]:
        view = self._view(rid)
        root = view.parent if view is not None and view.parent >= 0 else rid
        root_view = self._view(root)
        members = {root, rid}
        if root_view is not None:
            members.update(root_view.children)
            members.update(r for r, v in self.views.items() if v.parent == root)
        return members

    def _all_open_end(self, outputs: Sequence[ob.Observation], outcome: Outcome, check: str) -> None:
        ended = {o.rid: o.outcome for o in outputs if isinstance(o, ob.Emitted) and o.finished}
        for rid, view in self.views.items():
            if view.role is Role.CLIENT and not view.released and view.terminals == 0 and rid not in ended:
                self._fail(check, rid, f"open request got no terminal ({outcome.value} expected)")
        for rid, got in ended.items():
            if got is not outcome:
                self._fail(check, rid, f"ended {got.value if got else None}, expected {outcome.value}")

    def _abort_reaches(self, rid: int, outputs: Sequence[ob.Observation]) -> None:
        view = self._view(rid)
        if view is None:
            return
        asked = {o.rid for o in outputs if isinstance(o, ob.AbortRequested)}
        ended = {o.rid for o in outputs if isinstance(o, ob.Released)}
        for dep, dview in self.views.items():
            if dview.parent != rid or dview.released or dview.abort_requested or dep in asked or dep in ended:
                continue
            check = PARALLEL_ABORT if dview.role is Role.CHILD else COMPANION_GATE
            self._fail(check, dep, f"the abort of parent {rid} did not reach this {dview.role.value}")

    # -- end of history ------------------------------------------------------------------------

    def finish(self) -> list[Violation]:
        """Judge the end of a complete history (everything drained); return new violations."""
        before = len(self.violations)
        for rid, view in sorted(self.views.items()):
            if view.role is Role.CLIENT and view.terminals != 1:
                self._fail(ONE_TERMINAL, rid, f"{view.terminals} terminals at the end (exactly one expected)")
            if not view.released:
                self._fail(NO_STATE_AFTER_TERMINAL, rid, "state still kept at the end")
        return self.violations[before:]

    # -- explorer support --------------------------------------------------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """Return the monitor's facts (not its violations) as a hashable tuple."""
        views = tuple((rid, v.snapshot()) for rid, v in sorted(self.views.items()))
        return (self.engine, tuple(self.slots), tuple(sorted(self.rpcs.items(), key=lambda kv: kv[0])),
                self.stopped, views)

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Set the facts from :meth:`snapshot`'s tuple; forget violations."""
        self.engine, slots, rpcs, self.stopped, views = snap
        self.slots = list(slots)
        self.rpcs = dict(rpcs)
        self.views = {rid: View(*fields) for rid, fields in views}
        self.violations = []


# -- per-observation rules ---------------------------------------------------------------------


def _on_submitted(m: Monitor, o: ob.Submitted) -> None:
    view = View(role=o.role, parent=o.parent, companions=o.companions,
                while_sleeping=m.engine is EngineState.SLEEPING)
    m.views[o.rid] = view
    parent = m._view(o.parent)
    if parent is not None and o.role is Role.CHILD:
        parent.children = (*parent.children, o.rid)
        parent.open_children += 1


def _on_dispatched(m: Monitor, o: ob.Dispatched) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.over:
        m._fail(NO_WORK_AFTER_TERMINAL, o.rid, f"dispatched to stage {o.stage} after its terminal")
    if o.stage > 0 and view.forwarded_to != o.stage:
        m._fail(THROUGH_ADAPTER, o.rid, f"reached stage {o.stage} without a forward through its adapter")
    if o.stage == 0 and m.engine in (EngineState.PAUSED, EngineState.SLEEPING):
        m._fail(ADMISSION, o.rid, f"admitted while the engine is {m.engine.value}")
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, o.rid, "dispatched after the orchestrator stopped")
    view.stage, view.forwarded_to, view.generated, view.status = o.stage, -1, 0, up.WAITING


def _on_forwarded(m: Monitor, o: ob.Forwarded) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.over:
        m._fail(NO_WORK_AFTER_TERMINAL, o.rid, f"forwarded to stage {o.dst} after its terminal")
    if view.finished_at != o.src:
        m._fail(ROUTE_AFTER_FINISH, o.rid, f"forwarded from stage {o.src} before that stage finished it")
    if o.dst != o.src + 1 or o.dst >= len(m.kinds):
        m._fail(NEXT_LOGICAL_STAGE, o.rid, f"forwarded {o.src} -> {o.dst}; the next stage is {o.src + 1}")
    if view.companions_done < view.companions:
        m._fail(COMPANION_GATE, o.rid, f"forwarded with {view.companions_done}/{view.companions} companions done")
    view.forwarded_to = o.dst


def _on_emitted(m: Monitor, o: ob.Emitted) -> None:
    view = m._view(o.rid)
    if view is None or view.role is not Role.CLIENT:
        m._fail(DEPENDENTS_INVISIBLE, o.rid, "a message to the client for a request it never submitted")
        return
    is_sample_end = o.sample >= 0 and o.outcome is not None
    if o.finished and view.terminals:
        m._fail(ONE_TERMINAL, o.rid, "a second terminal")
    elif view.terminals:
        m._fail(STAGE_ORDER, o.rid, "a message after the terminal")
    last = view.last_emit_stage
    if o.sample >= 0:  # each sample's stream is ordered on its own
        stages = view.sample_stages + (-1,) * (o.sample + 1 - len(view.sample_stages))
        last = stages[o.sample]
        view.sample_stages = (*stages[: o.sample], max(last, o.stage), *stages[o.sample + 1 :])
    if o.stage < last:
        m._fail(STAGE_ORDER, o.rid, f"stage {o.stage} message after a stage {last} message")
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, o.rid, "a message after the orchestrator stopped")
    kind = m.kinds[o.stage] if 0 <= o.stage < len(m.kinds) else None
    partial = not o.finished and not o.stage_final
    if partial and kind is StageKind.DIFFUSION:
        m._fail(DIFFUSION_WHOLE, o.rid, "a partial diffusion output")
    if partial and view.abort_requested:
        m._fail(ABORT_ENDS, o.rid, "output after the abort was requested")
    if o.finished:
        _judge_terminal(m, o, view, kind)
    elif o.outcome is Outcome.ABORTED and not is_sample_end:
        m._fail(LAST_FINAL_TERMINAL, o.rid, "an abort message that is not the terminal")
    if o.sample < 0:
        view.last_emit_stage = max(view.last_emit_stage, o.stage)


def _judge_terminal(m: Monitor, o: ob.Emitted, view: View, kind: StageKind | None) -> None:
    if o.outcome is None or o.reason not in _REASONS[o.outcome]:
        m._fail(FINISH_REASON, o.rid, f"terminal with outcome {o.outcome} and finish reason {o.reason!r}")
    if view.open_children:
        m._fail(PARENT_AFTER_CHILDREN, o.rid, f"parent ended with {view.open_children} children still open")
    ignored_prompt = o.reason == "length" and o.cumulative == 0  # nothing generated: ends where it is
    if o.outcome is Outcome.FINISHED and o.stage != len(m.kinds) - 1 and not ignored_prompt:
        m._fail(LAST_FINAL_TERMINAL, o.rid, f"finished at stage {o.stage}, not at the last final-output stage")
    if view.while_sleeping and (o.outcome is not Outcome.FAILED or view.stage >= 0):
        m._fail(ADMISSION, o.rid, "submitted while sleeping but not refused with error")
    if o.outcome is Outcome.ABORTED and not view.children:
        if kind is StageKind.AR and m.final[o.stage] and view.stage == o.stage and o.cumulative != view.generated:
            m._fail(ABORT_PREFIX, o.rid, f"abort carries {o.cumulative} tokens of {view.generated} generated")
        if kind is StageKind.DIFFUSION and o.cumulative:
            m._fail(DIFFUSION_WHOLE, o.rid, "a diffusion abort carried a partial result")
    view.terminals += 1


def _on_abort_requested(m: Monitor, o: ob.AbortRequested) -> None:
    view = m._view(o.rid)
    if view is not None:
        view.abort_requested = True


def _on_abort_sent(m: Monitor, o: ob.AbortSent) -> None:
    view = m._view(o.rid)
    if view is not None:
        view.abort_sent, view.abort_ok = o.stage, False


def _on_abort_committed(m: Monitor, o: ob.AbortCommitted) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.abort_sent >= 0 and not view.abort_ok and view.finished_at != view.abort_sent:
        m._fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed before the physical abort at stage {view.abort_sent}")
    elif view.abort_sent < 0 and view.stage >= 0 and view.finished_at != view.stage:
        m._fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed with no physical abort at its stage {view.stage}")
    view.committed = True


def _on_abort_answered(m: Monitor, o: ob.AbortAnswered) -> None:
    view = m._view(o.rid)
    if view is None or not view.abort_requested:
        m._fail(ANSWERS_CORRELATED, o.rid, "an abort answer with no abort caller")
        return
    if not o.ok:
        view.abort_requested, view.abort_sent, view.abort_ok = False, -1, False


def _on_slot_taken(m: Monitor, o: ob.SlotTaken) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.over:
        m._fail(NO_WORK_AFTER_TERMINAL, o.rid, "scheduled again after its terminal")
    if view.slot >= 0 or o.stage != view.stage:
        m._fail(SLOTS, o.rid, f"took a slot at stage {o.stage} (holds {view.slot}, dispatched to {view.stage})")
    m.slots[o.stage] += 1
    if m.slots[o.stage] > m.capacity:
        m._fail(SLOTS, o.rid, f"stage {o.stage} holds {m.slots[o.stage]} slots, capacity {m.capacity}")
    view.slot = o.stage


def _on_slot_freed(m: Monitor, o: ob.SlotFreed) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.slot != o.stage:
        m._fail(SLOTS, o.rid, f"freed a slot at stage {o.stage} it did not hold")
    else:
        m.slots[o.stage] -= 1
    view.slot = -1


def _on_released(m: Monitor, o: ob.Released) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.slot >= 0:
        m._fail(CACHE_FREED, o.rid, f"state dropped while holding a slot at stage {view.slot}")
        m.slots[view.slot] -= 1
        view.slot = -1
    finished_companion = view.finished_at == 0
    view.settle()
    parent = m._view(view.parent)
    if parent is None:
        return
    if view.role is Role.CHILD:
        parent.open_children -= 1
    elif view.role is Role.COMPANION:
        if finished_companion:
            parent.companions_done += 1
        elif not parent.released and not parent.abort_requested and parent.terminals == 0:
            m._lost_companions.append(view.parent)  # the parent must fail in this very step


def _on_engine_changed(m: Monitor, o: ob.EngineChanged) -> None:
    m.engine = o.state


def _on_rpc_sent(m: Monitor, o: ob.RpcSent) -> None:
    m.rpcs[o.call_id] = o.method


def _on_rpc_answered(m: Monitor, o: ob.RpcAnswered) -> None:
    method = m.rpcs.pop(o.call_id, None)
    if method is None or method is not o.method:
        m._fail(ANSWERS_CORRELATED, None, f"answer to RPC {o.call_id} ({o.method.value}) matches no open call")
    elif not o.ok and not o.error:
        m._fail(RPC_ERRORS, None, f"RPC {o.call_id} failed without the worker's error")


def _on_orchestrator_stopped(m: Monitor, o: ob.OrchestratorStopped) -> None:
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, None, "orchestrator stopped twice or after the runtimes")
    m.stopped = 1


def _on_runtimes_stopped(m: Monitor, o: ob.RuntimesStopped) -> None:
    if m.stopped != 1:
        m._fail(SHUTDOWN_ORDER, None, "runtimes stopped before the orchestrator")
    m.stopped = 2


_HANDLERS: dict[type, Callable[[Monitor, Any], None]] = {
    ob.Submitted: _on_submitted, ob.Dispatched: _on_dispatched, ob.Forwarded: _on_forwarded,
    ob.Emitted: _on_emitted, ob.AbortRequested: _on_abort_requested, ob.AbortSent: _on_abort_sent,
    ob.AbortCommitted: _on_abort_committed, ob.AbortAnswered: _on_abort_answered,
    ob.SlotTaken: _on_slot_taken, ob.SlotFreed: _on_slot_freed, ob.Released: _on_released,
    ob.EngineChanged: _on_engine_changed, ob.RpcSent: _on_rpc_sent, ob.RpcAnswered: _on_rpc_answered,
    ob.OrchestratorStopped: _on_orchestrator_stopped, ob.RuntimesStopped: _on_runtimes_stopped,
}


def check_history(kinds: Sequence[StageKind], final: Sequence[bool],
                  steps: Iterable[tuple[ev.Event | None, Sequence[ob.Observation]]],
                  capacity: int = 1 << 30, complete: bool = True) -> list[Violation]:
    """Judge a whole history; return every violation (end-of-history rules if ``complete``)."""
    monitor = Monitor(kinds, final, capacity)
    for event, outputs in steps:
        monitor.step(event, outputs)
    if complete:
        monitor.finish()
    return monitor.violations


__all__ = ["CHECKS", "CheckInfo", "Monitor", "View", "Violation", "check_history"]
