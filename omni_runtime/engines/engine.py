"""The synchronous API for embedding: submit, iterate outputs, abort, control RPCs, shutdown.

It drives the runtimes in-line (the polling loop without asyncio): every call that waits pumps
the runtimes until its answer arrives.

A listener that raises has its request aborted; its error is raised by ``run_until_idle()`` or
``shutdown()``, never by a wait for another request's outputs, an abort or a control call. So is an
``on_step`` hook's (the engine dies of it: every open request ends as fatal, its error naming the hook).

A wait raises ``NoProgress`` (an ``OmniRuntimeError``, "no progress: ...") after ``max_idle_rounds``
rounds in which every runtime was idle and nothing was reported that the orchestrator could use. A
runtime that keeps saying it is busy but reports nothing (a scheduler deadlock, B4) is caught by
``max_silent_rounds``, when set: off by default, because a runtime may legitimately work a long time
between reports (a diffusion sample of many steps, a wait for remote KV blocks). See
``omni_runtime.engines.watchdog``: the asyncio driver counts the same rounds. A busy runtime's silence is
bounded by time instead, on by default: past ``stall_timeout_s`` seconds its replica is lost and its requests
fail naming the stall (the time between two waits, when nothing steps it, does not count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast, overload

from omni_fsm import SPEC, ControlMethod, Spec
from omni_runtime import registry
from omni_runtime.core import protocol as rp
from omni_runtime.core.commands import ClientMessage
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt
from omni_runtime.core.results import RequestResult, as_batch, request_result
from omni_runtime.core.translation import StepHook
from omni_runtime.engines.host import STALL_TIMEOUT_S, Host, Listener
from omni_runtime.engines.tracing import TraceTarget, finish_trace, open_trace, recording
from omni_runtime.engines.watchdog import Watchdog, no_progress
from omni_runtime.errors import OmniRuntimeError, RpcError


class Engine:
    """A synchronous engine around ``Host``; ``runtimes=None`` uses the simulator.

    ``max_idle_rounds``: how many pumping rounds in a row a wait goes on while every runtime is idle
    and nothing is reported; ``max_silent_rounds`` (``None``: no limit): how many rounds it goes on
    while a runtime says it is busy and nothing is reported; ``max_buffered`` (``None``: no limit): how
    many unread messages a request's mailbox holds before the request is aborted ("consumer stalled");
    ``stall_timeout_s`` (``None``: no limit): how long a replica that says it is busy and holds requests may report
    nothing before it is lost, its requests failed naming the stall (not while the engine is paused or asleep);
    ``trace``: a path (or an ``omni_fsm.trace.TraceWriter``) to record the run's trace to, the end marker written
    by ``shutdown()`` (``omni_runtime.engines.tracing``).
    """

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[rp.StageRuntime]] | None = None, *,
                 seed: int = 0, spec: Spec = SPEC, on_step: StepHook | None = None,
                 max_idle_rounds: int = 1000, max_silent_rounds: int | None = None,
                 max_buffered: int | None = 10_000,
                 stall_timeout_s: float | None = STALL_TIMEOUT_S, trace: TraceTarget = None) -> None:  # fmt: skip
        pipeline = require_pipeline(pipeline, "Engine")
        Watchdog(max_idle_rounds, max_silent_rounds)  # checks the bounds before anything starts
        if runtimes is None:  # the default runtime, by name: the driver imports none
            runtimes = registry.runtimes(pipeline, seed=seed)
        self.trace = open_trace(trace, pipeline, None)  #: the writer of the run's trace (``None``: none)
        try:
            self.host = Host(pipeline, runtimes, spec=spec, on_step=recording(self.trace, on_step),
                             max_buffered=max_buffered, stall_timeout_s=stall_timeout_s)  # fmt: skip
        except BaseException:
            if self.trace is not None:
                self.trace.close()
            raise
        self.host.stall.stop()  # nothing steps the runtimes until a wait does
        self.max_idle_rounds = max_idle_rounds
        self.max_silent_rounds = max_silent_rounds

    @property
    def orchestrator(self):  # type: ignore[no-untyped-def]
        """Return the sans-IO orchestrator."""
        return self.host.orchestrator

    def submit(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0,
               listener: Listener | None = None, *, request_id: str | None = None) -> int:  # fmt: skip
        """Submit a request; return its id. ``listener`` gets each message as it comes (else ``outputs``);
        ``request_id``: your own id for it, on each of its messages (``RequestRefused`` if an open request has it)."""
        return self.host.submit(Prompt() if prompt is None else prompt, n, companions, listener, request_id)

    def outputs(self, rid: int) -> Iterator[ClientMessage]:
        """Yield the request's messages in order, the terminal last (pumping the runtimes as needed).

        A consumer that stops early (``break``, ``close()``) aborts the request. If pumping raises
        (``NoProgress``) the request stays open and keeps its mailbox: calling ``outputs(rid)`` again
        reads on.
        """
        box = self.host.mailboxes.get(rid)
        if box is None:
            raise OmniRuntimeError(f"request {rid} has no mailbox (unknown, or consumed)")
        while True:
            self._pump_until(lambda: bool(box))
            message = box.popleft()
            if message.finished:
                self.host.mailboxes.pop(rid, None)
                yield message
                return
            try:
                yield message
            except GeneratorExit:  # the consumer stopped early: abort its request
                self.host.mailboxes.pop(rid, None)
                self.host.cancel(rid)
                raise

    @overload
    def generate(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0, *,
                 request_id: str | None = None) -> list[ClientMessage]: ...  # fmt: skip
    @overload
    def generate(self, prompt: list[Prompt] | tuple[Prompt, ...], n: int = 1, companions: int = 0, *,
                 request_ids: Sequence[str | None] | None = None) -> list[RequestResult]: ...  # fmt: skip
    def generate(self, prompt: Prompt | list[Prompt] | tuple[Prompt, ...] | None = None, n: int = 1,
                 companions: int = 0, *, request_id: str | None = None,
                 request_ids: Sequence[str | None] | None = None
                 ) -> list[ClientMessage] | list[RequestResult]:  # fmt: skip
        """One prompt: submit it and return every message of the request, the terminal last. A list (or tuple) of
        prompts: submit them all (each with ``n`` and ``companions``; prompt ``i`` with ``request_ids[i]``), let
        them run together, and return one ``RequestResult`` per prompt, in order (as vLLM's ``LLM.generate``).

        A request that is aborted or fails has its result like the others. If the wait gives up (``NoProgress``)
        the requests not ended are aborted: nothing could read them.
        """
        batch = as_batch(prompt, request_id, request_ids)
        if batch is not None:
            return self._generate_all(batch, n, companions, request_ids)
        return list(self.outputs(self.submit(cast(Prompt | None, prompt), n, companions, request_id=request_id)))

    def _generate_all(self, prompts: Sequence[Prompt], n: int, companions: int,
                      request_ids: Sequence[str | None] | None) -> list[RequestResult]:  # fmt: skip
        boxes: list[list[ClientMessage]] = [[] for _ in prompts]
        left = len(prompts)

        def listener_for(box: list[ClientMessage]) -> Listener:
            def listener(message: ClientMessage) -> None:
                nonlocal left
                box.append(message)
                if message.finished:
                    left -= 1

            return listener

        rids = self.host.submit_all(prompts, n, companions, request_ids, [listener_for(box) for box in boxes])
        try:
            self._pump_until(lambda: not left)
        except BaseException:  # nothing could read the requests that did not end: abort them
            for rid, box in zip(rids, boxes, strict=True):
                if not (box and box[-1].finished):
                    self.host.listeners.pop(rid, None)
                    self.host.cancel(rid)
            raise
        kinds = self.host.pipeline.kinds
        return [request_result(box, n, kinds) for box in boxes]

    def abort(self, rid: int | str) -> bool:
        """Abort ``rid`` (the engine's id, or your own ``request_id``); return whether the abort took effect
        (``False``: the physical abort failed; ``True`` for a request that ended). ``RequestRefused`` for an id no
        request ever had."""
        call = self.host.abort(rid)
        self._wait_for(call, self.host.abort_answers)
        return self.host.abort_answers.pop(call).ok

    def control(self, method: ControlMethod, level: int = 1, tags: frozenset[str] = frozenset()) -> None:
        """Run a control RPC on every live replica; raise ``RpcError`` with the worker's error."""
        call = self.host.control(method, level, tags)
        self._wait_for(call, self.host.rpc_answers)
        answer = self.host.rpc_answers.pop(call)
        if not answer.ok:
            raise RpcError(method.value, answer.error or "unknown error")

    def feed(self, rid: int, part: Prompt, last: bool = False) -> None:
        """Feed the next part of the streamed input of ``rid`` (submitted with ``Prompt(streaming=True)``): its
        stage-0 runtime takes it when the request waits for input; ``last``: the input ends with this part.
        Raises ``RequestRefused`` for a request that takes no more input."""
        self.host.feed(rid, part, last)

    def abort_nowait(self, rid: int | str) -> int:
        """Ask to abort ``rid`` without pumping (safe from a listener); return the call id (answer not kept)."""
        return self.host.abort_nowait(rid)

    def replace_replica(self, stage: int, replica: int, runtime: rp.StageRuntime) -> None:
        """Put ``runtime`` (not bound yet) in the place of ``replica`` of ``stage``, a replica that was lost (its
        requests ended with it; a Ray replica's ``replacement()`` makes one); new requests may be bound to it.
        Raises ``RequestRefused`` for a live replica, ``EngineNotRunning`` once the engine stopped or died (a stage
        that lost its last replica killed it)."""
        self.host.replace(stage, replica, runtime)

    def run_until_idle(self) -> None:
        """Pump until no runtime has work and no report is buffered.

        Then raises ``OmniRuntimeError`` naming what the ``on_step`` hook raised and the listeners that
        raised since last reported (their requests were aborted); each is reported once. Raises
        ``NoProgress`` if a runtime stays busy for ``max_silent_rounds`` rounds without reporting anything,
        or keeps reporting only what the orchestrator drops for ``max_idle_rounds`` rounds.
        """
        host, idle, watchdog = self.host, 0, Watchdog(self.max_idle_rounds, self.max_silent_rounds)
        host.stall.go()
        try:
            while idle < 2:
                before = host.progress()
                moved = host.pump()
                idle = 0 if moved else idle + 1
                if moved:
                    why = watchdog.round(host.progress() != before, host.runtimes_busy)
                    if why is not None:
                        raise no_progress(why, host.orchestrator)
        finally:
            host.stall.stop()
        self._raise_unreported()

    def shutdown(self) -> None:
        """Every open request gets its terminal; the orchestrator stops, then the runtimes; idempotent.

        Raises ``OmniRuntimeError`` for runtimes that failed to shut down, else for an ``on_step`` hook
        and listeners that raised and were not reported yet (by ``run_until_idle``). The trace, if one is recorded,
        gets its end marker.
        """
        try:
            self.host.shutdown()
        finally:
            writer, self.trace = self.trace, None
            finish_trace(writer, self.host.orchestrator_stopped)
        self._raise_unreported()

    def _raise_unreported(self) -> None:
        errors = [e for e in (self.host.take_hook_error(), self.host.take_listener_errors()) if e is not None]
        if len(errors) > 1:
            raise OmniRuntimeError("; ".join(str(e) for e in errors)) from errors[0]
        if errors:
            raise errors[0]

    def _wait_for(self, call: int, answers: dict[int, Any]) -> None:
        """Pump until call ``call`` is answered; if that raises, its answer is dropped when it comes."""
        try:
            self._pump_until(lambda: call in answers)
        except BaseException:
            self.host.unclaim(call)
            raise

    def _pump_until(self, done: Callable[[], bool]) -> None:
        """Pump until ``done()``; raise ``NoProgress`` when the watchdog gives up (``engines/watchdog.py``)."""
        if done():
            return
        host, watchdog = self.host, Watchdog(self.max_idle_rounds, self.max_silent_rounds)
        host.stall.go()  # the time since the last wait is no replica's silence
        try:
            while not done():
                before = host.progress()
                host.pump()
                if done():
                    return
                if host.runtimes_stopped:
                    raise no_progress("the runtimes are shut down and the answer never came", host.orchestrator)
                why = watchdog.round(host.progress() != before, host.runtimes_busy)
                if why is not None:
                    raise no_progress(why, host.orchestrator)
        finally:
            host.stall.stop()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
