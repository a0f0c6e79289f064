"""Observation -> command translation: the lifecycle decides, this turns what it observed into the driver's commands.

``Translation.feed`` hands one event to the lifecycle and each observation it returns to its handler (``_HANDLERS``;
an observation with none, slot bookkeeping or an acknowledgement, asks for nothing). A handler reads the routing
data and the report in hand (``ReportInHand``: what a partial output delivers, what a dropped report changed, which
report was rejected) and appends commands. The step hook sees each step after its handlers, dispatches bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_fsm import ENGINE_TERMINAL, Outcome, Role
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.engine.core import Lifecycle, dependent_id
from omni_runtime.core import commands as cmd
from omni_runtime.core.adapters import INPUT_ADAPTERS, OUTPUT_ADAPTERS, companion_input
from omni_runtime.core.routes import NO_REPORT, ReportInHand, Route, Routing, Rpc

StepHook = Callable[[ev.Event | None, list[ob.Observation]], None]
Commands = list[cmd.Command]


class Translation:
    """Feeds events to the lifecycle and turns its observations into commands."""

    def __init__(self, routing: Routing, lifecycle: Lifecycle, on_step: StepHook | None) -> None:
        self.routing = routing
        self.routes = routing.routes
        self.live = routing.live
        self.request_ids = routing.request_ids
        self.with_sampling = routing.with_sampling
        self.lifecycle = lifecycle
        self.on_step = on_step
        self.hook_error: Exception | None = None  #: what ``on_step`` raised (the engine died of it; not called again)
        self.stopped = False  #: the orchestrator stopped
        stages = routing.pipeline.stages
        self.inputs = [INPUT_ADAPTERS[s.adapter] for s in stages]
        self.outputs = [OUTPUT_ADAPTERS[s.kind] for s in stages]
        self.abort_batch: dict[tuple[int, int], list[int]] | None = None  #: AbortSent of one step, by replica

    def feed(self, event: ev.Event, ctx: ReportInHand = NO_REPORT) -> Commands:
        """Hand ``event`` to the lifecycle (``ctx``: the report that caused it); return the commands of what it
        observed."""
        outputs = self.lifecycle.handle(event)
        out: Commands = []
        handlers = _HANDLERS
        for o in outputs:
            handler = handlers.get(o.__class__)
            if handler is not None:  # slot bookkeeping, acknowledgements: nothing to do
                handler(self, o, out, ctx)
        if self.abort_batch is not None:
            self._send_aborts(self.abort_batch, out)
            self.abort_batch = None
        hook_raised = None
        if self.on_step is not None:  # after the handlers: each dispatch is bound to its replica now
            try:
                self.on_step(event, self._bound(outputs))
            except Exception as exc:  # outside code: this step's commands still go out, then the engine dies
                hook_raised = exc
        if hook_raised is not None:
            out += self._hook_raised(event, hook_raised)
        return out

    def die(self, reason: str | None = None) -> Commands:
        """The engine cannot go on: every open request ends as fatal; ``reason`` becomes ``death`` and each such
        request's terminal error."""
        if reason is not None:
            self.routing.death = self.routing.death or reason
            for route in self.routes.values():
                if route.error is None:
                    route.error = reason
        return self.feed(ev.EngineDied())

    def _bound(self, outputs: list[ob.Observation]) -> list[ob.Observation]:
        """Return ``outputs`` with each ``Dispatched`` naming the replica its request was bound to (the core binds
        none), as the step hook sees them."""
        routes = self.routes
        if not any(o.__class__ is ob.Dispatched and o.rid in routes for o in outputs):
            return outputs
        return [o._replace(replica=routes[o.rid].replica)
                if o.__class__ is ob.Dispatched and o.rid in routes else o for o in outputs]

    def _hook_raised(self, event: ev.Event, exc: Exception) -> Commands:
        """The step hook raised: it is not called again, and the engine dies of it (each open request's fatal
        terminal names it; the drivers raise it from ``shutdown()``), unless it is dead or stopped already."""
        self.on_step, self.hook_error = None, exc
        reason = f"the on_step hook raised {type(exc).__name__}: {exc} (at {type(event).__name__})"
        if self.lifecycle.engine.state in ENGINE_TERMINAL:
            self.routing.death = self.routing.death or reason
            return []
        return self.die(reason)

    def _send_aborts(self, batch: dict[tuple[int, int], list[int]], out: Commands) -> None:
        """One physical abort per live replica per step, for the requests still tracked (one may end in the
        step). A replica that died in the step gets none: its requests end as lost (``ReplicaDied``)."""
        routing = self.routing
        for (stage, replica), asked in batch.items():
            rids = [rid for rid in asked if rid in self.routes]
            if not rids or not routing.live[stage][replica]:
                continue
            abort_id = routing.call_id()
            for rid in rids:
                routing.aborts[rid] = (abort_id, stage, replica)
            out.append(cmd.AbortAt(stage, replica, abort_id, tuple(rids)))

    def answer_abort(self, rid: int, ok: bool, out: Commands, only: int | None = None) -> None:
        """Answer the abort calls waiting on ``rid`` (``only``: that one call, if it waits)."""
        routing = self.routing
        request_id = routing.request_ids.get(rid)
        if only is not None:
            waiting = routing.abort_callers.get(rid, [])
            if only in waiting:
                waiting.remove(only)
                if not waiting:
                    del routing.abort_callers[rid]
                out.append(cmd.AbortAnswer(only, rid, ok, request_id))
            return
        for call in routing.abort_callers.pop(rid, ()):
            out.append(cmd.AbortAnswer(call, rid, ok, request_id))

    # -- the handlers, one per observation class ---------------------------------------------------------

    def _on_submitted(self, o: ob.Submitted, out: Commands, ctx: ReportInHand) -> None:
        if o.role is Role.CLIENT:
            return
        parent = self.routes[o.parent].prompt
        companion = o.role is Role.COMPANION
        self.routes[o.rid] = Route(companion_input(parent) if companion else parent, o.parent, companion)

    def _on_dispatched(self, o: ob.Dispatched, out: Commands, ctx: ReportInHand) -> None:
        route = self.routes[o.rid]
        stage = o.stage
        if stage == 0:
            stage_input = self.with_sampling(0, o.rid, route, self.inputs[0](route.prompt, None, (), None))
        else:
            stage_input = route.result
        live = self.live[stage]
        route.stage = stage
        route.replica = 0 if len(live) == 1 and live[0] else self.routing.pick_replica(stage, route)
        route.result = route.held = route.text = route.stop_reason = None
        route.next_seq = 0
        out.append(cmd.Dispatch(o.rid, stage, route.replica, stage_input, stage - 1))
        if route.feeds:
            out += [cmd.FeedInput(o.rid, stage, route.replica, part, last) for part, last in route.feeds]
            route.feeds = []

    def _on_forwarded(self, o: ob.Forwarded, out: Commands, ctx: ReportInHand) -> None:
        route = self.routes[o.rid]
        done = route.companions
        if route.parent >= 0 and route.parent in self.routes:  # an n>1 sample uses its parent's companions
            done = self.routes[route.parent].companions
        companions = tuple(result for _, result in done) if done else ()
        stage_input = self.inputs[o.dst](route.prompt, route.result, companions, route.text)  # the next stage's input
        route.result = self.with_sampling(o.dst, o.rid, route, stage_input)
        route.text = None

    def _on_emitted(self, o: ob.Emitted, out: Commands, ctx: ReportInHand) -> None:
        adapter = self.outputs[o.stage]
        request_ids = self.request_ids
        request_id = request_ids.get(o.rid) if request_ids else None
        if not o.finished and not o.stage_final:  # a partial output (the hot path): what the report in hand carries
            out.append(cmd.Deliver(cmd.ClientMessage(o.rid, o.stage, adapter.delta(ctx.payload), False, False,
                                                     o.outcome, None, o.sample, o.cumulative, None, ctx.text, None,
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

    def _on_released(self, o: ob.Released, out: Commands, ctx: ReportInHand) -> None:
        rid, routing = o.rid, self.routing
        route = self.routes.pop(rid, None)
        routing.aborts.pop(rid, None)  # ended with its physical abort unanswered: forget it
        if route is not None and route.parent >= 0:
            parent = self.routes.get(route.parent)
            if parent is not None and route.companion:
                parent.companions = tuple(sorted((*parent.companions, (rid, route.result)), key=_by_id))
                if route.error is not None and parent.error is None:  # the parent fails for it: say why
                    parent.error = f"its CFG companion {rid} failed: {route.error}"
        if routing.abort_callers:
            self.answer_abort(rid, True, out)  # ended some other way while an abort was pending
        if routing.request_ids and rid in routing.request_ids:  # its id is free for a new request
            request_id = routing.request_ids.pop(rid)
            del routing.by_request_id[request_id]
            routing.ended_request_ids[request_id] = rid

    def _on_abort_sent(self, o: ob.AbortSent, out: Commands, ctx: ReportInHand) -> None:
        route = self.routes[o.rid]
        if self.abort_batch is None:
            self.abort_batch = {}
        self.abort_batch.setdefault((route.stage, route.replica), []).append(o.rid)

    def _on_abort_answered(self, o: ob.AbortAnswered, out: Commands, ctx: ReportInHand) -> None:
        if o.parent is None:  # the client's call (a parent's abort of its dependent waits for no client)
            self.answer_abort(o.rid, o.ok, out, o.call_id)

    def _on_abort_committed(self, o: ob.AbortCommitted, out: Commands, ctx: ReportInHand) -> None:
        out.append(cmd.CommitAbort(o.rid))

    def _on_dropped(self, o: ob.Dropped, out: Commands, ctx: ReportInHand) -> None:
        if o.rid == ctx.rid and ctx.route is not None:  # the report in hand, not acted on: undo its buffers
            ctx.route.result, ctx.route.text = ctx.result_before, ctx.text_before

    def _on_rejected(self, o: ob.Rejected, out: Commands, ctx: ReportInHand) -> None:
        """A runtime report the lifecycle has no row for fails its request: its terminal's error says which report
        was illegal, where, and in which state (not the bare finish reason)."""
        route = self.routes.get(o.rid)
        if route is None:
            return
        report, state = (ctx.report, ctx.state_before) if ctx.rid == o.rid else (None, None)
        what = o.event if report is None else f"{type(report).__name__} ({o.event})"
        where = "its state" if state is None else state.name
        route.error = (f"runtime report {what} rejected at stage {route.stage}: the lifecycle has no row for it in "
                       f"{where}")  # fmt: skip

    def _on_rpc_sent(self, o: ob.RpcSent, out: Commands, ctx: ReportInHand) -> None:
        _, level, tags = self.lifecycle.engine.pending_rpcs[o.call_id]
        routing = self.routing
        targets = [(s, r) for s, live in enumerate(routing.live) for r, up in enumerate(live) if up]
        routing.rpcs[o.call_id] = Rpc(set(targets))
        out += [cmd.RpcCall(o.call_id, s, r, o.method, level, tags) for s, r in targets]

    def _on_rpc_answered(self, o: ob.RpcAnswered, out: Commands, ctx: ReportInHand) -> None:
        self.routing.rpcs.pop(o.call_id, None)
        out.append(cmd.RpcAnswer(o.call_id, o.method, o.ok, o.error))

    def _on_engine_changed(self, o: ob.EngineChanged, out: Commands, ctx: ReportInHand) -> None:
        out.append(cmd.EngineChanged(o.state))

    def _on_orchestrator_stopped(self, o: ob.OrchestratorStopped, out: Commands, ctx: ReportInHand) -> None:
        self.stopped = True
        out.append(cmd.StopOrchestrator())

    def _on_runtimes_stopped(self, o: ob.RuntimesStopped, out: Commands, ctx: ReportInHand) -> None:
        out.append(cmd.StopRuntimes())


#: observation class -> what the orchestrator does with it; absent: nothing (slots, acknowledgements)
_HANDLERS: dict[type, Callable[[Translation, Any, Commands, ReportInHand], None]] = {
    ob.Emitted: Translation._on_emitted, ob.Dispatched: Translation._on_dispatched,
    ob.Forwarded: Translation._on_forwarded, ob.Released: Translation._on_released,
    ob.Submitted: Translation._on_submitted, ob.AbortSent: Translation._on_abort_sent,
    ob.AbortAnswered: Translation._on_abort_answered, ob.AbortCommitted: Translation._on_abort_committed,
    ob.Dropped: Translation._on_dropped, ob.Rejected: Translation._on_rejected,
    ob.RpcSent: Translation._on_rpc_sent, ob.RpcAnswered: Translation._on_rpc_answered,
    ob.EngineChanged: Translation._on_engine_changed, ob.OrchestratorStopped: Translation._on_orchestrator_stopped,
    ob.RuntimesStopped: Translation._on_runtimes_stopped,
}  # fmt: skip


def _by_id(pair: tuple[int, Any]) -> int:
    return pair[0]
