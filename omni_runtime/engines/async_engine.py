"""The asyncio driver: runs the orchestrator against stage runtimes, event-driven or polling.

Both loops hand the orchestrator every report a runtime produced before that runtime steps
again, so they differ in cadence only: the routing, ordering and terminal contracts (and the
message sequences, for aborts keyed to a request's k-th output) are the same on both.

When the engine dies the host stops the orchestrator by itself; the engine then ends its loop
tasks and shuts the runtimes down without waiting for ``shutdown()``, which stays idempotent and
raises what went wrong (the loop's failure, a failed shutdown, an ``on_step`` hook or listeners that
raised).

No wait goes on without end: both loops count the synchronous engine's rounds (``omni_runtime.engines.watchdog``)
while a reader or an abort or control call waits, and fail those waits with ``NoProgress`` past
``max_idle_rounds`` idle rounds (or ``max_silent_rounds`` busy, silent ones, when set). The polling loop's
rounds are its pumps; the event-driven loop, once every runtime is idle and every report taken, runs such
rounds itself at the polling loop's pace. A wait that only a client call can end (the engine paused or
asleep, a request waiting for its next streamed input part) is not failed: another task may make that call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, NoReturn, cast, overload

from omni_fsm import SPEC, ControlMethod, Spec
from omni_runtime import registry
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.commands import ClientMessage
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt
from omni_runtime.core.results import RequestResult, as_batch, request_result
from omni_runtime.core.translation import StepHook
from omni_runtime.engines.host import STALL_TIMEOUT_S, Host, Listener
from omni_runtime.engines.tracing import TraceTarget, finish_trace, open_trace, recording
from omni_runtime.engines.watchdog import Watchdog, no_progress
from omni_runtime.errors import ConfigError, EngineNotRunning, NoProgress, OmniRuntimeError, RpcError

EVENT, POLL = "event", "poll"
_log = logging.getLogger("omni_runtime")


class AsyncEngine:
    """``async for message in engine.generate(prompt)``; a consumer that stops early aborts its request.
    ``results = await engine.generate([prompt, ...])``: one ``RequestResult`` per prompt, in order.

    Listener errors are logged (logger ``omni_runtime``) when they happen and raised by ``shutdown()``.
    ``max_idle_rounds``, ``max_silent_rounds``, ``max_buffered`` and ``stall_timeout_s`` bound waits, mailboxes and
    a busy replica's silence as ``Engine``'s do; ``trace`` records the run's trace as ``Engine``'s does (its header
    names the loop).
    """

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[rp.StageRuntime]] | None = None, *,
                 loop: str = EVENT, seed: int = 0, spec: Spec = SPEC, on_step: StepHook | None = None,
                 poll_interval: float = 0.001, max_idle_rounds: int = 1000, max_silent_rounds: int | None = None,
                 max_buffered: int | None = 10_000,
                 stall_timeout_s: float | None = STALL_TIMEOUT_S, trace: TraceTarget = None) -> None:  # fmt: skip
        pipeline = require_pipeline(pipeline, "AsyncEngine")
        if loop not in (EVENT, POLL):
            raise ConfigError(f"loop must be {EVENT!r} or {POLL!r}, not {loop!r}")
        self._watchdog = Watchdog(max_idle_rounds, max_silent_rounds)
        if runtimes is None:  # the default runtime, by name: the driver imports none
            runtimes = registry.runtimes(pipeline, seed=seed)
        self.trace = open_trace(trace, pipeline, loop)  #: the writer of the run's trace (``None``: none)
        self.mode, self.poll_interval = loop, poll_interval
        self.max_silent_rounds = max_silent_rounds
        self._blocked: set[int] = set()  #: readers waiting for a message now
        self._reader_errors: dict[int, NoProgress] = {}  #: a blocked reader's reason to give up
        self._quiet: asyncio.Event | None = None  #: event-driven loop: every runtime idle, every report taken
        self._ready: deque[tuple[int, int]] = deque()  #: event-driven loop: (stage, replica) of each buffered report
        self._signal: asyncio.Event | None = None  #: event-driven loop, once started: set when a report is buffered
        self._work: asyncio.Event | None = None  #: polling loop, once started: set when a runtime is given work
        self._wakes: list[list[asyncio.Event]] = []  #: event-driven loop: set when a runtime is given work
        self._parked = 0  #: event-driven loop: replica loops waiting for work
        self._cause = ""  #: why the loop failed, for the readers it strands
        self._tasks: list[asyncio.Task[None]] = []
        self._orchestrator_task: asyncio.Task[None] | None = None
        self._waiters: dict[tuple[type, int], asyncio.Future[cmd.Command]] = {}
        self._readers: dict[int, asyncio.Event] = {}  #: request id -> set when its mailbox gets a message
        self.loop_error: Exception | None = None  #: what made the orchestrator loop fail (raised by shutdown)
        self._failures: list[tuple[str, BaseException]] = []  #: other failures shutdown() raises: (text, cause)
        self._shut = False
        self._closing: asyncio.Task[None] | None = None  #: ends the loops, then the runtimes (once)
        try:
            self.host = Host(pipeline, runtimes, spec=spec, on_step=recording(self.trace, on_step),
                             max_buffered=max_buffered, driver=self, stall_timeout_s=stall_timeout_s)  # fmt: skip
        except BaseException:
            if self.trace is not None:
                self.trace.close()
            raise
        self._replicas = sum(len(r) for r in self.host.runtimes)

    # -- lifecycle of the loops -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the loop tasks in the running event loop (idempotent there; one loop per engine).

        Reports the runtimes buffered before (answering a call made before ``start``) are taken first.
        """
        if self._shut or self._cause or self.host.orchestrator_stopped or self.host.runtimes_stopped:
            raise EngineNotRunning("the engine is shut down")  # (a failed loop is never started again)
        if self._tasks:
            if self._tasks[0].get_loop() is not asyncio.get_running_loop():
                raise OmniRuntimeError("an AsyncEngine runs in the event loop that started it, not another one")
            return
        self._idle = asyncio.Event()
        self._idle.set()
        if self.mode == EVENT:
            ready = self._ready = deque(  # (stage, replica) of each buffered report, in order
                (stage, replica) for stage, replicas in enumerate(self.host.buffers)
                for replica, buffer in enumerate(replicas) for _ in buffer)  # fmt: skip
            signal = self._signal = asyncio.Event()
            if ready:
                signal.set()
            wakes = self._wakes = [[asyncio.Event() for _ in r] for r in self.host.runtimes]
            self._quiet = asyncio.Event()
            self._orchestrator_task = asyncio.create_task(self._event_loop(ready, signal))
            for stage, replicas in enumerate(self.host.runtimes):
                for replica in range(len(replicas)):
                    self._tasks.append(asyncio.create_task(self._replica_loop(stage, replica, wakes[stage][replica])))
            self._tasks.append(asyncio.create_task(self._idle_rounds(self._quiet)))
        else:
            self._work = asyncio.Event()
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
            taken = 0
            while ready:  # every buffered report, without yielding (as a non-empty queue's get would)
                stage, replica = popleft()
                buffer = buffers[stage][replica]
                if buffer and not host.orchestrator_stopped:  # as ``Host.drain`` does, one report at a time
                    taken += 1
                    commands = report(stage, replica, buffer.popleft())
                    if commands or host.pending:
                        execute(commands)
            host.reports_taken += taken
            self._idle.set()
            self._maybe_quiet()
            signal.clear()
            await signal.wait()
            self._idle.clear()

    async def _replica_loop(self, stage: int, replica: int, wake: asyncio.Event) -> None:
        host, step, limit = self.host, self.host.step, self.max_silent_rounds
        seen, silent = host.progress(), 0
        while True:
            await self._idle.wait()  # the orchestrator has taken every report: step again
            wake.clear()
            busy = step(stage, replica)
            if limit is not None:  # opt-in: this runtime's busy steps since anything was reported
                now = host.progress()
                silent, seen = (silent + 1 if busy and now == seen else 0), now
                if silent > limit:
                    silent = 0
                    self._give_up(f"runtime {stage}/{replica} says it is busy but reported nothing for {limit} rounds")
            await asyncio.sleep(0)
            if not busy:
                self._parked += 1
                self._maybe_quiet()
                await wake.wait()
                self._parked -= 1

    def _maybe_quiet(self) -> None:
        """Event-driven loop: wake ``_idle_rounds`` when every runtime is idle and every report taken."""
        if self._quiet is not None and not self._ready and self._parked == self._replicas:
            self._quiet.set()

    async def _idle_rounds(self, quiet: asyncio.Event) -> None:
        """Event-driven loop: while every runtime is idle, every report taken and a wait pending, run the polling
        loop's rounds (at its pace) and count them, so that such a wait gives up as it does there."""
        host, watchdog = self.host, self._watchdog
        try:
            while True:
                await quiet.wait()
                quiet.clear()
                while self._stuck():
                    before = host.progress()
                    host.pump()
                    why = watchdog.round(host.progress() != before, host.runtimes_busy)
                    if why is not None:
                        self._give_up(why)
                    if host.runtimes_busy:  # their own loops step them from here
                        for event in (e for wakes in self._wakes for e in wakes):
                            event.set()
                        break
                    await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # as in the orchestrator loop
            self._crashed(exc)

    def _stuck(self) -> bool:
        """Event-driven loop: whether every runtime is idle, every report taken and a wait pending."""
        return (self._parked == self._replicas and not self._ready and not self.host.orchestrator_stopped
                and not any(e.is_set() for wakes in self._wakes for e in wakes) and self._counted_waits())  # fmt: skip

    def _counted_waits(self) -> bool:
        """Return whether a wait is pending that the runtimes owe (not one that only a client call can end)."""
        if self._waiters:
            return True
        orchestrator = self.host.orchestrator
        return any(not orchestrator.waits_for_client(rid) for rid in self._blocked)

    def _give_up(self, why: str) -> None:
        """Fail every pending wait the runtimes owe with ``NoProgress`` naming ``why`` and what was dropped."""
        orchestrator = self.host.orchestrator
        for rid in sorted(self._blocked):
            if not orchestrator.waits_for_client(rid):
                self._reader_errors[rid] = no_progress(why, orchestrator)
                self._readers[rid].set()
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(no_progress(why, orchestrator))

    async def _poll_loop(self) -> None:
        try:
            await self._poll_loop_body()
        except Exception as exc:  # as in the event-driven loop
            self._crashed(exc)

    async def _poll_loop_body(self) -> None:
        host, watchdog, loop, work = self.host, self._watchdog, asyncio.get_running_loop(), self._work
        assert work is not None  # made by start() before this loop
        while True:
            work.clear()
            before = host.progress()
            moved = host.pump()
            if (self._waiters or self._blocked) and self._counted_waits():
                why = watchdog.round(host.progress() != before, host.runtimes_busy)
                if why is not None:
                    self._give_up(why)
            else:
                watchdog.reset()
            if moved:
                await asyncio.sleep(0)
            else:  # until a runtime is given work or the interval ends (not ``wait_for``: on 3.11 it can swallow
                # the cancellation that ends this loop when both come at once)
                timer = loop.call_later(self.poll_interval, work.set)
                try:
                    await work.wait()
                finally:
                    timer.cancel()

    def _crashed(self, exc: Exception) -> None:
        """The orchestrator loop failed: keep the error, end every open request (fatal), stop."""
        self.loop_error = exc
        self.host.history.append(f"orchestrator loop failed: {type(exc).__name__}: {exc}")
        self._cause = f"the orchestrator loop failed: {type(exc).__name__}: {exc}"
        _log.error("the orchestrator loop failed; every open request ends as fatal", exc_info=exc)
        try:
            self.host.fail_engine(self._cause)
        except Exception as failed:  # the state that broke the loop broke this too: shutdown() says so
            self._failures.append((f"failing the engine failed: {type(failed).__name__}: {failed}", failed))
        if not self.host.runtimes_stopped:  # nothing will run the loops again: end them, and every wait with them
            self._closing_task()

    # -- what the host tells this driver (``HostDriver``) -------------------------------------------------

    def report_buffered(self, stage: int, replica: int) -> None:
        """Event-driven loop: queue the report's position; the first since the loop drained wakes it (once)."""
        signal = self._signal
        if signal is not None:
            ready = self._ready
            ready.append((stage, replica))
            if len(ready) == 1:
                signal.set()

    def work_given(self, stage: int, replica: int) -> None:
        """Wake the loop that steps the runtime (its replica loop, or the polling loop); the wait count starts
        afresh."""
        if self._signal is not None:
            self._wakes[stage][replica].set()
        elif self._work is not None:
            self._work.set()
        else:  # not started: the loops look when they start
            return
        self._watchdog.reset()

    def mailed(self, rid: int) -> None:
        """Wake the reader of ``rid``, if one waits."""
        arrived = self._readers.get(rid)
        if arrived is not None:
            arrived.set()

    def answered(self, answer: cmd.Command) -> None:
        """Hand ``answer`` to the caller waiting for it, if one does."""
        future = self._waiters.get((answer.__class__, answer.call_id))  # type: ignore[attr-defined]
        if future is not None and not future.done():
            future.set_result(answer)

    def stop_runtimes(self, shut_down: Callable[[], None]) -> None:
        """The host's ``StopRuntimes``: end the loops, then the runtimes (``_end_loops``; ``shutdown()`` waits)."""
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
                future.set_exception(EngineNotRunning(f"the engine shut down before the answer came{self._why()}"))

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
        writer, self.trace = self.trace, None
        finish_trace(writer, self.host.orchestrator_stopped)
        self._raise_failures()

    def _raise_failures(self) -> None:
        failures, self._failures = self._failures, []
        if self.loop_error is not None:
            error, self.loop_error = self.loop_error, None
            failures.insert(0, (f"the orchestrator loop failed: {type(error).__name__}: {error}", error))
        for unreported in (self.host.take_hook_error(), self.host.take_listener_errors()):
            if unreported is not None:
                failures.append((str(unreported), unreported))
        if failures:
            raise OmniRuntimeError("; ".join(text for text, _ in failures)) from failures[0][1]

    async def __aenter__(self) -> AsyncEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- the client API ---------------------------------------------------------------------------

    def submit(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0,
               listener: Listener | None = None, *, request_id: str | None = None) -> int:  # fmt: skip
        """Submit; return the id. ``listener`` gets each message synchronously, else read them with ``outputs``;
        ``request_id``: your own id for it, on each of its messages (``RequestRefused`` if an open request has it).

        Without a listener the messages wait in the request's mailbox until ``outputs(rid)`` reads them.
        """
        return self.host.submit(Prompt() if prompt is None else prompt, n, companions, listener, request_id)

    @overload
    def generate(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0, *,
                 request_id: str | None = None) -> AsyncGenerator[ClientMessage, None]: ...  # fmt: skip
    @overload
    def generate(self, prompt: list[Prompt] | tuple[Prompt, ...], n: int = 1, companions: int = 0, *,
                 request_ids: Sequence[str | None] | None = None
                 ) -> Awaitable[list[RequestResult]]: ...  # fmt: skip
    def generate(self, prompt: Prompt | list[Prompt] | tuple[Prompt, ...] | None = None, n: int = 1,
                 companions: int = 0, *, request_id: str | None = None, request_ids: Sequence[str | None] | None = None
                 ) -> AsyncGenerator[ClientMessage, None] | Awaitable[list[RequestResult]]:  # fmt: skip
        """One prompt: ``async for`` the request's messages, the terminal last; stopping early (or cancelling)
        aborts it. A list (or tuple) of prompts: ``await`` it for one ``RequestResult`` per prompt, in order (each
        with ``n`` and ``companions``; prompt ``i`` with ``request_ids[i]``), all submitted before any is awaited;
        cancelling the await aborts the requests not ended, and so does a wait that gives up (``NoProgress``).
        """
        batch = as_batch(prompt, request_id, request_ids)
        if batch is not None:
            return _Batch(self._generate_all(batch, n, companions, request_ids))
        return self._generate_one(cast(Prompt | None, prompt), n, companions, request_id)

    async def _generate_one(self, prompt: Prompt | None, n: int, companions: int,
                            request_id: str | None) -> AsyncGenerator[ClientMessage, None]:  # fmt: skip
        await self.start()
        rid = self.submit(prompt, n, companions, request_id=request_id)
        async with contextlib.aclosing(self.outputs(rid)) as messages:
            async for message in messages:
                yield message

    async def _generate_all(self, prompts: Sequence[Prompt], n: int, companions: int,
                            request_ids: Sequence[str | None] | None) -> list[RequestResult]:  # fmt: skip
        await self.start()
        rids = self.host.submit_all(prompts, n, companions, request_ids, [None] * len(prompts))
        readers = [asyncio.ensure_future(self._read_to_end(rid)) for rid in rids]  # a cancelled one aborts its request
        try:
            boxes = await asyncio.gather(*readers)
        finally:  # one reader raised, or the caller cancelled: the others' requests are aborted too
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        kinds = self.host.pipeline.kinds
        return [request_result(box, n, kinds) for box in boxes]

    async def _read_to_end(self, rid: int) -> list[ClientMessage]:
        async with contextlib.aclosing(self.outputs(rid)) as messages:
            return [message async for message in messages]

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
                        raise EngineNotRunning(f"the engine shut down before request {rid} ended{self._why()}")
                    arrived.clear()
                    self._blocked.add(rid)
                    self._maybe_quiet()
                    try:
                        await arrived.wait()
                    finally:
                        self._blocked.discard(rid)
                    gave_up = self._reader_errors.pop(rid, None)
                    if gave_up is not None:  # the request is aborted below, as for any reader that stops
                        raise gave_up
                message = box.popleft()
                finished = message.finished
                if finished:
                    self.host.mailboxes.pop(rid, None)
                yield message
                if finished:
                    return
        finally:
            self._readers.pop(rid, None)
            self._reader_errors.pop(rid, None)
            if not finished:  # the consumer stopped early or was cancelled: abort (its mailbox goes too)
                self.host.mailboxes.pop(rid, None)
                self.host.cancel(rid)

    def _why(self) -> str:
        cause = self._cause or self.host.orchestrator.death
        return f" ({cause})" if cause else ""

    def replace_replica(self, stage: int, replica: int, runtime: rp.StageRuntime) -> None:
        """Put ``runtime`` (not bound yet) in the place of ``replica`` of ``stage``, a replica that was lost (its
        requests ended with it); call it in the engine's event loop. Its replica loop steps it from now on. Raises
        ``RequestRefused`` for a live replica, ``EngineNotRunning`` once the engine stopped or died."""
        if self._shut or self._cause:
            raise EngineNotRunning("the engine is shut down: no replica is replaced")
        self.host.replace(stage, replica, runtime)

    def abort_nowait(self, rid: int | str) -> int:
        """Ask to abort ``rid`` now, not waiting for the answer (which is not kept); return the call id."""
        return self.host.abort_nowait(rid)

    def feed(self, rid: int, part: Prompt, last: bool = False) -> None:
        """Feed the next part of the streamed input of ``rid`` (submitted with ``Prompt(streaming=True)``);
        ``last``: the input ends with it. Raises ``RequestRefused`` for a request that takes no more input."""
        self.host.feed(rid, part, last)

    async def abort(self, rid: int | str) -> bool:
        """Abort ``rid`` (the engine's id, or your own ``request_id``); return whether it took effect (``False``: the
        physical abort failed; ``True`` for a request that ended). ``RequestRefused`` for an id no request ever had.

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
        self._maybe_quiet()
        try:
            return await future
        finally:
            self._waiters.pop((kind, call), None)
            if not future.done() or future.cancelled() or future.exception() is not None:  # nobody keeps the answer
                self.host.unclaim(call)
            answers.pop(call, None)


class _Batch:
    """``generate`` over a list: awaited for its results; ``async for`` over it is refused with the right call."""

    __slots__ = ("_results",)

    def __init__(self, results: Coroutine[Any, Any, list[RequestResult]]) -> None:
        self._results = results

    def __await__(self) -> Generator[Any, None, list[RequestResult]]:
        return self._results.__await__()

    def __aiter__(self) -> NoReturn:
        self._results.close()  # never started: nothing was submitted, and no "never awaited" warning
        raise TypeError("generate over a list of prompts is awaited, not iterated: results = await "
                        "engine.generate([...]) (one RequestResult per prompt); async for takes one prompt's "
                        "messages: async for message in engine.generate(prompt)")
