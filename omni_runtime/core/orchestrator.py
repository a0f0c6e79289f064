"""The sans-IO orchestrator: client calls and runtime reports in, commands out.

``omni_fsm.engine.core.Lifecycle`` makes every lifecycle decision. The orchestrator holds the routing data around
those decisions (``routes.Routing``: the pipeline, each request's binding to a stage replica, its output buffers and
report order, abort and RPC correlation ids) and is three parts: this module, the client API; ``intake.Intake``,
which judges each runtime report and turns it into a lifecycle event; ``translation.Translation``, which feeds the
events to the lifecycle and turns its observations into commands. No I/O, no asyncio, no threads.
"""

from __future__ import annotations

from omni_fsm import (
    ENGINE_TERMINAL,
    SPEC,
    ControlMethod,
    EngineState,
    LifecycleError,
    ReqState,
    Spec,
)
from omni_fsm import events as ev
from omni_fsm.engine.core import Lifecycle, dependent_id, fanout
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.intake import Intake
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt, StageInput
from omni_runtime.core.routes import Route, Routing, Stats
from omni_runtime.core.translation import Commands, StepHook, Translation
from omni_runtime.errors import EngineNotRunning, OmniRuntimeError, RequestRefused


class Orchestrator:
    """Routes requests through a pipeline; every lifecycle decision is the ``Lifecycle``'s."""

    def __init__(self, pipeline: Pipeline, *, spec: Spec = SPEC, on_step: StepHook | None = None,
                 vocab_size: int | None = None) -> None:  # fmt: skip
        """``vocab_size``: stage 0's runtimes' vocabulary (``protocol.vocab_size``): a prompt's token ids are below it
        (``None``: not known, not checked)."""
        self.pipeline = pipeline = require_pipeline(pipeline, "Orchestrator")
        self.vocab_size = vocab_size
        self.lifecycle = Lifecycle(pipeline.kinds, pipeline.final, pipeline.slots, spec=spec)
        self.routing = routing = Routing(pipeline)
        self.routes: dict[int, Route] = routing.routes
        self.live: list[list[bool]] = routing.live
        self.stats: Stats = routing.stats
        self.translation = Translation(routing, self.lifecycle, on_step)
        self.intake = Intake(routing, self.translation)
        self._feed = self.translation.feed
        self._take_report = self.intake.report

    def report(self, stage: int, replica: int, report: rp.Report) -> Commands:
        """Handle one report of ``replica`` of ``stage`` (the driver stamps both); return commands."""
        return self._take_report(stage, replica, report)

    # -- what the parts keep, read here ------------------------------------------------------------------

    @property
    def next_rid(self) -> int:
        """Return the id the next submitted request gets."""
        return self.routing.next_rid

    @property
    def death(self) -> str | None:
        """Return why the engine died, where that is known (named by its fatal terminals)."""
        return self.routing.death

    @property
    def unknown_id_last(self) -> str | None:
        """Return the last report under an id never given: what, which id, from where."""
        return self.routing.unknown_id_last

    @property
    def stopped(self) -> bool:
        """Return whether the orchestrator stopped."""
        return self.translation.stopped

    @property
    def on_step(self) -> StepHook | None:
        """Return the step hook (``None`` once it raised)."""
        return self.translation.on_step

    @property
    def hook_error(self) -> Exception | None:
        """Return what the step hook raised (the engine died of it), until ``take_hook_error`` takes it."""
        return self.translation.hook_error

    def take_hook_error(self) -> Exception | None:
        """Return what the step hook raised, once (``None``: nothing)."""
        exc, self.translation.hook_error = self.translation.hook_error, None
        return exc

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
        self.check_prompt(prompt)
        self.check_request_id(request_id)
        if prompt.streaming and n > 1:  # as vLLM: its samples would each wait for an input nobody can feed them
            raise RequestRefused("a streaming-input request has one sample (n=1), as vLLM requires")
        routing = self.routing
        rid = routing.next_rid
        route = Route(prompt)
        if self.lifecycle.engine.state is EngineState.SLEEPING:  # the lifecycle fails it at once: say why
            route.error = "the engine is sleeping (wake it up first)"
        self.routes[rid] = route
        if request_id is not None:  # before the lifecycle sees it: a request failed at once has messages too
            routing.request_ids[rid], routing.by_request_id[request_id] = request_id, rid
        try:
            out = self._feed(ev.Submit(rid, n, companions, request_id=request_id))
        except LifecycleError as exc:
            del self.routes[rid]
            if request_id is not None:
                del routing.request_ids[rid], routing.by_request_id[request_id]
            raise self._refusal(exc) from None
        routing.next_rid = dependent_id(rid, fanout(n, companions))  # past its own dependents' ids
        return rid, out

    def check_prompt(self, prompt: Prompt, which: str = "prompt") -> None:
        """Raise ``RequestRefused`` (one line naming ``which`` prompt and the id) for a token id outside stage 0's
        vocabulary, where its runtimes declare one."""
        vocab = self.vocab_size
        if vocab is None or not prompt.token_ids or max(prompt.token_ids) < vocab:
            return
        index, token = next((i, t) for i, t in enumerate(prompt.token_ids) if t >= vocab)
        raise RequestRefused(f"{which} {prompt.token_ids!r:.60}: token id {token} (item {index}) is outside the "
                             f"vocabulary of stage 0's runtime (0..{vocab - 1})")  # fmt: skip

    def check_request_id(self, request_id: object) -> None:
        """Raise ``RequestRefused`` unless ``request_id`` is ``None`` or a non-empty str no open request has."""
        if request_id is None:
            return
        if not isinstance(request_id, str) or not request_id:
            raise RequestRefused(f"a request id is a non-empty str, not {request_id!r:.80}")
        holder = self.routing.by_request_id.get(request_id)
        if holder is not None:
            raise RequestRefused(f"request id {request_id!r} is in use by open request {holder}")

    def abort(self, rid: int | str) -> tuple[int, Commands]:
        """Ask to abort client request ``rid`` (the engine's id, or the client's own ``request_id``); return the abort
        call id (answered by ``AbortAnswer``).

        A request that ended, whichever id names it, is answered as an abort with nothing left to do (``ok``). Raises
        ``RequestRefused`` for an id no request ever had, an int or a str alike.
        """
        routing = self.routing
        if isinstance(rid, str):
            found = routing.by_request_id.get(rid)
            if found is None:
                found = routing.ended_request_ids.get(rid)
            if found is None:
                raise RequestRefused(f"no request ever had request id {rid!r:.80}")
            rid = found
        elif rid.__class__ is not int or not 0 <= rid < routing.next_rid:  # (an int subclass, a bool: no id)
            raise RequestRefused(f"no request ever had id {rid!r:.80} (an abort names the engine's int id of a "
                                 "request, or the request_id str it was given)")
        route = self.routes.get(rid)
        if route is not None and route.parent >= 0:
            raise RequestRefused(f"request {rid} is a sample or companion, not a client request")
        callers = self.routing.abort_callers
        call = self.routing.call_id()
        callers.setdefault(rid, []).append(call)
        try:
            out = self._feed(ev.Abort(rid, call))
        except LifecycleError as exc:  # refused: this call waits for nothing (others on ``rid`` still do)
            callers[rid].remove(call)
            if not callers[rid]:
                del callers[rid]
            raise self._refusal(exc) from None
        if rid not in self.routes:  # already ended: the abort has nothing left to do
            for waiting in callers.pop(rid, []):
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
        self.check_prompt(part, "streamed input part")
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
        call = self.routing.call_id()
        try:
            return call, self._feed(ev.Control(call, method, level, tags))
        except LifecycleError as exc:
            raise self._refusal(exc) from None

    def engine_died(self, reason: str | None = None) -> Commands:
        """The engine cannot go on (its host's loop failed, a stage lost its last replica, the hook raised): every
        open request ends as fatal. ``reason`` (why) becomes ``death`` and each such request's terminal error."""
        return self.translation.die(reason)

    def replica_failing(self, stage: int, replica: int, cause: str) -> None:
        """Note why ``replica`` of ``stage`` is lost (its ``ReplicaDied`` follows): the requests it fails name it."""
        self.routing.loss_causes[(stage, replica)] = cause

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

    def runtime_raised(self, command: cmd.Command, error: str) -> Commands:
        """A runtime raised ``error`` while carrying out ``command``: answer as its report would have.

        A dispatch it could not take fails that request (request-scoped, like ``Failed``); a
        physical abort it could not carry out failed (the request runs on: nothing says it is
        gone), and a request that cannot run on (a sample, a companion), whose abort the table
        sends again at once, fails at that stage instead: the retry would go to the runtime that
        just raised. A control RPC it could not run answers its caller with the error.
        """
        return self.intake.runtime_raised(command, error)

    def _refusal(self, exc: LifecycleError) -> OmniRuntimeError:
        state = self.lifecycle.engine.state
        if state in ENGINE_TERMINAL:
            why = f" ({self.death})" if self.death else ""
            return EngineNotRunning(f"engine is {state.value}{why}: {exc}")
        return RequestRefused(str(exc))

    # -- queries --------------------------------------------------------------------------------

    def open_requests(self) -> list[int]:
        """Return the ids of tracked client requests."""
        return sorted(rid for rid, route in self.routes.items() if route.parent < 0)

    def idle(self) -> bool:
        """Return whether no request, abort or RPC is in flight."""
        return not self.routes and not self.routing.rpcs and not self.lifecycle.records

    def held_state(self) -> dict[str, int]:
        """Return the sizes of every map the orchestrator keeps (all zero after a drain)."""
        routing = self.routing
        return {"routes": len(self.routes), "records": len(self.lifecycle.records),
                "aborts": len(routing.aborts) + len(routing.cleanup_aborts),
                "abort_callers": len(routing.abort_callers), "rpcs": len(routing.rpcs),
                "request_ids": len(routing.request_ids) + len(routing.by_request_id)}  # fmt: skip

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
