"""The kit's view of a runtime as the engine sees it: the lifecycle core, fed as the orchestrator feeds it.

A runtime's report stream can be clean by the raw checks (in sequence, one finish, truthful
aborts) and still be one the engine cannot take: a report the lifecycle table has no row for
(an ``Output`` before ``SCHEDULED``, a ``PREEMPTED`` of a request still queued) makes the core
answer ``Rejected`` and fail the request, with nothing the runtime could see. ``EngineView``
runs the same ``Lifecycle`` over the kit's calls and the runtime's reports and says which report
it rejected, in which state.
"""

from __future__ import annotations

import contextlib

from omni_fsm import LifecycleError, ReqState
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.engine.core import Lifecycle
from omni_runtime.core import protocol as rp
from omni_runtime.core.intake import report_event
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.errors import OmniRuntimeError

UNBOUNDED = 1 << 40  #: the view's running slots: every request the kit adds is dispatched


class EngineView:
    """The lifecycle of an engine whose one stage is the runtime under test (``spec``), as the orchestrator drives it.

    Fed the kit's calls (``added``, ``aborting``) and the runtime's reports (``report``): each per-request
    report in sequence order (early ones held, duplicates dropped, as the orchestrator does), each
    abort result the engine waits for as ``AbortDone`` / ``AbortFailed``. The engine stays running:
    the kit hands the runtime requests while it is paused or asleep, where an engine would hold them,
    so the view judges each request as dispatched when the kit added it. For the same reason its capacity
    is unbounded: the kit hands the runtime more requests than an engine's slots would let through (the
    runtime queues what it cannot run), and every one of them was dispatched.
    """

    def __init__(self, spec: StageSpec) -> None:
        pipeline = Pipeline((spec,))
        self.core = Lifecycle(pipeline.kinds, pipeline.final, UNBOUNDED)
        self.next_seq: dict[int, int] = {}
        self.held: dict[int, dict[int, rp.RequestReport]] = {}
        self.aborts: dict[int, set[int]] = {}  #: request id -> the kit's abort ids not answered yet

    def state(self, rid: int) -> ReqState | None:
        """Return the request's lifecycle state (``None``: not tracked, e.g. ended)."""
        rec = self.core.records.get(rid)
        return None if rec is None else rec.state

    # -- what the kit asked -------------------------------------------------------------------------

    def added(self, rid: int) -> None:
        """The kit added request ``rid``: a client request of one sample, dispatched to the stage at once."""
        try:
            self.core.handle(ev.Submit(rid, 1, 0))
        except LifecycleError:  # an id the engine would refuse is never the runtime's to report on
            return
        self.next_seq[rid] = 0

    def aborting(self, abort_id: int, rids: list[int]) -> None:
        """The kit aborted ``rids`` (``abort_id``); a request not aborting yet starts its abort."""
        for rid in rids:
            if rid not in self.next_seq:
                continue
            self.aborts.setdefault(rid, set()).add(abort_id)
            if self.state(rid) not in (None, ReqState.ABORTING):
                with contextlib.suppress(LifecycleError):  # (every live state has a row for an abort)
                    self.core.handle(ev.Abort(rid))

    # -- what the runtime reported ----------------------------------------------------------------------

    def report(self, report: rp.Report) -> list[tuple[rp.Report, ReqState, str]]:
        """Feed one report; return each report it led to that the lifecycle rejected: (the report, the state it
        came in, the event it was)."""
        if isinstance(report, rp.RequestReport):
            return self._request(report)
        if isinstance(report, rp.AbortResult):
            return self._abort_result(report)
        return []

    def _request(self, report: rp.RequestReport) -> list[tuple[rp.Report, ReqState, str]]:
        rid, seq = report.req_id, report.seq
        expected = self.next_seq.get(rid)
        if expected is None or seq.__class__ is not int or seq < expected:  # unknown, malformed, a duplicate
            return []
        held = self.held.setdefault(rid, {})
        if seq > expected:
            held.setdefault(seq, report)
            return []
        rejected: list[tuple[rp.Report, ReqState, str]] = []
        nxt: rp.RequestReport | None = report
        while nxt is not None:
            self.next_seq[rid] = nxt.seq + 1
            try:
                event = report_event(0, nxt)
            except OmniRuntimeError:  # no protocol report: nothing the lifecycle is fed
                event = None
            if event is not None:
                rejected += self._feed(nxt, event)
            nxt = held.pop(self.next_seq[rid], None)
        if not held:
            del self.held[rid]
        return rejected

    def _abort_result(self, report: rp.AbortResult) -> list[tuple[rp.Report, ReqState, str]]:
        """An answer to one of the kit's aborts: fed when the engine waits for it (the request is aborting), a
        failure only once no other abort of it is still unanswered (the engine sends one at a time)."""
        rid = report.req_id
        owed = self.aborts.get(rid)
        if owed is None or report.abort_id not in owed:
            return []
        owed.discard(report.abort_id)
        if not owed:
            del self.aborts[rid]
        if self.state(rid) is not ReqState.ABORTING:
            return []
        if report.ok:
            return self._feed(report, ev.AbortDone(rid, 0))
        if owed:
            return []
        return self._feed(report, ev.AbortFailed(rid, 0))

    def _feed(self, report: rp.Report, event: ev.StageEvent) -> list[tuple[rp.Report, ReqState, str]]:
        before = self.state(event.rid)
        outputs = self.core.handle(event)
        return [(report, before, o.event) for o in outputs
                if isinstance(o, ob.Rejected) and o.rid == event.rid and before is not None]  # fmt: skip
