"""The invariants: predicates over an observable history, written from the contracts.

They never consult the lifecycle table. A history is a sequence of *steps*: one input event
(what the client or a runtime did) followed by the observations the engine produced for it.
``Monitor.step`` judges one step; the facts it keeps per request are the minimum the
predicates need (memory: a small view per open request plus one per distinct id).

The check names live in ``_checks``, the per-request view in ``_view``, the per-observation rules
in ``_observation_rules``; this module holds the ``Monitor`` that runs them and the rules about
a whole step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from omni_fsm.invariants import upstream as up
from omni_fsm.invariants.checks import (
    ABORT_ENDS,
    ABORT_PREFIX,
    ADMISSION,
    ANSWERS_CORRELATED,
    AR_UPSTREAM,
    ASSIGNED_WORK,
    CACHE_FREED,
    CHECKS,
    COMMIT_AFTER_PHYSICAL,
    COMPANION_GATE,
    DEPENDENTS_INVISIBLE,
    DIFFUSION_WHOLE,
    FATAL_REACHES_ALL,
    FINISH_REASON,
    LAST_FINAL_TERMINAL,
    LATE_EVENTS_DROPPED,
    NEXT_LOGICAL_STAGE,
    NO_STATE_AFTER_TERMINAL,
    NO_WORK_AFTER_TERMINAL,
    ONE_TERMINAL,
    PARALLEL_ABORT,
    PARENT_AFTER_CHILDREN,
    REQUEST_SCOPED,
    ROUTE_AFTER_FINISH,
    RPC_ERRORS,
    SHUTDOWN_ENDS_ALL,
    SHUTDOWN_ORDER,
    SLOTS,
    STAGE_ORDER,
    THROUGH_ADAPTER,
    CheckInfo,
    Violation,
)
from omni_fsm.invariants.rules import _HANDLERS
from omni_fsm.invariants.view import VIEW_FIELDS, View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import EngineState, Outcome, Role, StageKind, pipeline_shape

_AR_STATUS: dict[type, str] = {
    ev.Scheduled: up.RUNNING, ev.Preempted: up.PREEMPTED, ev.AwaitGrammar: up.GRAMMAR,
    ev.AwaitRemoteKVs: up.REMOTE_KVS, ev.AwaitStreamingReq: up.STREAMING,
    ev.AwaitChunk: up.CHUNK, ev.InputReady: up.WAITING, ev.StageFinished: up.FINISHED,
}


class Monitor:
    """Judges a history step by step against every invariant; collects the violations."""

    def __init__(self, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int = 1 << 30) -> None:
        (self.kinds, self.final), self.capacity = pipeline_shape(kinds, final), capacity
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
        elif isinstance(event, (ev.StageFinished, ev.StageAborted)) and not rejected:  # the stage ended it itself
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
            rejected or isinstance(event, (ev.StageFailed, ev.ReplicaLost, ev.StageAborted))
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


__all__ = ["ABORT_ENDS", "ABORT_PREFIX", "ADMISSION", "ANSWERS_CORRELATED", "AR_UPSTREAM", "ASSIGNED_WORK",
           "CACHE_FREED", "CHECKS", "COMMIT_AFTER_PHYSICAL", "COMPANION_GATE", "DEPENDENTS_INVISIBLE",
           "DIFFUSION_WHOLE", "FATAL_REACHES_ALL", "FINISH_REASON", "LAST_FINAL_TERMINAL", "LATE_EVENTS_DROPPED",
           "NEXT_LOGICAL_STAGE", "NO_STATE_AFTER_TERMINAL", "NO_WORK_AFTER_TERMINAL", "ONE_TERMINAL",
           "PARALLEL_ABORT", "PARENT_AFTER_CHILDREN", "REQUEST_SCOPED", "ROUTE_AFTER_FINISH", "RPC_ERRORS",
           "SHUTDOWN_ENDS_ALL", "SHUTDOWN_ORDER", "SLOTS", "STAGE_ORDER", "THROUGH_ADAPTER", "VIEW_FIELDS",
           "CheckInfo", "Monitor", "View", "Violation", "check_history"]  # fmt: skip
