"""Checks of a runtime's raw report stream (what the orchestrator would tolerate and drop, and what its lifecycle
would reject)."""

from __future__ import annotations

import attrs

from omni_fsm.invariants import CHECKS
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.testing._engine_view import EngineView

ONE_FINISH = ("ORCH-INV-101", "one_finish_per_accepted_request")
NO_OUTPUT_AFTER_ABORT = ("ORCH-INV-209", "no_output_after_acknowledged_abort")
TRUTHFUL_ABORT = ("ORCH-INV-202", "truthful_abort_result")
ABORT_ANSWERED = ("ORCH-INV-202", "one_result_per_aborted_request")
RPC_ERRORS = ("ORCH-INV-205", "rpc_errors_propagated")
IN_ORDER = ("IO-INV-101", "reports_in_sequence")
#: a request ended ``Failed`` after a control RPC failed in the workers, in a run whose runtime fails no request on
#: its own (``may_fail=False``): the RPC's failure reached requests it is not theirs (a failure is request-scoped,
#: and a worker's RPC error reaches its caller only)
RPC_FAILURE_SCOPED = ("ORCH-INV-206", "failure_is_request_scoped")
#: the registry's shutdown-order invariant, whose check reads "the orchestrator stops before any runtime, and
#: nothing happens after": a runtime's report after its own shutdown() is something happening after it
SILENT_AFTER_SHUTDOWN = ("ORCH-INV-300", "no_report_after_shutdown")
#: an end the engine decides itself (``Aborted``) only for a request in flight when a pause in abort mode was asked
#: for, and each such request ended before that pause is answered as done
ENGINE_ABORTS = ("ORCH-INV-101", "engine_aborts_only_when_paused_in_abort_mode")
#: a report the engine would reject: the lifecycle table has no row for it in the request's state (the core answers
#: ``Rejected`` and fails the request). The table's rows are the request-state (and slot, the KV cache's) transitions
#: of upstream vLLM's scheduler, so a report with none breaks AR-INV-001, "Omni schedulers MUST preserve upstream
#: request-state and cache transitions" (an ``Output`` before ``SCHEDULED`` skips WAITING -> RUNNING)
NO_ROW = (CHECKS["ar_status_follows_upstream"].invariant, "ar_status_follows_upstream")
#: per call of a runtime, the rule an exception raised out of it breaks, and what the call owes instead: every
#: answer is a report, and a raise withholds it (the engine answers in its place: a dispatch it could not take fails
#: that request, a ``step`` that raises loses the replica and every request on it)
RAISED: dict[str, tuple[str, str, str]] = {
    "bind": ("ORCH-INV-101", "one_finish_per_accepted_request",
             "bind() takes the sink every report goes to; without it nothing the runtime is asked can be answered"),
    "add_request": ("ORCH-INV-101", "one_finish_per_accepted_request",
                    "a request the runtime cannot take is reported Failed, with the error, not raised"),
    "feed_input": ("ORCH-INV-101", "one_finish_per_accepted_request",
                   "a part of a streamed input the runtime cannot take fails its request by a Failed report"),
    "abort_requests": ("ORCH-INV-202", "one_result_per_aborted_request",
                       "each id of an abort is owed one AbortResult, ok=False with the error if it cannot be aborted"),
    "control": ("ORCH-INV-205", "rpc_errors_propagated",
                "a worker's exception is the RpcResult's error (ok=False), not raised out of control()"),
    "step": ("ORCH-INV-206", "failure_is_request_scoped",
             "a failure of one request is that request's Failed report; a raise out of step() loses the replica "
             "and every request on it"),
    "shutdown": ("ORCH-INV-300", "shutdown_stops_quietly",
                 "shutdown() stops the runtime, idempotently, and nothing happens after, a raise included"),
}  # fmt: skip

#: statuses of an accepted request that is not running (preempted, or parked until something arrives): every
#: scheduler status but running and ready again; an abort that goes by status may miss a request in one (B5)
WAITS = frozenset(rp.Status) - {rp.Status.SCHEDULED, rp.Status.INPUT_READY}


@attrs.frozen
class KitViolation:
    """A runtime broke its protocol: which invariant, which request or call, and how."""

    invariant: str
    check: str
    subject: int | None
    message: str
    #: the other violations found at the same step, shown after this one (the first found, the most specific)
    also: tuple[KitViolation, ...] = attrs.field(default=(), eq=False, repr=False)

    def __str__(self) -> str:
        subject = "" if self.subject is None else f" for {self.subject}"
        return "\n".join([f"{self.invariant} ({self.check}){subject}: {self.message}", *map(str, self.also)])


class RawStreamChecker:
    """Records what one runtime was asked and what it reported; collects violations.

    A replica that reports its death owes nothing more, so a death excuses every finish, abort
    result and RPC answer still open. Unless ``may_die`` is set (the runtime under test really
    can die), any death is therefore a violation (its message counts the requests it excused).
    A dead replica reports nothing after its death, and a replica that was shut down reports
    nothing at all (``shut_down``).

    A ``Failed`` end is legal (the runtime's own failure of the request), so on its own it proves nothing; unless
    ``may_fail`` is unset (the runtime under test fails no request the kit gives it): then every ``Failed`` is a
    violation, and one that follows a control RPC whose workers raised is that RPC's failure reaching the request
    (ORCH-INV-206).

    Given the stage ``spec`` (``serves``), it also judges as the engine does (``EngineView``): a
    report the lifecycle would reject, which would fail its request, is a violation (``NO_ROW``),
    unless the raw checks already failed that report.
    """

    def __init__(self, may_die: bool = False, spec: StageSpec | None = None, may_fail: bool = True) -> None:
        self.may_die = may_die
        self.may_fail = may_fail
        self.engine: EngineView | None = None
        if spec is not None:
            self.serves(spec)
        self.violations: list[KitViolation] = []
        self.accepted: set[int] = set()
        self.finished: dict[int, int] = {}
        self.aborted: set[int] = set()  #: acknowledged aborts
        self.abort_refused: set[int] = set()  #: the runtime said the request keeps running
        self.next_seq: dict[int, int] = {}
        self.rpcs: dict[int, bool] = {}  #: call id -> the kit made a worker raise
        self.asked_aborts: dict[int, set[int]] = {}  #: abort id -> the request ids still owed a result
        self.answered: set[int] = set()
        self.waiting: dict[int, rp.Status] = {}  #: open requests whose latest report is a move into one of ``WAITS``
        #: call id of each pause in abort mode -> the requests open when it was called (the engine may abort them)
        self.abort_pauses: dict[int, frozenset[int]] = {}
        #: requests a pause in abort mode answered as done should have ended, whose end has not arrived yet
        self.paused_out: set[int] = set()
        self.dead = self.closed = False

    def _fail(self, what: tuple[str, str], subject: int | None, message: str) -> None:
        violation = KitViolation(what[0], what[1], subject, message)
        violations = self.violations
        if violations:  # the kit fails at the first step that has any: the first one shows them all
            violations[0] = attrs.evolve(violations[0], also=(*violations[0].also, violation))
        violations.append(violation)

    def serves(self, spec: StageSpec) -> None:
        """Judge from now on as an engine whose one stage is ``spec`` would (before any request is added)."""
        self.engine = EngineView(spec)

    # -- what the kit asked ---------------------------------------------------------------------

    def added(self, req_id: int) -> None:
        self.accepted.add(req_id)
        self.next_seq[req_id] = 0
        if self.engine is not None:
            self.engine.added(req_id)

    def rpc(self, call_id: int, worker_raises: bool, aborts_all: bool = False) -> None:
        """Record control RPC ``call_id`` (``aborts_all``: a pause in abort mode: the engine ends what is open)."""
        self.rpcs[call_id] = worker_raises
        if aborts_all:
            self.abort_pauses[call_id] = frozenset(self.open_requests())

    def aborting(self, abort_id: int, req_ids: list[int]) -> None:
        self.asked_aborts[abort_id] = set(req_ids)
        if self.engine is not None:
            self.engine.aborting(abort_id, req_ids)

    def shut_down(self) -> None:
        """Record that the runtime is being shut down: from now on any report is a violation."""
        self.closed = True

    def open_requests(self) -> list[int]:
        """Return the accepted requests that have neither ended nor had an abort acknowledged, in id order."""
        return sorted(self.accepted - set(self.finished) - self.aborted)

    # -- what the runtime reported -----------------------------------------------------------------

    def __call__(self, report: rp.Report) -> None:
        before = len(self.violations)
        engine = None if self.closed or self.dead else self.engine  # (what follows a death or shutdown is dropped)
        rejected = [] if engine is None else engine.report(report)
        self._judge(report)
        if len(self.violations) == before:  # a report the raw checks failed is not judged twice
            for judged, state, event in rejected:
                self._fail(NO_ROW, getattr(judged, "req_id", None), _rejection(judged, state, event))

    def _judge(self, report: rp.Report) -> None:
        if self.closed:
            subject = getattr(report, "req_id", getattr(report, "call_id", None))
            self._fail(SILENT_AFTER_SHUTDOWN, subject, f"{type(report).__name__} after shutdown() was called")
        elif self.dead:
            subject = getattr(report, "req_id", None)
            self._fail(ONE_FINISH, subject, f"{type(report).__name__} after the replica reported its death")
        elif isinstance(report, rp.RequestReport):
            self._request(report)
        elif isinstance(report, rp.AbortResult):
            self._abort(report)
        elif isinstance(report, rp.RpcResult):
            self._rpc(report)
        elif isinstance(report, (rp.ReplicaDied, rp.EngineDead)):
            self.dead = True
            if not self.may_die:
                owed = self.open_requests()
                self._fail(ONE_FINISH, owed[0] if owed else None,
                           f"{type(report).__name__} though this run does not let the runtime die (may_die): a death "
                           f"excuses the {len(owed)} request(s) still owed a finish")  # fmt: skip

    def _request(self, report: rp.RequestReport) -> None:
        rid = report.req_id
        if rid in self.aborted:
            self._fail(NO_OUTPUT_AFTER_ABORT, rid, f"{type(report).__name__} after the abort was acknowledged")
            return
        if rid in self.finished:
            self._fail(ONE_FINISH, rid, f"{type(report).__name__} after the request finished")
            return
        if rid not in self.accepted:
            self._fail(ONE_FINISH, rid, "a report about a request never accepted")
            return
        if rid in self.paused_out and isinstance(report, (rp.Output, rp.StatusChanged)):
            self._fail(ENGINE_ABORTS, rid, f"{type(report).__name__} after a pause in abort mode was answered done "
                                           f"(the request should have ended)")  # fmt: skip
        if report.seq != self.next_seq[rid]:
            self._fail(IN_ORDER, rid, f"seq {report.seq}, expected {self.next_seq[rid]}")
        self.next_seq[rid] = report.seq + 1
        if isinstance(report, rp.StatusChanged) and report.status in WAITS:
            self.waiting[rid] = report.status
        else:
            self.waiting.pop(rid, None)
        if isinstance(report, rp.Aborted) and not any(rid in open_ for open_ in self.abort_pauses.values()):
            self._fail(ENGINE_ABORTS, rid, "the runtime ended the request as aborted, but no pause in abort mode "
                                           "was asked for while it ran")  # fmt: skip
        if isinstance(report, rp.Failed) and not self.may_fail:
            self._unexcused_failure(rid)
        if isinstance(report, (rp.Finished, rp.Failed, rp.Aborted)):
            self.finished[rid] = 1
            self.abort_refused.discard(rid)

    def _unexcused_failure(self, rid: int) -> None:
        """Judge ``Failed`` for ``rid`` in a run that does not let the runtime fail requests (``may_fail``)."""
        raised = [call_id for call_id, raises in self.rpcs.items() if raises]
        if raised:
            self._fail(RPC_FAILURE_SCOPED, rid, f"Failed after RPC {raised[-1]} failed in its workers, though this run "
                                                f"does not let the runtime fail requests (may_fail): an RPC's failure "
                                                f"is not the request's")  # fmt: skip
        else:
            self._fail(ONE_FINISH, rid, "Failed though this run does not let the runtime fail requests (may_fail)")

    def _abort(self, report: rp.AbortResult) -> None:
        rid = report.req_id
        owed = self.asked_aborts.get(report.abort_id)
        if owed is None or rid not in owed:
            self._fail(ABORT_ANSWERED, rid, f"a result for abort {report.abort_id} of {rid}, which nobody asked "
                                            f"for (or a second one)")  # fmt: skip
            return
        owed.discard(rid)
        if report.ok:
            if rid in self.accepted and rid not in self.finished:
                self.aborted.add(rid)
                self.waiting.pop(rid, None)
            self.abort_refused.discard(rid)
        elif rid in self.finished or rid in self.aborted:
            self._fail(TRUTHFUL_ABORT, rid, "abort reported failed for a request that had already ended")
        else:
            self.abort_refused.add(rid)

    def _rpc(self, report: rp.RpcResult) -> None:
        if report.call_id not in self.rpcs or report.call_id in self.answered:
            self._fail(RPC_ERRORS, report.call_id, "an RPC answer for no open call (or a second one)")
            return
        self.answered.add(report.call_id)
        raises = self.rpcs[report.call_id]
        if raises and (report.ok or not report.error):
            self._fail(RPC_ERRORS, report.call_id, "a worker raised but the RPC answered without the error")
        if not raises and not report.ok and report.call_id not in self.abort_pauses:  # a mode it lacks: refused
            self._fail(RPC_ERRORS, report.call_id, f"RPC failed though no worker raised: {report.error}")
        if report.ok and report.call_id in self.abort_pauses:  # what it should have ended may not run on
            self.paused_out |= self.abort_pauses[report.call_id] - set(self.finished) - self.aborted

    def at_end(self, still_busy_after: int | None = None) -> list[KitViolation]:
        """Judge a runtime stepped until idle (or, ``still_busy_after``, one that still said it was busy after
        that many steps), before its shutdown: every request ended, every RPC and abort answered; return all
        violations."""
        stepped = "stepped until idle" if still_busy_after is None else f"still busy after {still_busy_after} steps"
        if not self.dead:
            unfinished = []  # the least specific: often the consequence of an abort or RPC below, so shown after
            for rid in self.open_requests():
                if rid in self.abort_refused:
                    self._fail(TRUTHFUL_ABORT, rid, "abort reported failed, but the request never ran on to a finish")
                else:
                    unfinished.append(rid)
            for call in sorted(set(self.rpcs) - self.answered):
                self._fail(RPC_ERRORS, call, "RPC never answered")
            for abort_id, owed in sorted(self.asked_aborts.items()):
                for rid in sorted(owed):
                    self._fail(ABORT_ANSWERED, rid, f"abort {abort_id} of request {rid} never answered")
            for rid in unfinished:
                self._fail(ONE_FINISH, rid, f"accepted but never finished ({stepped}, before shutdown)")
        return self.violations


def _rejection(report: rp.Report, state: object, event: str) -> str:
    """Return what a rejected report was and where: the engine has no transition for it, and fails the request."""
    what = type(report).__name__
    if isinstance(report, rp.StatusChanged):
        what += f"({getattr(report.status, 'name', report.status)})"
    if isinstance(report, rp.RequestReport):
        what += f" seq {report.seq}"
    name = getattr(state, "name", state)
    return (f"{what} in state {name}: the lifecycle has no row for {event} there, so the engine would reject it "
            f"(Rejected) and fail the request")  # fmt: skip
