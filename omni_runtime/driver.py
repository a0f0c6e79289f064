"""The asyncio driver: runs the orchestrator against stage runtimes, event-driven or polling.

Both loops hand the orchestrator every report a runtime produced before that runtime steps
again, so they differ in cadence only: the routing, ordering and terminal contracts (and the
message sequences, for aborts keyed to a request's k-th output) are the same on both.

When the engine dies the host stops the orchestrator by itself; the engine then ends its loop
tasks and shuts the runtimes down without waiting for ``shutdown()``, which stays idempotent and
raises what went wrong (the loop's failure, a failed shutdown, listeners that raised).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from omni_fsm import SPEC, ControlMethod, Spec
from omni_runtime import commands as cmd
from omni_runtime import protocol as rp
from omni_runtime.adapters import Prompt
from omni_runtime.commands import ClientMessage
from omni_runtime.errors import ConfigError, EngineNotRunning, OmniRuntimeError, RpcError
from omni_runtime.host import Host, Listener
from omni_runtime.orchestrator import StepHook
from omni_runtime.pipeline import Pipeline, require_pipeline
from omni_runtime.runtime_names import runtime

EVENT, POLL = "event", "poll"
_log = logging.getLogger("omni_runtime")


class AsyncEngine:
    """``async for message in engine.generate(prompt)``; a consumer that stops early aborts its request.

    Listener errors are logged (logger ``omni_runtime``) when they happen and raised by ``shutdown()``.
    """

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[rp.StageRuntime]] | None = None, *,
                 loop: str = EVENT, seed: int = 0, spec: Spec = SPEC, on_step: StepHook | None = None,
                 poll_interval: float = 0.001) -> None:  # fmt: skip
        pipeline = require_pipeline(pipeline, "AsyncEngine")
        if loop not in (EVENT, POLL):
            raise ConfigError(f"loop must be {EVENT!r} or {POLL!r}, not {loop!r}")
        if runtimes is None:  # the default runtime, by name: the driver imports none
            runtimes = runtime()(pipeline, seed)
        self.host = Host(pipeline, runtimes, spec=spec, on_step=on_step)
        self.mode, self.poll_interval = loop, poll_interval
        self._tasks: list[asyncio.Task[None]] = []
        self._orchestrator_task: asyncio.Task[None] | None = None
        self._waiters: dict[tuple[type, int], asyncio.Future[cmd.Command]] = {}
        self._readers: dict[int, asyncio.Event] = {}  #: request id -> set when its mailbox gets a message
        self.host.answered = self._answered
        self.host.mailed = self._mailed
        self.loop_error: Exception | None = None  #: what made the orchestrator loop fail (raised by shutdown)
        self._failures: list[tuple[str, BaseException]] = []  #: other failures shutdown() raises: (text, cause)
        self._shut = False
        self._closing: asyncio.Task[None] | None = None  #: ends the loops, then the runtimes (once)
        self.host.stop_runtimes = self._orchestrator_stopped  # deferred: the loop must stop first

    # -- lifecycle of the loops -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the loop tasks in the running event loop (idempotent there; one loop per engine).

        Reports the runtimes buffered before (answering a call made before ``start``) are taken first.
        """
        if self._shut or self.host.orchestrator_stopped:
            raise EngineNotRunning("the engine is shut down")
        if self._tasks:
            if self._tasks[0].get_loop() is not asyncio.get_running_loop():
                raise OmniRuntimeError("an AsyncEngine runs in the event loop that started it, not another one")
            return
        self._idle = asyncio.Event()
        self._idle.set()
        self._work = asyncio.Event()
        if self.mode == EVENT:
            ready: deque[tuple[int, int]] = deque(  # (stage, replica) of each buffered report, in order
                (stage, replica) for stage, replicas in enumerate(self.host.buffers)
                for replica, buffer in enumerate(replicas) for _ in buffer)  # fmt: skip
            signal = asyncio.Event()
            if ready:
                signal.set()

            def notify(stage: int, replica: int) -> None:
                ready.append((stage, replica))
                if len(ready) == 1:  # the first report since the loop drained: wake it (once)
                    signal.set()

            self.host.notify = notify
            wakes = [[asyncio.Event() for _ in r] for r in self.host.runtimes]
            self.host.wake = lambda stage, replica: wakes[stage][replica].set()
            self._orchestrator_task = asyncio.create_task(self._event_loop(ready, signal))
            for stage, replicas in enumerate(self.host.runtimes):
                for replica in range(len(replicas)):
                    self._tasks.append(asyncio.create_task(self._replica_loop(stage, replica, wakes[stage][replica])))
        else:
            self.host.wake = lambda stage, replica: self._work.set()
            self._orchestrator_task = asyncio.create_task(self._poll_loop())
        self._tasks.append(self._orchestrator_task)

    async def _event_loop(self, ready: deque[tuple[int, int]], signal: asyncio.Event) -> None:
        try:
            await self._event_loop_body(ready, signal)
        except Exception as exc:  # a bug here or in a runtime's report: fail every request, never hang
            self._crashed(exc)

    async def _event_loop_body(self, ready: deque[tuple[int, int]], signal: asyncio.Event) -> None:
        host, popleft = self.host, ready.popleft
        buffers, report, execute = host.buffers, host.orchestrator.report, host.execute
        while True:
            while ready:  # every buffered report, without yielding (as a non-empty queue's get would)
                stage, replica = popleft()
                buffer = buffers[stage][replica]
                if buffer and not host.orchestrator_stopped:  # as ``Host.drain`` does, one report at a time
                    commands = report(stage, replica, buffer.popleft())
                    if commands or host.pending:
                        execute(commands)
            self._idle.set()
            signal.clear()
            await signal.wait()
            self._idle.clear()

    async def _replica_loop(self, stage: int, replica: int, wake: asyncio.Event) -> None:
        step = self.host.step
        while True:
            await self._idle.wait()  # the orchestrator has taken every report: step again
            wake.clear()
            busy = step(stage, replica)
            await asyncio.sleep(0)
            if not busy:
                await wake.wait()

    async def _poll_loop(self) -> None:
        try:
            await self._poll_loop_body()
        except Exception as exc:  # as in the event-driven loop
            self._crashed(exc)

    async def _poll_loop_body(self) -> None:
        while True:
            self._work.clear()
            if self.host.pump():
                await asyncio.sleep(0)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work.wait(), self.poll_interval)

    def _crashed(self, exc: Exception) -> None:
        """The orchestrator loop failed: keep the error, end every open request (fatal), stop."""
        self.loop_error = exc
        self.host.history.append(f"orchestrator loop failed: {type(exc).__name__}: {exc}")
        _log.error("the orchestrator loop failed; every open request ends as fatal", exc_info=exc)
        try:
            self.host.fail_engine()
        except Exception as failed:  # the state that broke the loop broke this too: shutdown() says so
            self._failures.append((f"failing the engine failed: {type(failed).__name__}: {failed}", failed))

    def _orchestrator_stopped(self) -> None:
        """The host's ``StopRuntimes``: end the loops and the runtimes now (``shutdown()`` waits for that)."""
        with contextlib.suppress(RuntimeError):  # no event loop runs: shutdown() will do it
            self._closing_task()

    def _closing_task(self) -> asyncio.Task[None]:
        """Return the one task that ends the loops and the runtimes (made on first call; made again if
        something cancelled it before it was done, such as an event loop cancelling every task)."""
        if self._closing is None or self._closing.cancelled():
            self._closing = asyncio.get_running_loop().create_task(self._end_loops())
        return self._closing

    async def _end_loops(self) -> None:
        """Cancel the loop tasks and wait for them; then shut the runtimes down and wake who still waits."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []  # (only once they all ended: a closing task cancelled meanwhile is made again)
        if self.host.runtimes_stopped:
            return
        self.host.history.append("orchestrator loop ended")
        try:
            self.host.shutdown_runtimes()
        except OmniRuntimeError as exc:
            self._failures.append((str(exc), exc))
        for arrived in self._readers.values():  # a reader whose request got no terminal ends (EngineNotRunning)
            arrived.set()
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(EngineNotRunning("the engine shut down before the answer came"))

    async def shutdown(self) -> None:
        """Every open request gets its terminal; the orchestrator loop stops; then the runtimes shut down.

        Idempotent; after an engine death the engine has shut itself down already. Raises
        ``OmniRuntimeError`` (after shutting everything down) naming what went wrong and was not
        reported yet: the loop's failure, a failure of the orchestrator's or a runtime's shutdown,
        and the listeners that raised (each request aborted, each error logged when it happened).
        """
        self._shut = True
        try:
            self.host.shutdown()
        except Exception as exc:  # a loop that failed leaves the host as it could: stop the rest, then say so
            self._failures.append((f"shutting down failed: {type(exc).__name__}: {exc}", exc))
        # shielded: a caller cancelled meanwhile leaves the runtimes' shutdown running, not half-done
        await asyncio.shield(self._closing_task())
        self._raise_failures()

    def _raise_failures(self) -> None:
        failures, self._failures = self._failures, []
        if self.loop_error is not None:
            error, self.loop_error = self.loop_error, None
            failures.insert(0, (f"the orchestrator loop failed: {type(error).__name__}: {error}", error))
        listeners = self.host.take_listener_errors()
        if listeners is not None:
            failures.append((str(listeners), listeners))
        if failures:
            raise OmniRuntimeError("; ".join(text for text, _ in failures)) from failures[0][1]

    async def __aenter__(self) -> AsyncEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- the client API ---------------------------------------------------------------------------

    def submit(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0,
               listener: Listener | None = None) -> int:  # fmt: skip
        """Submit; return the id. ``listener`` gets each message synchronously, else read them with ``outputs``.

        Without a listener the messages wait in the request's mailbox until ``outputs(rid)`` reads them.
        """
        return self.host.submit(Prompt() if prompt is None else prompt, n, companions, listener)

    async def generate(self, prompt: Prompt | None = None, n: int = 1,
                       companions: int = 0) -> AsyncGenerator[ClientMessage, None]:  # fmt: skip
        """Yield the request's messages, the terminal last; stopping early (or cancelling) aborts it."""
        await self.start()
        rid = self.submit(prompt, n, companions)
        async with contextlib.aclosing(self.outputs(rid)) as messages:
            async for message in messages:
                yield message

    async def outputs(self, rid: int) -> AsyncGenerator[ClientMessage, None]:
        """Yield the messages of ``rid`` (submitted without a listener), the terminal last; its mailbox goes with it.

        Stopping early (or cancelling) aborts the request. Raises ``OmniRuntimeError`` if ``rid``
        has no mailbox (unknown, read already, or it has a listener) or is being read already, and
        ``EngineNotRunning`` if the engine ended without ending the request (a failed shutdown).
        """
        box = self.host.mailboxes.get(rid)
        if box is None:
            raise OmniRuntimeError(f"request {rid} has no mailbox (unknown, read already, or it has a listener)")
        if rid in self._readers:
            raise OmniRuntimeError(f"request {rid} is being read already")
        if not (self._shut or self.host.orchestrator_stopped):
            await self.start()
        arrived = self._readers[rid] = asyncio.Event()
        finished = False
        try:
            while True:
                while not box:
                    if self.host.orchestrator_stopped or self.host.runtimes_stopped:  # nothing more will come
                        raise EngineNotRunning(f"the engine shut down before request {rid} ended")
                    arrived.clear()
                    await arrived.wait()
                message = box.popleft()
                finished = message.finished
                if finished:
                    self.host.mailboxes.pop(rid, None)
                yield message
                if finished:
                    return
        finally:
            self._readers.pop(rid, None)
            if not finished:  # the consumer stopped early or was cancelled: abort (its mailbox goes too)
                self.host.mailboxes.pop(rid, None)
                self.host.cancel(rid)

    def _mailed(self, rid: int) -> None:
        arrived = self._readers.get(rid)
        if arrived is not None:
            arrived.set()

    def abort_nowait(self, rid: int) -> int:
        """Ask to abort ``rid`` now, not waiting for the answer (which is not kept); return the call id."""
        return self.host.abort_nowait(rid)

    def feed(self, rid: int, part: Prompt, last: bool = False) -> None:
        """Feed the next part of the streamed input of ``rid`` (submitted with ``Prompt(streaming=True)``);
        ``last``: the input ends with it. Raises ``RequestRefused`` for a request that takes no more input."""
        self.host.feed(rid, part, last)

    async def abort(self, rid: int) -> bool:
        """Abort ``rid``; return whether it took effect (``False``: the physical abort failed).

        After the engine stopped there is nothing left to abort: ``True``, as for a request that ended;
        after a ``shutdown()`` that failed to stop it, ``EngineNotRunning`` (no runtime would answer).
        """
        if not self.host.orchestrator_stopped:
            if self._shut or self.host.runtimes_stopped:
                raise EngineNotRunning("the engine is shut down")
            await self.start()
        call = self.host.abort(rid)
        answer = await self._answer(cmd.AbortAnswer, call, self.host.abort_answers)
        return answer.ok  # type: ignore[attr-defined,no-any-return]

    async def control(self, method: ControlMethod, level: int = 1, tags: frozenset[str] = frozenset()) -> None:
        """Run a control RPC on every live replica; raise ``RpcError`` carrying the worker's error."""
        await self.start()
        call = self.host.control(method, level, tags)
        answer = await self._answer(cmd.RpcAnswer, call, self.host.rpc_answers)
        if not answer.ok:  # type: ignore[attr-defined]
            raise RpcError(method.value, answer.error or "unknown error")  # type: ignore[attr-defined]

    async def _answer(self, kind: type, call: int, answers: dict[int, Any]) -> cmd.Command:
        if call in answers:
            answer: cmd.Command = answers.pop(call)
            return answer
        future: asyncio.Future[cmd.Command] = asyncio.get_running_loop().create_future()
        self._waiters[(kind, call)] = future
        try:
            return await future
        finally:
            self._waiters.pop((kind, call), None)
            if not future.done() or future.cancelled():  # the caller gave up: its answer is not kept
                self.host.unclaim(call)
            answers.pop(call, None)

    def _answered(self, answer: cmd.Command) -> None:
        future = self._waiters.get((answer.__class__, answer.call_id))  # type: ignore[attr-defined]
        if future is not None and not future.done():
            future.set_result(answer)
