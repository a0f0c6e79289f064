"""The sans-IO orchestrator: client calls and runtime reports in, commands out.

``omni_fsm.engine.core.Lifecycle`` makes every lifecycle decision. This module holds the routing data
around those decisions and nothing else: the pipeline description, the binding of each request
to a stage replica, per-request output buffers (and their order), abort and RPC correlation
ids. It translates runtime reports into lifecycle events and the lifecycle's observations into
commands. No I/O, no asyncio, no threads.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import attrs

from omni_fsm import (
    ENGINE_TERMINAL,
    SPEC,
    ControlMethod,
    EngineState,
    LifecycleError,
    Outcome,
    ReqState,
    Role,
    Spec,
    StageKind,
    StopKind,
)
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.engine.core import Lifecycle, dependent_id, fanout
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.adapters import INPUT_ADAPTERS, OUTPUT_ADAPTERS, companion_input
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt, StageInput
from omni_runtime.errors import EngineNotRunning, OmniRuntimeError, RequestRefused

StepHook = Callable[[ev.Event | None, list[ob.Observation]], None]
Commands = list[cmd.Command]

_STATUS_EVENTS: dict[rp.Status, type[ev.StageEvent]] = {
    rp.Status.SCHEDULED: ev.Scheduled, rp.Status.PREEMPTED: ev.Preempted,
    rp.Status.AWAIT_GRAMMAR: ev.AwaitGrammar, rp.Status.AWAIT_REMOTE_KVS: ev.AwaitRemoteKVs,
    rp.Status.AWAIT_STREAMING: ev.AwaitStreamingReq, rp.Status.AWAIT_CHUNK: ev.AwaitChunk,
    rp.Status.INPUT_READY: ev.InputReady,
}  # fmt: skip


class _Route:
    """Routing data of one tracked request (client, child or companion)."""

    __slots__ = ("companion", "companions", "error", "feeds", "held", "input_ended", "next_seq", "parent", "prompt",
                 "replica", "result", "stage", "stop_reason", "text")  # fmt: skip

    def __init__(self, prompt: Prompt, parent: int = -1, companion: bool = False) -> None:
        self.prompt = prompt
        self.parent = parent
        self.companion = companion
        self.stage = -1
        self.replica = -1
        self.next_seq = 0
        self.held: dict[int, rp.RequestReport] | None = None  #: reports that arrived early, by seq
        self.result: Any = None  #: accumulated output at the current stage
        self.text: str | None = None  #: accumulated text at the current stage (an AR stage that detokenizes)
        self.stop_reason: str | int | None = None  #: what stopped it at the current stage
        #: (id, result) of each finished CFG companion, in companion (id) order
        self.companions: tuple[tuple[int, Any], ...] = ()
        self.error: str | None = None
        #: a streaming-input request's parts fed before its dispatch (sent right after it)
        self.feeds: list[tuple[StageInput, bool]] = []
        self.input_ended = False  #: a streaming-input request's last part was fed


class Stats:
    """What the orchestrator itself dropped (the lifecycle counts what it dropped)."""

    __slots__ = ("duplicates", "misrouted", "unknown_ids", "unknown_results")

    def __init__(self) -> None:
        self.duplicates = 0  #: a per-request report whose seq was already handled
        self.misrouted = 0  #: a report from a replica the request is not bound to
        self.unknown_ids = 0  #: a per-request report under an id the orchestrator never gave (``str(rid)``, say)
        self.unknown_results = 0  #: an abort result nobody waits for (late or duplicated)

    def as_dict(self) -> dict[str, int]:
        """Return the counters by name."""
        return {name: getattr(self, name) for name in self.__slots__}


class _Rpc:
    __slots__ = ("error", "waiting")

    def __init__(self, waiting: set[tuple[int, int]]) -> None:
        self.waiting = waiting
        self.error: str | None = None


class Orchestrator:
    """Routes requests through a pipeline; every lifecycle decision is the ``Lifecycle``'s."""

    def __init__(self, pipeline: Pipeline, *, spec: Spec = SPEC, on_step: StepHook | None = None) -> None:
        self.pipeline = pipeline = require_pipeline(pipeline, "Orchestrator")
        self.lifecycle = Lifecycle(pipeline.kinds, pipeline.final, pipeline.slots, spec=spec)
        self.on_step = on_step
        self.stats = Stats()
        self.routes: dict[int, _Route] = {}
        self.live: list[list[bool]] = [[True] * s.replicas for s in pipeline.stages]
        self._rr = [0] * len(pipeline.stages)
        self._inputs = [INPUT_ADAPTERS[s.adapter] for s in pipeline.stages]
        self._outputs = [OUTPUT_ADAPTERS[s.kind] for s in pipeline.stages]
        self._next_rid = 0
        self._next_call = 0
        #: request id -> (abort id, stage, replica) of its physical abort in flight (the table sends one at a time)
        self._aborts: dict[int, tuple[int, int, int]] = {}
        self._abort_callers: dict[int, list[int]] = {}  #: rid -> abort call ids waiting
        #: physical aborts sent to release a request that already ended (its feed failed): answered to nobody
        self._cleanup_aborts: dict[int, tuple[int, int]] = {}  #: abort id -> (stage, replica)
        self._rpcs: dict[int, _Rpc] = {}
        self._payload: Any = None  #: the payload of the output being handled (for partials)
        self._text: str | None = None  #: the text of the output being handled (for partials)
        #: (rid, route, result before, text before) of the in-order report being fed: restored if the lifecycle drops it
        self._undo: tuple[int, _Route, Any, str | None] | None = None
        #: (rid, the runtime's report, the request's state before it) of the report being fed: what a ``Rejected``
        #: of it says in the request's error
        self._judged: tuple[int, rp.Report, ReqState | None] | None = None
        self._abort_batch: dict[tuple[int, int], list[int]] | None = None  #: AbortSent of one step, by replica
        self.stopped = False
        self.unknown_id_last: str | None = None  #: the last report under an id never given: what, which id, where
        self.hook_error: Exception | None = None  #: what ``on_step`` raised (the engine died of it; not called again)
        self.death: str | None = None  #: why the engine died, where that is known (named by its fatal terminals)
        self._loss_causes: dict[tuple[int, int], str] = {}  #: (stage, replica) -> why its ``ReplicaDied`` comes
        #: the client's own ids of open client requests that have one, both ways (the core keeps int ids)
        self._request_ids: dict[int, str] = {}
        self._by_request_id: dict[str, int] = {}

    # -- client calls --------------------------------------------------------------------

    def submit(self, prompt: Prompt, n: int = 1, companions: int = 0,
               request_id: str | None = None) -> tuple[int, Commands]:  # fmt: skip
        """Submit a request; return its id (ids ``rid+1..`` belong to its samples/companions) and commands.

        ``request_id``: the client's own id for it (as vLLM's), carried by every ``ClientMessage`` of the request
        and by the answers to its aborts. Raises ``RequestRefused`` (and changes nothing) for a prompt that is not
        a ``Prompt``, a request id that is not a non-empty str or is an open request's, or a request the
        lifecycle refuses.
        """
        if not isinstance(prompt, Prompt):
            raise RequestRefused(f"a prompt is an omni_runtime.Prompt, not {type(prompt).__name__}: {prompt!r:.80}")
        self.check_request_id(request_id)
        if prompt.streaming and n > 1:  # as vLLM: its samples would each wait for an input nobody can feed them
            raise RequestRefused("a streaming-input request has one sample (n=1), as vLLM requires")
        rid = self._next_rid
        route = _Route(prompt)
        if self.lifecycle.engine.state is EngineState.SLEEPING:  # the lifecycle fails it at once: say why
            route.error = "the engine is sleeping (wake it up first)"
        self.routes[rid] = route
        if request_id is not None:  # before the lifecycle sees it: a request failed at once has messages too
            self._request_ids[rid], self._by_request_id[request_id] = request_id, rid
        try:
            out = self._feed(ev.Submit(rid, n, companions, request_id=request_id))
        except LifecycleError as exc:
            del self.routes[rid]
            if request_id is not None:
                del self._request_ids[rid], self._by_request_id[request_id]
            raise self._refusal(exc) from None
        self._next_rid = dependent_id(rid, fanout(n, companions))  # past its own dependents' ids
        return rid, out

    def check_request_id(self, request_id: object) -> None:
        """Raise ``RequestRefused`` unless ``request_id`` is ``None`` or a non-empty str no open request has."""
        if request_id is None:
            return
        if not isinstance(request_id, str) or not request_id:
            raise RequestRefused(f"a request id is a non-empty str, not {request_id!r:.80}")
        holder = self._by_request_id.get(request_id)
        if holder is not None:
            raise RequestRefused(f"request id {request_id!r} is in use by open request {holder}")

    def abort(self, rid: int | str) -> tuple[int, Commands]:
        """Ask to abort client request ``rid`` (the engine's id, or the client's own ``request_id``); return the abort
        call id (answered by ``AbortAnswer``).

        Raises ``RequestRefused`` for a client's own id that no open request has (the request ended, and its id was
        freed, or it never was): an engine id of an ended request is answered as an abort with nothing left to do.
        """
        if isinstance(rid, str):
            found = self._by_request_id.get(rid)
            if found is None:
                raise RequestRefused(f"no open request has request id {rid!r:.80} (it ended, or never was)")
            rid = found
        route = self.routes.get(rid)
        if route is not None and route.parent >= 0:
            raise RequestRefused(f"request {rid} is a sample or companion, not a client request")
        call = self._call_id()
        self._abort_callers.setdefault(rid, []).append(call)
        try:
            out = self._feed(ev.Abort(rid, call))
        except LifecycleError as exc:  # refused: this call waits for nothing (others on ``rid`` still do)
            callers = self._abort_callers[rid]
            callers.remove(call)
            if not callers:
                del self._abort_callers[rid]
            raise self._refusal(exc) from None
        if rid not in self.routes:  # already ended (or never known): the abort has nothing left to do
            for waiting in self._abort_callers.pop(rid, []):
                out.append(cmd.AbortAnswer(waiting, rid, True))
        return call, out

    def feed(self, rid: int, part: Prompt, last: bool = False) -> Commands:
        """Feed the next part of client request ``rid``'s streamed input (its prompt said ``streaming=True``);
        ``last``: its input ends with this part (which may then be empty). Stage 0's runtime takes it.

        Raises ``RequestRefused`` (and changes nothing) for a request that is not a streaming-input client
        request still taking input, or a part that is not a ``Prompt``.
        """
        route = self.routes.get(rid)
        if not isinstance(part, Prompt):
            raise RequestRefused(f"a part of a streamed input is an omni_runtime.Prompt, not {type(part).__name__}")
        if route is None or route.parent >= 0:
            raise RequestRefused(f"request {rid} is not an open client request")
        if not route.prompt.streaming:
            raise RequestRefused(f"request {rid} was not submitted with Prompt(streaming=True)")
        if route.input_ended or route.stage > 0:
            raise RequestRefused(f"request {rid}'s streamed input has ended")
        stage_input = StageInput(part.ids, None, None, part.text)
        route.input_ended = last
        if route.stage < 0:  # not dispatched yet (held while the engine is paused): sent right after its dispatch
            route.feeds.append((stage_input, last))
            return []
        return [cmd.FeedInput(rid, route.stage, route.replica, stage_input, last)]

    def control(self, method: ControlMethod, level: int = 1,
                tags: frozenset[str] = frozenset()) -> tuple[int, Commands]:  # fmt: skip
        """Call a control RPC on every live replica; return its call id (answered by ``RpcAnswer``)."""
        call = self._call_id()
        try:
            return call, self._feed(ev.Control(call, method, level, tags))
        except LifecycleError as exc:
            raise self._refusal(exc) from None

    def engine_died(self, reason: str | None = None) -> Commands:
        """The engine cannot go on (its host's loop failed, a stage lost its last replica, the hook raised): every
        open request ends as fatal. ``reason`` (why) becomes ``death`` and each such request's terminal error."""
        if reason is not None:
            self.death = self.death or reason
            for route in self.routes.values():
                if route.error is None:
                    route.error = reason
        return self._feed(ev.EngineDied())

    def replica_failing(self, stage: int, replica: int, cause: str) -> None:
        """Note why ``replica`` of ``stage`` is lost (its ``ReplicaDied`` follows): the requests it fails name it."""
        self._loss_causes[(stage, replica)] = cause

    def replica_replaced(self, stage: int, replica: int) -> None:
        """``replica`` of ``stage`` is live again: a new runtime took the place of the one lost (its requests ended
        with it). New work may be bound to it; nothing else changes. Raises ``RequestRefused`` for a live replica
        and ``EngineNotRunning`` once the engine stopped or died (a dead engine stays dead)."""
        state = self.lifecycle.engine.state
        if state in ENGINE_TERMINAL:
            why = f" ({self.death})" if self.death else ""
            raise EngineNotRunning(f"engine is {state.value}{why}: no replica is replaced")
        if self.live[stage][replica]:
            raise RequestRefused(f"replica {stage}/{replica} is live: only a lost replica is replaced")
        self.live[stage][replica] = True

    def shutdown(self) -> Commands:
        """Shut down: every open request gets its terminal, then the orchestrator, then the runtimes stop."""
        return self._feed(ev.Shutdown())

    def _call_id(self) -> int:
        self._next_call += 1
        return self._next_call

    def _refusal(self, exc: LifecycleError) -> OmniRuntimeError:
        state = self.lifecycle.engine.state
        if state in ENGINE_TERMINAL:
            why = f" ({self.death})" if self.death else ""
            return EngineNotRunning(f"engine is {state.value}{why}: {exc}")
        return RequestRefused(str(exc))

    # -- runtime reports --------------------------------------------------------------------

    def report(self, stage: int, replica: int, report: rp.Report) -> Commands:
        """Handle one report of ``replica`` of ``stage`` (the driver stamps both); return commands."""
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

    def _abort_result(self, stage: int, replica: int, report: rp.AbortResult) -> Commands:
        if self._cleanup_aborts.pop(report.abort_id, None) is not None:  # a request that ended, let go of: no waiter
            return []
        if self._aborts.get(report.req_id) != (report.abort_id, stage, replica):
            self.stats.unknown_results += 1
            return []
        del self._aborts[report.req_id]
        return self._feed((ev.AbortDone if report.ok else ev.AbortFailed)(report.req_id, stage, replica=replica))

    def _rpc_report(self, stage: int, replica: int, report: rp.RpcResult) -> Commands:
        return self._rpc_result(report.call_id, (stage, replica), report.error if not report.ok else None)

    def _engine_dead(self, stage: int, replica: int, report: rp.EngineDead) -> Commands:
        return self.engine_died()

    def _request_report(self, stage: int, replica: int, report: rp.RequestReport, kind: type) -> Commands:
        rid = report.req_id
        route = self.routes.get(rid)
        if route is None or route.stage != stage:  # late: the lifecycle drops it as unknown / stale
            if route is None and _never_given(rid, self._next_rid):  # counted: a wait that gives up names it
                self.stats.unknown_ids += 1
                self.unknown_id_last = (f"{type(report).__name__} under request id {rid!r} ({type(rid).__name__}) "
                                        f"from runtime {stage}/{replica}")  # fmt: skip
            try:
                event = _event_of(rid, stage, report, kind, replica)
            except _Malformed:
                event = ev.StageFailed(rid, stage, replica=replica)
            return self._feed(event)
        if route.replica != replica:
            self.stats.misrouted += 1
            return []
        if not isinstance(report.seq, int) or isinstance(report.seq, bool):  # outside the protocol: its request fails
            route.error = f"the runtime's {type(report).__name__} has seq {report.seq!r} (an int is needed)"
            return self._feed(ev.StageFailed(rid, stage, replica=replica))
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

    def _in_order(self, rid: int, stage: int, report: rp.RequestReport, route: _Route, kind: type) -> Commands:
        route.next_seq += 1
        before, text_before = route.result, route.text
        self._undo = (rid, route, before, text_before)
        try:
            event = _event_of(rid, stage, report, kind, route.replica)
            if kind is rp.Output:
                payload = report.payload  # type: ignore[attr-defined]
                route.result = self._outputs[stage].accumulate(before, payload)
                self._payload = payload
                text = report.text  # type: ignore[attr-defined]
                if text is not None:
                    if not isinstance(text, str):
                        raise _Malformed(f"runtime reported an Output with text {text!r} (a str or None)")
                    text = str(text)  # a str subclass (numpy.str_) as plain text
                    route.text = text if text_before is None else text_before + text
                self._text = text
            elif kind is rp.Finished:
                route.result = self._outputs[stage].finish(before, report.payload)  # type: ignore[attr-defined]
                route.stop_reason = report.stop_reason  # type: ignore[attr-defined]
            elif kind is rp.Failed:
                route.error = report.error  # type: ignore[attr-defined]
        except Exception as exc:  # a report outside the protocol (or a payload its adapter refuses) fails its request
            route.result, route.text, self._payload, self._text = before, text_before, None, None
            route.error = str(exc) if isinstance(exc, _Malformed) else (
                f"the runtime's {type(report).__name__} cannot be taken by its stage: {type(exc).__name__}: {exc}")
            event = ev.StageFailed(rid, stage, replica=route.replica)
        rec = self.lifecycle.records.get(rid)
        self._judged = (rid, report, None if rec is None else rec.state)  # named by a ``Rejected``, if any
        out = self._feed(event)  # a runtime report never raises a LifecycleError: nothing to undo
        self._payload = self._undo = self._text = self._judged = None
        return out

    def _rpc_result(self, call_id: int, where: tuple[int, int], error: str | None) -> Commands:
        rpc = self._rpcs.get(call_id)
        if rpc is None:  # late or duplicated: the lifecycle drops it as unknown
            return self._feed(ev.RpcFailed(call_id, error) if error else ev.RpcDone(call_id))
        if where not in rpc.waiting:
            self.stats.duplicates += 1
            return []
        rpc.waiting.discard(where)
        if error is not None and rpc.error is None:
            rpc.error = error
        if rpc.waiting:
            return []
        del self._rpcs[call_id]
        return self._feed(ev.RpcFailed(call_id, rpc.error) if rpc.error else ev.RpcDone(call_id))

    def runtime_raised(self, command: cmd.Command, error: str) -> Commands:
        """A runtime raised ``error`` while carrying out ``command``: answer as its report would have.

        A dispatch it could not take fails that request (request-scoped, like ``Failed``); a
        physical abort it could not carry out failed (the request runs on: nothing says it is
        gone), and a request that cannot run on (a sample, a companion), whose abort the table
        sends again at once, fails at that stage instead: the retry would go to the runtime that
        just raised. A control RPC it could not run answers its caller with the error.
        """
        if isinstance(command, cmd.Dispatch | cmd.FeedInput):
            route = self.routes.get(command.rid)
            if route is None or (route.stage, route.replica) != (command.stage, command.replica):
                return []
            route.error = error
            failed = self._feed(ev.StageFailed(command.rid, command.stage, replica=command.replica))
            if isinstance(command, cmd.FeedInput):  # the runtime holds the session it could not feed: let it go
                abort_id = self._call_id()
                self._cleanup_aborts[abort_id] = (command.stage, command.replica)
                failed.append(cmd.AbortAt(command.stage, command.replica, abort_id, (command.rid,)))
            return failed
        if isinstance(command, cmd.AbortAt):
            out: Commands = []
            where = (command.stage, command.replica)
            for rid in sorted(command.req_ids):
                if self._aborts.get(rid) == (command.abort_id, *where):
                    del self._aborts[rid]
                    out += self._feed(ev.AbortFailed(rid, command.stage, replica=command.replica))
                    again = self._aborts.get(rid)
                    if again is not None and again[1:] == where:  # sent again at once: fail it instead
                        del self._aborts[rid]
                        out = [_without(c, rid) for c in out]
                        self.routes[rid].error = f"its physical abort raised: {error}"
                        out += self._feed(ev.StageFailed(rid, command.stage, replica=command.replica))
            return [c for c in out if not (isinstance(c, cmd.AbortAt) and not c.req_ids)]
        if isinstance(command, cmd.RpcCall):
            return self._rpc_result(command.call_id, (command.stage, command.replica), error)
        raise OmniRuntimeError(f"{type(command).__name__} is not carried out by a runtime")

    def _replica_died(self, stage: int, replica: int) -> Commands:
        cause = self._loss_causes.pop((stage, replica), None)
        if not self.live[stage][replica]:
            return []
        self.live[stage][replica] = False
        self._aborts = {rid: v for rid, v in self._aborts.items() if v[1:] != (stage, replica)}
        self._cleanup_aborts = {a: v for a, v in self._cleanup_aborts.items() if v != (stage, replica)}
        out: Commands = []
        lost = None if cause is None else f"replica {stage}/{replica} is lost: {cause}"
        if not any(self.live[stage]):  # no live replica left: the engine is dead
            out += self.engine_died(lost)
        else:
            bound = sorted(r for r, route in self.routes.items() if route.stage == stage and route.replica == replica)
            for rid in bound:
                if lost is not None and self.routes[rid].error is None:
                    self.routes[rid].error = lost
                out += self._feed(ev.ReplicaLost(rid, stage, replica=replica))
        for call_id in sorted(self._rpcs):
            if (stage, replica) in self._rpcs[call_id].waiting:
                out += self._rpc_result(call_id, (stage, replica), "ReplicaDied: replica lost during the RPC")
        return out

    # -- the lifecycle's observations, as commands ----------------------------------------------

    def _feed(self, event: ev.Event) -> Commands:
        outputs = self.lifecycle.handle(event)
        out: Commands = []
        handlers = _OBSERVATIONS
        for o in outputs:
            handler = handlers.get(o.__class__)
            if handler is not None:  # slot bookkeeping, acknowledgements: nothing to do
                handler(self, o, out)
        if self._abort_batch is not None:
            self._send_aborts(self._abort_batch, out)
            self._abort_batch = None
        hook_raised = None
        if self.on_step is not None:  # after the handlers: each dispatch is bound to its replica now
            try:
                self.on_step(event, self._bound(outputs))
            except Exception as exc:  # outside code: this step's commands still go out, then the engine dies
                hook_raised = exc
        if hook_raised is not None:
            out += self._hook_raised(event, hook_raised)
        return out

    def _bound(self, outputs: list[ob.Observation]) -> list[ob.Observation]:
        """Return ``outputs`` with each ``Dispatched`` naming the replica its request was bound to (the core binds
        none), as the step hook sees them."""
        routes = self.routes
        if not any(o.__class__ is ob.Dispatched and o.rid in routes for o in outputs):
            return outputs
        return [attrs.evolve(o, replica=routes[o.rid].replica)
                if o.__class__ is ob.Dispatched and o.rid in routes else o for o in outputs]

    def _hook_raised(self, event: ev.Event, exc: Exception) -> Commands:
        """The step hook raised: it is not called again, and the engine dies of it (each open request's fatal
        terminal names it; the drivers raise it from ``shutdown()``), unless it is dead or stopped already."""
        self.on_step, self.hook_error = None, exc
        reason = f"the on_step hook raised {type(exc).__name__}: {exc} (at {type(event).__name__})"
        if self.lifecycle.engine.state in ENGINE_TERMINAL:
            self.death = self.death or reason
            return []
        return self.engine_died(reason)

    def _send_aborts(self, batch: dict[tuple[int, int], list[int]], out: Commands) -> None:
        """One physical abort per live replica per step, for the requests still tracked (one may end in the
        step). A replica that died in the step gets none: its requests end as lost (``_replica_died``)."""
        for (stage, replica), asked in batch.items():
            rids = [rid for rid in asked if rid in self.routes]
            if not rids or not self.live[stage][replica]:
                continue
            abort_id = self._call_id()
            for rid in rids:
                self._aborts[rid] = (abort_id, stage, replica)
            out.append(cmd.AbortAt(stage, replica, abort_id, tuple(rids)))

    def _on_abort_sent(self, o: ob.AbortSent, out: Commands) -> None:
        route = self.routes[o.rid]
        if self._abort_batch is None:
            self._abort_batch = {}
        self._abort_batch.setdefault((route.stage, route.replica), []).append(o.rid)

    def _on_abort_answered(self, o: ob.AbortAnswered, out: Commands) -> None:
        if o.parent is None:  # the client's call (a parent's abort of its dependent waits for no client)
            self._answer_abort(o.rid, o.ok, out, o.call_id)

    def _on_abort_committed(self, o: ob.AbortCommitted, out: Commands) -> None:
        out.append(cmd.CommitAbort(o.rid))

    def _on_dropped(self, o: ob.Dropped, out: Commands) -> None:
        undo = self._undo
        if undo is not None and o.rid == undo[0]:  # an in-order report not acted on: undo its buffer
            undo[1].result, undo[1].text = undo[2], undo[3]

    def _on_rejected(self, o: ob.Rejected, out: Commands) -> None:
        """A runtime report the lifecycle has no row for fails its request: its terminal's error says which report
        was illegal, where, and in which state (not the bare finish reason)."""
        route = self.routes.get(o.rid)
        if route is None:
            return
        judged = self._judged
        report, state = (judged[1], judged[2]) if judged is not None and judged[0] == o.rid else (None, None)
        what = o.event if report is None else f"{type(report).__name__} ({o.event})"
        where = "its state" if state is None else state.name
        route.error = (f"runtime report {what} rejected at stage {route.stage}: the lifecycle has no row for it in "
                       f"{where}")  # fmt: skip

    def _on_rpc_answered(self, o: ob.RpcAnswered, out: Commands) -> None:
        self._rpcs.pop(o.call_id, None)
        out.append(cmd.RpcAnswer(o.call_id, o.method, o.ok, o.error))

    def _on_engine_changed(self, o: ob.EngineChanged, out: Commands) -> None:
        out.append(cmd.EngineChanged(o.state))

    def _on_orchestrator_stopped(self, o: ob.OrchestratorStopped, out: Commands) -> None:
        self.stopped = True
        out.append(cmd.StopOrchestrator())

    def _on_runtimes_stopped(self, o: ob.RuntimesStopped, out: Commands) -> None:
        out.append(cmd.StopRuntimes())

    def _on_submitted(self, o: ob.Submitted, out: Commands) -> None:
        if o.role is Role.CLIENT:
            return
        parent = self.routes[o.parent].prompt
        companion = o.role is Role.COMPANION
        self.routes[o.rid] = _Route(companion_input(parent) if companion else parent, o.parent, companion)

    def _forward(self, o: ob.Forwarded, out: Commands) -> None:
        route = self.routes[o.rid]
        done = route.companions
        if route.parent >= 0 and route.parent in self.routes:  # an n>1 sample uses its parent's companions
            done = self.routes[route.parent].companions
        companions = tuple(result for _, result in done) if done else ()
        stage_input = self._inputs[o.dst](route.prompt, route.result, companions, route.text)  # the next stage's input
        route.result = self._with_sampling(o.dst, o.rid, route, stage_input)
        route.text = None

    def _dispatch(self, o: ob.Dispatched, out: Commands) -> None:
        route = self.routes[o.rid]
        stage = o.stage
        if stage == 0:
            stage_input = self._with_sampling(0, o.rid, route, self._inputs[0](route.prompt, None, (), None))
        else:
            stage_input = route.result
        live = self.live[stage]
        route.stage = stage
        route.replica = 0 if len(live) == 1 and live[0] else self._pick_replica(stage, route)
        route.result = route.held = route.text = route.stop_reason = None
        route.next_seq = 0
        out.append(cmd.Dispatch(o.rid, stage, route.replica, stage_input, stage - 1))
        if route.feeds:
            out += [cmd.FeedInput(o.rid, stage, route.replica, part, last) for part, last in route.feeds]
            route.feeds = []

    def _with_sampling(self, stage: int, rid: int, route: _Route, stage_input: StageInput) -> StageInput:
        """Return ``stage_input`` with the sampling parameters of an AR ``stage``: the prompt's, with the stage's
        overrides from the pipeline file on top; sample ``i`` of an ``n>1`` request is seeded ``seed + i``."""
        spec = self.pipeline.stages[stage]
        if spec.kind is not StageKind.AR:
            return stage_input
        sampling = route.prompt.sampling
        if spec.sampling:
            sampling = attrs.evolve(sampling, **dict(spec.sampling))
        if route.parent >= 0 and not route.companion:
            sampling = sampling.for_sample(rid - dependent_id(route.parent, 0))
        return attrs.evolve(stage_input, sampling=sampling)

    def _pick_replica(self, stage: int, route: _Route) -> int:
        live = self.live[stage]
        parent = self.routes.get(route.parent) if route.parent >= 0 else None
        if parent is not None and parent.stage == stage and live[parent.replica]:
            return parent.replica  # companions and samples run next to their parent when they can
        for _ in range(len(live)):
            replica = self._rr[stage] % len(live)
            self._rr[stage] += 1
            if live[replica]:
                return replica
        raise EngineNotRunning(f"stage {stage} has no live replica")

    def _on_emitted(self, o: ob.Emitted, out: Commands) -> None:
        adapter = self._outputs[o.stage]
        request_id = self._request_ids.get(o.rid) if self._request_ids else None
        if not o.finished and not o.stage_final:  # a partial output (the hot path): what the output being fed carries
            out.append(cmd.Deliver(cmd.ClientMessage(o.rid, o.stage, adapter.delta(self._payload), False, False,
                                                     o.outcome, None, o.sample, o.cumulative, None, self._text, None,
                                                     request_id)))  # fmt: skip
            return
        source = self.routes.get(dependent_id(o.rid, o.sample) if o.sample >= 0 else o.rid)
        data: Any = None
        error = text = stop_reason = None
        if source is not None and (o.outcome in (None, Outcome.FINISHED)
                                     or (o.outcome is Outcome.ABORTED and o.cumulative)):  # the core sized the prefix
            data, text = adapter.result(source.result), source.text
            if o.outcome is not Outcome.ABORTED:
                stop_reason = source.stop_reason
        elif o.outcome in (Outcome.FAILED, Outcome.FATAL):
            error = (source.error if source is not None else None) or (o.reason.value if o.reason else None)
        reason = None if o.reason is None else o.reason.value  # the client reads vLLM's strings
        out.append(cmd.Deliver(cmd.ClientMessage(o.rid, o.stage, data, o.finished, o.stage_final, o.outcome, reason,
                                                 o.sample, o.cumulative, error, text, stop_reason,
                                                 request_id)))  # fmt: skip

    def _answer_abort(self, rid: int, ok: bool, out: Commands, only: int | None = None) -> None:
        """Answer the abort calls waiting on ``rid`` (``only``: that one call, if it waits)."""
        request_id = self._request_ids.get(rid)
        if only is not None:
            waiting = self._abort_callers.get(rid, [])
            if only in waiting:
                waiting.remove(only)
                if not waiting:
                    del self._abort_callers[rid]
                out.append(cmd.AbortAnswer(only, rid, ok, request_id))
            return
        for call in self._abort_callers.pop(rid, ()):
            out.append(cmd.AbortAnswer(call, rid, ok, request_id))

    def _on_released(self, o: ob.Released, out: Commands) -> None:
        rid = o.rid
        route = self.routes.pop(rid, None)
        self._aborts.pop(rid, None)  # ended with its physical abort unanswered: forget it
        if route is not None and route.parent >= 0:
            parent = self.routes.get(route.parent)
            if parent is not None and route.companion:
                parent.companions = tuple(sorted((*parent.companions, (rid, route.result)), key=_by_id))
                if route.error is not None and parent.error is None:  # the parent fails for it: say why
                    parent.error = f"its CFG companion {rid} failed: {route.error}"
        if self._abort_callers:
            self._answer_abort(rid, True, out)  # ended some other way while an abort was pending
        if self._request_ids and rid in self._request_ids:  # its id is free for a new request
            del self._by_request_id[self._request_ids.pop(rid)]

    def _on_rpc_sent(self, o: ob.RpcSent, out: Commands) -> None:
        _, level, tags = self.lifecycle.engine.pending_rpcs[o.call_id]
        targets = [(s, r) for s, live in enumerate(self.live) for r, up in enumerate(live) if up]
        self._rpcs[o.call_id] = _Rpc(set(targets))
        out += [cmd.RpcCall(o.call_id, s, r, o.method, level, tags) for s, r in targets]

    # -- queries --------------------------------------------------------------------------------

    def open_requests(self) -> list[int]:
        """Return the ids of tracked client requests."""
        return sorted(rid for rid, route in self.routes.items() if route.parent < 0)

    def idle(self) -> bool:
        """Return whether no request, abort or RPC is in flight."""
        return not self.routes and not self._rpcs and not self.lifecycle.records

    def held_state(self) -> dict[str, int]:
        """Return the sizes of every map the orchestrator keeps (all zero after a drain)."""
        return {"routes": len(self.routes), "records": len(self.lifecycle.records),
                "aborts": len(self._aborts) + len(self._cleanup_aborts),
                "abort_callers": len(self._abort_callers), "rpcs": len(self._rpcs),
                "request_ids": len(self._request_ids) + len(self._by_request_id)}  # fmt: skip

    def counters(self) -> dict[str, int]:
        """Return what the lifecycle and the orchestrator dropped or failed."""
        return {**self.lifecycle.counters.as_dict(), **self.stats.as_dict()}

    def reports_dropped(self) -> int:
        """Return how many reports were dropped unheard (late, unknown, duplicated, misrouted; a late client abort
        counts too): what a driver's watchdog subtracts from the reports it handed over to measure progress."""
        lifecycle, stats = self.lifecycle.counters, self.stats
        return (lifecycle.dropped_stale + lifecycle.dropped_unknown + stats.duplicates + stats.misrouted
                + stats.unknown_results)  # fmt: skip

    def waits_for_client(self, rid: int) -> bool:
        """Return whether client request ``rid`` can go on only after a client call: the engine is paused or
        asleep, or the request waits for its next streamed input part."""
        if self.lifecycle.engine.state in (EngineState.PAUSED, EngineState.SLEEPING):
            return True
        record = self.lifecycle.records.get(rid)
        return record is not None and record.state is ReqState.WAITING_FOR_STREAMING_REQ


_Handler = Callable[[Orchestrator, int, int, Any], Commands]
#: report class -> handler, for the reports about no one request (per-request ones go through ``_KINDS``);
#: a subclass of a protocol report is resolved once through its MRO
_REPORTS: dict[type, _Handler] = {
    rp.AbortResult: Orchestrator._abort_result, rp.RpcResult: Orchestrator._rpc_report,
    rp.ReplicaDied: lambda self, stage, replica, report: self._replica_died(stage, replica),
    rp.EngineDead: Orchestrator._engine_dead,
}  # fmt: skip
#: per-request report class -> the protocol class it is (the same, or the base of a subclass)
_KINDS: dict[type, type] = {k: k for k in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed, rp.Aborted)}
#: observation class -> what the orchestrator does with it; absent: nothing (slots, acknowledgements)
_OBSERVATIONS: dict[type, Callable[[Orchestrator, Any, Commands], None]] = {
    ob.Emitted: Orchestrator._on_emitted, ob.Dispatched: Orchestrator._dispatch,
    ob.Forwarded: Orchestrator._forward, ob.Released: Orchestrator._on_released,
    ob.Submitted: Orchestrator._on_submitted, ob.AbortSent: Orchestrator._on_abort_sent,
    ob.AbortAnswered: Orchestrator._on_abort_answered, ob.AbortCommitted: Orchestrator._on_abort_committed,
    ob.Dropped: Orchestrator._on_dropped, ob.Rejected: Orchestrator._on_rejected, ob.RpcSent: Orchestrator._on_rpc_sent,
    ob.RpcAnswered: Orchestrator._on_rpc_answered, ob.EngineChanged: Orchestrator._on_engine_changed,
    ob.OrchestratorStopped: Orchestrator._on_orchestrator_stopped,
    ob.RuntimesStopped: Orchestrator._on_runtimes_stopped,
}  # fmt: skip


def _by_id(pair: tuple[int, Any]) -> int:
    return pair[0]


def _never_given(rid: Any, next_rid: int) -> bool:
    """Return whether ``rid`` is no id the orchestrator gave: not an integer, or outside ``0 .. next_rid - 1``."""
    try:
        return not 0 <= operator.index(rid) < next_rid
    except TypeError:
        return True


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
