"""Report intake: what a runtime reports, judged before the lifecycle sees it.

A per-request report is taken in ``seq`` order from the replica its request is bound to: one that arrives early is
held until its turn, a duplicate or a misrouted one is counted and dropped, and one outside the protocol (a ``seq``
or token count that is no int, an unknown status, a payload its adapter refuses) fails its request with a message
that says why. The report in hand (``ReportInHand``) goes with its lifecycle event to the translation. Reports about
no one request (abort and RPC results, a replica's or the engine's death) and a runtime that raised while carrying
out a command are answered here too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import attrs

from omni_fsm import StopKind
from omni_fsm import events as ev
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.routes import ReportInHand, Route, Routing
from omni_runtime.core.translation import Commands, Translation
from omni_runtime.errors import OmniRuntimeError

_STATUS_EVENTS: dict[rp.Status, type[ev.StageEvent]] = {
    rp.Status.SCHEDULED: ev.Scheduled, rp.Status.PREEMPTED: ev.Preempted,
    rp.Status.AWAIT_GRAMMAR: ev.AwaitGrammar, rp.Status.AWAIT_REMOTE_KVS: ev.AwaitRemoteKVs,
    rp.Status.AWAIT_STREAMING: ev.AwaitStreamingReq, rp.Status.AWAIT_CHUNK: ev.AwaitChunk,
    rp.Status.INPUT_READY: ev.InputReady,
}  # fmt: skip


class Intake:
    """Takes each runtime report (the driver stamps its stage and replica) and returns the commands it leads to."""

    def __init__(self, routing: Routing, translation: Translation) -> None:
        self.routing = routing
        self.routes = routing.routes
        self.stats = routing.stats
        self.translation = translation
        self.feed = translation.feed
        self.lifecycle = translation.lifecycle
        self.outputs = translation.outputs
        self.in_hand = ReportInHand()  #: reused for every in-order report

    def report(self, stage: int, replica: int, report: rp.Report) -> Commands:
        """Handle one report of ``replica`` of ``stage``; return commands."""
        kind = _KINDS.get(report.__class__)
        if kind is None:
            if not isinstance(report, rp.RequestReport):
                handler = _REPORTS.get(report.__class__) or _report_handler(report.__class__)
                return handler(self, stage, replica, report)
            kind = _kind_of(report.__class__)  # a subclass of a protocol report: resolved once
        # the hot path: a per-request report of a protocol class, in order, from its replica
        rid = report.req_id  # type: ignore[attr-defined]
        route = self.routes.get(rid)
        seq = report.seq  # type: ignore[attr-defined]
        if (route is None or route.stage != stage or route.replica != replica or route.held is not None
                or seq.__class__ is not int or seq != route.next_seq):  # the slow path judges the rest
            return self._request_report(stage, replica, report, kind)  # type: ignore[arg-type]
        return self._in_order(rid, stage, report, route, kind)  # type: ignore[arg-type]

    def _request_report(self, stage: int, replica: int, report: rp.RequestReport, kind: type) -> Commands:
        rid = report.req_id
        route = self.routes.get(rid)
        if route is None or route.stage != stage:  # late: the lifecycle drops it as unknown / stale
            if route is None and _never_given(rid, self.routing.next_rid):  # counted: a wait that gives up names it
                self.stats.unknown_ids += 1
                self.routing.unknown_id_last = (f"{type(report).__name__} under request id {rid!r} "
                                                f"({type(rid).__name__}) from runtime {stage}/{replica}")  # fmt: skip
            try:
                event = _event_of(rid, stage, report, kind, replica)
            except _Malformed:
                event = ev.StageFailed(rid, stage, replica=replica)
            out = self.feed(event)
            finished = self.routing.finished_at(rid, stage)
            if finished is not None and finished[0] == replica and _after(report.seq, finished[1]):  # a protocol break
                self.stats.after_finished += 1
                out.append(cmd.ReportAfterFinished(stage, replica, rid, type(report).__name__))
            return out
        if route.replica != replica:
            self.stats.misrouted += 1
            return []
        if not isinstance(report.seq, int) or isinstance(report.seq, bool):  # outside the protocol: its request fails
            route.error = f"the runtime's {type(report).__name__} has seq {report.seq!r} (an int is needed)"
            return self.feed(ev.StageFailed(rid, stage, replica=replica))
        if report.seq != route.next_seq:
            if report.seq < route.next_seq or (route.held is not None and report.seq in route.held):
                self.stats.duplicates += 1
            else:
                if route.held is None:
                    route.held = {}
                route.held[report.seq] = report
            return []
        out = self._in_order(rid, stage, report, route, kind)
        if route.held is None:  # the common case: nothing arrived early
            return out
        while (route := self.routes.get(rid)) is not None and route.held and route.stage == stage:
            nxt = route.held.pop(route.next_seq, None)
            if nxt is None:
                break
            out += self._in_order(rid, stage, nxt, route, _KINDS[nxt.__class__])
        if route is not None and not route.held:
            route.held = None
        return out

    def _in_order(self, rid: int, stage: int, report: rp.RequestReport, route: Route, kind: type) -> Commands:
        route.next_seq += 1
        before, text_before = route.result, route.text
        ctx = self.in_hand
        ctx.rid, ctx.route, ctx.report, ctx.result_before, ctx.text_before = rid, route, report, before, text_before
        try:
            event = _event_of(rid, stage, report, kind, route.replica)
            if kind is rp.Output:
                payload = report.payload  # type: ignore[attr-defined]
                route.result = self.outputs[stage].accumulate(before, payload)
                ctx.payload = payload
                text = report.text  # type: ignore[attr-defined]
                if text is not None:
                    if not isinstance(text, str):
                        raise _Malformed(f"runtime reported an Output with text {text!r} (a str or None)")
                    text = str(text)  # a str subclass (numpy.str_) as plain text
                    route.text = text if text_before is None else text_before + text
                ctx.text = text
            elif kind is rp.Finished:
                self.routing.note_finish(rid, stage, route.replica, report.seq)
                route.result = self.outputs[stage].finish(before, report.payload)  # type: ignore[attr-defined]
                route.stop_reason = report.stop_reason  # type: ignore[attr-defined]
            elif kind is rp.Failed:
                route.error = report.error  # type: ignore[attr-defined]
        except Exception as exc:  # a report outside the protocol (or a payload its adapter refuses) fails its request
            route.result, route.text, ctx.payload, ctx.text = before, text_before, None, None
            route.error = str(exc) if isinstance(exc, _Malformed) else (
                f"the runtime's {type(report).__name__} cannot be taken by its stage: {type(exc).__name__}: {exc}")
            event = ev.StageFailed(rid, stage, replica=route.replica)
        rec = self.lifecycle.records.get(rid)
        ctx.state_before = None if rec is None else rec.state  # named by a ``Rejected``, if any
        out = self.feed(event, ctx)  # a runtime report never raises a LifecycleError: nothing to undo
        ctx.rid = -1  # no report in hand (the next one overwrites what this one left)
        return out

    # -- reports about no one request ----------------------------------------------------------------------

    def _abort_result(self, stage: int, replica: int, report: rp.AbortResult) -> Commands:
        routing = self.routing
        if routing.cleanup_aborts.pop(report.abort_id, None) is not None:  # a request let go of: no waiter
            return []
        if routing.aborts.get(report.req_id) != (report.abort_id, stage, replica):
            self.stats.unknown_results += 1
            return []
        del routing.aborts[report.req_id]
        return self.feed((ev.AbortDone if report.ok else ev.AbortFailed)(report.req_id, stage, replica=replica))

    def _rpc_report(self, stage: int, replica: int, report: rp.RpcResult) -> Commands:
        return self.rpc_result(report.call_id, (stage, replica), report.error if not report.ok else None)

    def _engine_dead(self, stage: int, replica: int, report: rp.EngineDead) -> Commands:
        return self.translation.die()

    def rpc_result(self, call_id: int, where: tuple[int, int], error: str | None) -> Commands:
        """Take the answer of RPC ``call_id`` from the replica at ``where`` (``error``: it failed there)."""
        rpc = self.routing.rpcs.get(call_id)
        if rpc is None:  # late or duplicated: the lifecycle drops it as unknown
            return self.feed(ev.RpcFailed(call_id, error) if error else ev.RpcDone(call_id))
        if where not in rpc.waiting:
            self.stats.duplicates += 1
            return []
        rpc.waiting.discard(where)
        if error is not None and rpc.error is None:
            rpc.error = error
        if rpc.waiting:
            return []
        del self.routing.rpcs[call_id]
        return self.feed(ev.RpcFailed(call_id, rpc.error) if rpc.error else ev.RpcDone(call_id))

    def replica_died(self, stage: int, replica: int) -> Commands:
        """``replica`` of ``stage`` is lost: the requests bound to it end (the engine dies with a stage's last one)."""
        routing = self.routing
        cause = routing.loss_causes.pop((stage, replica), None)
        if not routing.live[stage][replica]:
            return []
        routing.live[stage][replica] = False
        for rid in [rid for rid, v in routing.aborts.items() if v[1:] == (stage, replica)]:
            del routing.aborts[rid]
        for abort_id in [a for a, v in routing.cleanup_aborts.items() if v == (stage, replica)]:
            del routing.cleanup_aborts[abort_id]
        out: Commands = []
        lost = None if cause is None else f"replica {stage}/{replica} is lost: {cause}"
        if not any(routing.live[stage]):  # no live replica left: the engine is dead
            out += self.translation.die(lost)
        else:
            bound = sorted(r for r, route in self.routes.items() if route.stage == stage and route.replica == replica)
            for rid in bound:
                if lost is not None and self.routes[rid].error is None:
                    self.routes[rid].error = lost
                out += self.feed(ev.ReplicaLost(rid, stage, replica=replica))
        for call_id in sorted(routing.rpcs):
            if (stage, replica) in routing.rpcs[call_id].waiting:
                out += self.rpc_result(call_id, (stage, replica), "ReplicaDied: replica lost during the RPC")
        return out

    def runtime_raised(self, command: cmd.Command, error: str) -> Commands:
        """A runtime raised ``error`` while carrying out ``command``: answer as its report would have (see
        ``Orchestrator.runtime_raised``)."""
        routing = self.routing
        if isinstance(command, cmd.Dispatch | cmd.FeedInput):
            route = self.routes.get(command.rid)
            if route is None or (route.stage, route.replica) != (command.stage, command.replica):
                return []
            route.error = error
            failed = self.feed(ev.StageFailed(command.rid, command.stage, replica=command.replica))
            if isinstance(command, cmd.FeedInput):  # the runtime holds the session it could not feed: let it go
                abort_id = routing.call_id()
                routing.cleanup_aborts[abort_id] = (command.stage, command.replica)
                failed.append(cmd.AbortAt(command.stage, command.replica, abort_id, (command.rid,)))
            return failed
        if isinstance(command, cmd.AbortAt):
            out: Commands = []
            where = (command.stage, command.replica)
            for rid in sorted(command.req_ids):
                if routing.aborts.get(rid) == (command.abort_id, *where):
                    del routing.aborts[rid]
                    out += self.feed(ev.AbortFailed(rid, command.stage, replica=command.replica))
                    again = routing.aborts.get(rid)
                    if again is not None and again[1:] == where:  # sent again at once: fail it instead
                        del routing.aborts[rid]
                        out = [_without(c, rid) for c in out]
                        self.routes[rid].error = f"its physical abort raised: {error}"
                        out += self.feed(ev.StageFailed(rid, command.stage, replica=command.replica))
            return [c for c in out if not (isinstance(c, cmd.AbortAt) and not c.req_ids)]
        if isinstance(command, cmd.RpcCall):
            return self.rpc_result(command.call_id, (command.stage, command.replica), error)
        raise OmniRuntimeError(f"{type(command).__name__} is not carried out by a runtime")


_Handler = Callable[[Intake, int, int, Any], Commands]
#: report class -> handler, for the reports about no one request (per-request ones go through ``_KINDS``);
#: a subclass of a protocol report is resolved once through its MRO
_REPORTS: dict[type, _Handler] = {
    rp.AbortResult: Intake._abort_result, rp.RpcResult: Intake._rpc_report,
    rp.ReplicaDied: lambda self, stage, replica, report: self.replica_died(stage, replica),
    rp.EngineDead: Intake._engine_dead,
}  # fmt: skip
#: per-request report class -> the protocol class it is (the same, or the base of a subclass)
_KINDS: dict[type, type] = {k: k for k in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed, rp.Aborted)}


def _never_given(rid: Any, next_rid: int) -> bool:
    """Return whether ``rid`` is no id the orchestrator gave: not an integer, or outside ``0 .. next_rid - 1``."""
    try:
        return not 0 <= operator.index(rid) < next_rid
    except TypeError:
        return True


def _after(seq: Any, finished_seq: int) -> bool:
    """Return whether ``seq`` comes after a ``Finished`` numbered ``finished_seq`` (a copy of an earlier report, the
    ``Finished`` among them, is only a duplicate delivered late)."""
    return seq.__class__ is int and seq > finished_seq


def _without(command: cmd.Command, rid: int) -> cmd.Command:
    """Return ``command`` less ``rid`` if it is a physical abort that names it."""
    if isinstance(command, cmd.AbortAt) and rid in command.req_ids:
        return attrs.evolve(command, req_ids=tuple(r for r in command.req_ids if r != rid))
    return command


class _Malformed(Exception):
    """A per-request report outside the protocol: it fails its request (the message says why)."""


def _event_of(rid: int, stage: int, report: rp.RequestReport, kind: type, replica: int = 0) -> ev.StageEvent:
    """Return the lifecycle event of a per-request report (``kind``: its protocol class) from ``replica``.

    Raises ``_Malformed`` for a report outside the protocol (an unknown status, a token count that
    is not an int >= 0, a stop that is not a ``StopKind``): it fails its request.
    """
    if kind is rp.Output:
        tokens = report.tokens  # type: ignore[attr-defined]
        if (tokens.__class__ is not int and (isinstance(tokens, bool) or not isinstance(tokens, int))) or tokens < 0:
            raise _Malformed(f"runtime reported an Output of {tokens!r} tokens ({type(tokens).__name__}; an int >= 0)")
        return ev.StageOutput(rid, stage, tokens, replica=replica)
    if kind is rp.Finished:
        stop = report.stop  # type: ignore[attr-defined]
        if stop.__class__ is not StopKind:
            raise _Malformed(f"runtime reported a Finished with stop {stop!r} (a StopKind)")
        return ev.StageFinished(rid, stage, stop, replica=replica)
    if kind is rp.StatusChanged:
        event = _STATUS_EVENTS.get(report.status)  # type: ignore[attr-defined]
        if event is None:
            raise _Malformed(f"runtime reported an unknown status {report.status!r}")  # type: ignore[attr-defined]
        return event(rid, stage, replica=replica)
    if kind is rp.Aborted:
        return ev.StageAborted(rid, stage, replica=replica)
    return ev.StageFailed(rid, stage, replica=replica)


def report_event(stage: int, report: rp.RequestReport) -> ev.StageEvent:
    """Return the lifecycle event the orchestrator feeds for an in-order per-request ``report`` of ``stage``'s runtime
    (a report outside the protocol: ``StageFailed``, as it fails its request). The conformance kit judges a runtime's
    stream with it, as the engine would.

    Raises ``OmniRuntimeError`` for a report class that is no protocol report (nor a subclass of one).
    """
    try:
        return _event_of(report.req_id, stage, report, _KINDS.get(report.__class__) or _kind_of(report.__class__))
    except _Malformed:
        return ev.StageFailed(report.req_id, stage)


def _by_nearest_base(table: dict[type, Any], cls: type, what: str) -> Any:
    """Return (and cache in ``table``) the entry of ``cls``'s nearest base that ``table`` has."""
    for base in cls.__mro__:
        if base in table:
            table[cls] = table[base]
            return table[base]
    raise OmniRuntimeError(f"unknown {what} type {cls.__name__}")


def _report_handler(cls: type) -> _Handler:
    """Return the handler of a report subclass, by its nearest protocol base."""
    handler: _Handler = _by_nearest_base(_REPORTS, cls, "report")
    return handler


def _kind_of(cls: type) -> type:
    """Return the protocol class of a per-request report subclass."""
    kind: type = _by_nearest_base(_KINDS, cls, "request report")
    return kind
