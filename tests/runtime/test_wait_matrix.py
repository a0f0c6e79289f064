"""No wait without end: every way a wait could hang, on the synchronous engine and on both asyncio loops.

Each case runs one wait (a request's messages, an abort, a control call) against a runtime that cannot
answer it, with small bounds (``max_idle_rounds=5``; ``max_silent_rounds=5`` where set). It must end
within its bound (counted in the runtime's steps) naming its cause: ``NoProgress`` with the reason and
what the orchestrator dropped, or the request's fatal terminal whose error says what broke. Every wait
runs in a thread joined with a wall-clock timeout, so a regression fails its test instead of hanging the
suite. The asyncio modes run on asyncio's own event loop and, where uvloop is installed, on uvloop's.
A stalled consumer delays no other request and is aborted past ``max_buffered`` ("consumer stalled");
an asyncio wait that only a client call can end (a paused engine, a streaming-input session) is not
failed, since another task may make that call.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from omni_fsm import ControlMethod, Outcome, StageKind
from omni_runtime import (
    AsyncEngine,
    ClientMessage,
    Engine,
    NoProgress,
    OmniRuntimeError,
    Orchestrator,
    Prompt,
    simple_pipeline,
)
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import sim_runtimes

WALL_CLOCK = 10.0  #: seconds any one wait may take here before its test fails as hung
IDLE = SILENT = 5  #: the bounds every case runs under, in rounds
ONE = simple_pipeline([StageKind.AR], replicas=1, max_running=4, max_tokens=4)
MODES = ["sync", "event", "poll"]
if importlib.util.find_spec("uvloop") is not None:
    MODES += ["event-uvloop", "poll-uvloop"]
ASYNC_MODES = [m for m in MODES if m != "sync"]


# -- runtimes that cannot answer ---------------------------------------------------------------------


class Quiet:
    """Schedules each request it is given, then says nothing more and is idle; answers no abort, no RPC."""

    def __init__(self) -> None:
        self.sink: Any = None
        self.steps = 0
        self.todo: list[int] = []

    def bind(self, sink: rp.ReportSink) -> None:
        self.sink = sink

    def add_request(self, req_id: int, stage_input: Any) -> None:
        self.sink(rp.StatusChanged(req_id, 0, rp.Status.SCHEDULED))

    def abort_requests(self, abort_id: int, req_ids: Any) -> None:
        pass

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        pass

    def step(self) -> bool:
        self.steps += 1
        return False

    def shutdown(self) -> None:
        pass


class ForeignIds(Quiet):
    """Runs every request to its end but reports it under ``str(req_id)``, as vLLM's string ids invite."""

    def add_request(self, req_id: int, stage_input: Any) -> None:
        self.todo.append(req_id)

    def step(self) -> bool:
        self.steps += 1
        for rid in self.todo:
            for report in (rp.StatusChanged(str(rid), 0, rp.Status.SCHEDULED), rp.Output(str(rid), 1, 1, (7,)),
                           rp.Finished(str(rid), 2)):  # fmt: skip
                self.sink(report)
        self.todo.clear()
        return False


class SkipsASeq(Quiet):
    """Reports an output and the finish after a ``seq`` it never sends: they wait for it for ever."""

    def add_request(self, req_id: int, stage_input: Any) -> None:
        super().add_request(req_id, stage_input)
        self.todo.append(req_id)

    def step(self) -> bool:
        self.steps += 1
        for rid in self.todo:
            self.sink(rp.Output(rid, 2, 1, (7,)))
            self.sink(rp.Finished(rid, 3))
        self.todo.clear()
        return False


class RaisingStep(Quiet):
    """Its ``step()`` raises."""

    def step(self) -> bool:
        self.steps += 1
        raise ValueError("step broke")


class BusyAndSilent(Quiet):
    """Says it is busy for ever and reports nothing (a deadlocked scheduler, B4)."""

    def step(self) -> bool:
        self.steps += 1
        return True


class SlowButSure(Quiet):
    """Busy and silent for ``work`` steps, then finishes each request it holds."""

    def __init__(self, work: int) -> None:
        super().__init__()
        self.work, self.left = work, work

    def add_request(self, req_id: int, stage_input: Any) -> None:
        super().add_request(req_id, stage_input)
        self.todo.append(req_id)

    def step(self) -> bool:
        self.steps += 1
        if not self.todo:
            return False
        self.left -= 1
        if self.left:
            return True
        for rid in self.todo:
            self.sink(rp.Output(rid, 1, 1, (7,)))
            self.sink(rp.Finished(rid, 2))
        self.todo.clear()
        return False


def _hook_breaks_at_the_first_output(event: Any, observations: Any) -> None:
    if type(event).__name__ == "StageOutput":
        raise RuntimeError("hook broke")


# -- running one wait in one mode, within a wall-clock bound --------------------------------------------


def _within(seconds: float, body: Callable[[], Any]) -> Any:
    """Return what ``body()`` returns in a thread of its own; fail the test if it has not ended in ``seconds``."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = body()
        except BaseException as exc:  # handed to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the wait did not end within {seconds} s"
    if "error" in result:
        raise result["error"]
    return result["value"]


def _run_async(mode: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``main()`` on asyncio's event loop, or uvloop's for a ``-uvloop`` mode, within the wall clock."""

    def body() -> Any:
        factory = None
        if mode.endswith("-uvloop"):
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main())

    return _within(WALL_CLOCK, body)


def _wait(mode: str, runtime: Any, call: str, on_step: Any = None, **bounds: Any) -> tuple[Any, Any]:
    """Run the wait ``call`` (``generate``, ``abort``, ``control``) on a fresh engine over ``runtime`` in
    ``mode``; return what it ended with (its result or the ``OmniRuntimeError`` it raised) and what
    ``shutdown()`` raised afterwards (``None``: nothing)."""
    runtimes = sim_runtimes(ONE, seed=1) if runtime is None else [[runtime]]
    bounds = {"max_idle_rounds": IDLE, **bounds}
    if mode == "sync":
        engine = Engine(ONE, runtimes, on_step=on_step, **bounds)

        def body() -> tuple[Any, Any]:
            try:
                if call == "generate":
                    ended: Any = engine.generate(Prompt((1, 2)))
                elif call == "abort":
                    ended = engine.abort(engine.submit(Prompt((1, 2))))
                else:
                    ended = engine.control(ControlMethod.PAUSE_SCHEDULER)
            except OmniRuntimeError as exc:
                ended = exc
            try:
                engine.shutdown()
            except OmniRuntimeError as exc:
                return ended, exc
            return ended, None

        return _within(WALL_CLOCK, body)  # type: ignore[no-any-return]

    async def main() -> tuple[Any, Any]:
        engine = AsyncEngine(ONE, runtimes, loop=mode.split("-")[0], on_step=on_step, **bounds)
        await engine.start()
        try:
            if call == "generate":
                ended: Any = [m async for m in engine.generate(Prompt((1, 2)))]
            elif call == "abort":
                ended = await engine.abort(engine.submit(Prompt((1, 2))))
            else:
                ended = await engine.control(ControlMethod.PAUSE_SCHEDULER)
        except OmniRuntimeError as exc:
            ended = exc
        try:
            await engine.shutdown()
        except OmniRuntimeError as exc:
            return ended, exc
        return ended, None

    return _run_async(mode, main)  # type: ignore[no-any-return]


def _fatal_terminal(ended: Any) -> ClientMessage:
    assert isinstance(ended, list), ended
    terminal = ended[-1]
    assert terminal.finished and terminal.outcome is Outcome.FATAL, terminal
    return terminal  # type: ignore[no-any-return]


# -- the matrix: case x mode -----------------------------------------------------------------------


#: case -> (runtime factory, wait, extra bounds, the NoProgress message it must match)
GIVES_UP: dict[str, tuple[Callable[[], Any], str, dict[str, Any], str]] = {
    "unknown ids": (ForeignIds, "generate", {},
                    r"^no progress: the runtimes are idle .*; reports dropped under request ids the orchestrator "
                    r"never gave: 3 \(the last: Finished under request id '0' \(str\) from runtime 0/0\)$"),
    "a seq never sent": (SkipsASeq, "generate", {},
                         r"^no progress: the runtimes are idle .*; request 0 holds reports for a seq that never "
                         r"came \(it waits for seq 1\)$"),
    "idle runtime": (Quiet, "generate", {}, r"^no progress: the runtimes are idle and the answer never came "
                                            r"\(5 rounds without a report\)$"),
    "idle runtime, abort": (Quiet, "abort", {}, r"^no progress: the runtimes are idle"),
    "idle runtime, control": (Quiet, "control", {}, r"^no progress: the runtimes are idle"),
    "busy and silent": (BusyAndSilent, "generate", {"max_silent_rounds": SILENT},
                        r"^no progress: (a runtime|runtime 0/0) says it is busy but reported nothing for 5 rounds$"),
}  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(GIVES_UP))
def test_a_wait_that_cannot_end_gives_up_within_its_bound_naming_why(case: str, mode: str) -> None:
    factory, call, bounds, message = GIVES_UP[case]
    runtime = factory()
    ended, shutdown_error = _wait(mode, runtime, call, **bounds)
    assert isinstance(ended, NoProgress), ended
    assert re.search(message, str(ended)), str(ended)
    assert runtime.steps <= max(IDLE, SILENT) + 3, runtime.steps  # the bound, in the runtime's own steps
    assert shutdown_error is None


@pytest.mark.parametrize("mode", MODES)
def test_a_raising_step_ends_the_wait_with_a_fatal_terminal_naming_it(mode: str) -> None:
    runtime = RaisingStep()
    ended, shutdown_error = _wait(mode, runtime, "generate")
    terminal = _fatal_terminal(ended)
    assert terminal.error == "replica 0/0 is lost: its step() raised ValueError: step broke"
    assert runtime.steps == 1 and shutdown_error is None


@pytest.mark.parametrize("mode", MODES)
def test_a_raising_hook_ends_every_wait_with_a_fatal_terminal_naming_it_and_shutdown_raises_it(mode: str) -> None:
    ended, shutdown_error = _wait(mode, None, "generate", on_step=_hook_breaks_at_the_first_output)
    terminal = _fatal_terminal(ended)
    assert terminal.error == "the on_step hook raised RuntimeError: hook broke (at StageOutput)"
    assert [m.finished for m in ended].count(True) == 1
    assert str(shutdown_error) == ("the on_step hook raised RuntimeError: hook broke; every open request ended "
                                   "as fatal")  # fmt: skip
    causes = [shutdown_error]
    while causes[-1].__cause__ is not None:
        causes.append(causes[-1].__cause__)
    assert repr(causes[-1]) == "RuntimeError('hook broke')"


@pytest.mark.parametrize("mode", MODES)
def test_a_busy_silent_runtime_is_waited_for_past_the_idle_bound_without_a_silence_bound(mode: str) -> None:
    runtime = SlowButSure(work=10 * IDLE)
    ended, shutdown_error = _wait(mode, runtime, "generate")
    assert isinstance(ended, list) and ended[-1].outcome is Outcome.FINISHED, ended
    assert runtime.steps >= 10 * IDLE and shutdown_error is None


def test_the_bounds_are_checked_when_an_engine_is_made() -> None:
    with pytest.raises(ValueError, match="max_idle_rounds is an integer >= 0, not -1"):
        Engine(ONE, [[Quiet()]], max_idle_rounds=-1)
    with pytest.raises(ValueError, match="max_silent_rounds is an integer >= 0, not 'x'"):
        AsyncEngine(ONE, [[Quiet()]], max_silent_rounds="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_buffered is an integer >= 1 or None, not 0"):
        Engine(ONE, [[Quiet()]], max_buffered=0)


# -- a stalled consumer -------------------------------------------------------------------------------

LONG, SHORT = Prompt((1, 2), max_tokens=40), Prompt((3, 4), max_tokens=4)


def _stalled_then_read(messages: list[ClientMessage], cap: int) -> None:
    """What a consumer that stalled reads when it comes back: at most ``cap`` messages, then its terminal,
    aborted as "consumer stalled"."""
    assert len(messages) <= cap + 1
    terminal = messages[-1]
    assert (terminal.finished, terminal.outcome, terminal.error) == (True, Outcome.ABORTED, "consumer stalled")


def test_a_stalled_sync_consumer_delays_no_other_request_and_is_aborted_past_its_buffer() -> None:
    engine = Engine(ONE, sim_runtimes(ONE, seed=1), max_idle_rounds=IDLE, max_buffered=3)

    def body() -> tuple[list[ClientMessage], list[ClientMessage]]:
        stalled = engine.submit(LONG)
        other = list(engine.outputs(engine.submit(SHORT)))  # meanwhile nobody reads ``stalled``
        engine.run_until_idle()
        return other, list(engine.outputs(stalled))

    other, stalled = _within(WALL_CLOCK, body)
    assert other[-1].outcome is Outcome.FINISHED and [m.finished for m in other].count(True) == 1
    _stalled_then_read(stalled, 3)
    assert engine.host.stalled == set() and engine.host.mailboxes == {}
    engine.shutdown()


@pytest.mark.parametrize("mode", ASYNC_MODES)
def test_a_stalled_async_consumer_delays_no_other_request_and_is_aborted_past_its_buffer(mode: str) -> None:
    async def main() -> tuple[ClientMessage, list[ClientMessage], list[ClientMessage], AsyncEngine]:
        engine = AsyncEngine(ONE, sim_runtimes(ONE, seed=1), loop=mode.split("-")[0], max_idle_rounds=IDLE,
                             max_buffered=3)  # fmt: skip
        async with engine:
            stalled = engine.generate(LONG)
            first = await stalled.__anext__()  # ... and then it is not iterated for a while
            other = [m async for m in engine.generate(SHORT)]
            while first.rid in engine.host.orchestrator.routes:  # its mailbox fills up; its request is aborted
                await asyncio.sleep(0.001)
            rest = [m async for m in stalled]
        return first, rest, other, engine

    first, rest, other, engine = _run_async(mode, main)
    assert other[-1].outcome is Outcome.FINISHED and [m.finished for m in other].count(True) == 1
    assert not first.finished
    _stalled_then_read([first, *rest], 4)  # the first message was read before it stalled
    assert engine.host.mailboxes == {}


# -- asyncio: a wait that another task can end is not failed ---------------------------------------------


@pytest.mark.parametrize("mode", ASYNC_MODES)
def test_a_reader_of_a_paused_engine_waits_for_another_task_to_resume_it(mode: str) -> None:
    async def main() -> list[ClientMessage]:
        async with AsyncEngine(ONE, sim_runtimes(ONE, seed=1), loop=mode.split("-")[0],
                               max_idle_rounds=IDLE) as engine:  # fmt: skip
            await engine.control(ControlMethod.PAUSE_SCHEDULER)

            async def resume_later() -> None:
                await asyncio.sleep(0.1)  # many times the idle bound
                await engine.control(ControlMethod.RESUME_SCHEDULER)

            resumer = asyncio.create_task(resume_later())
            messages = [m async for m in engine.generate(Prompt((1, 2)))]
            await resumer
        return messages

    assert _run_async(mode, main)[-1].outcome is Outcome.FINISHED


@pytest.mark.parametrize("mode", ASYNC_MODES)
def test_a_reader_of_a_streaming_session_waits_for_another_task_to_feed_it(mode: str) -> None:
    async def main() -> list[ClientMessage]:
        async with AsyncEngine(ONE, sim_runtimes(ONE, seed=1), loop=mode.split("-")[0],
                               max_idle_rounds=IDLE) as engine:  # fmt: skip
            rid = engine.submit(Prompt(text="t5", streaming=True))

            async def feed_later() -> None:
                await asyncio.sleep(0.1)  # many times the idle bound
                engine.feed(rid, Prompt(text="t6 t7"), last=True)

            feeder = asyncio.create_task(feed_later())
            messages = [m async for m in engine.outputs(rid)]
            await feeder
        return messages

    assert _run_async(mode, main)[-1].outcome is Outcome.FINISHED


@pytest.mark.parametrize("mode", ASYNC_MODES)
def test_a_loop_that_fails_and_cannot_fail_the_engine_still_ends_every_wait_naming_why(mode: str, monkeypatch) -> None:
    def broken(self: Any, *args: Any) -> Any:
        raise RuntimeError("orchestrator bug")

    monkeypatch.setattr(Orchestrator, "report", broken)
    monkeypatch.setattr(Orchestrator, "engine_died", broken)

    async def main() -> tuple[Any, Any, Any]:
        engine = AsyncEngine(ONE, sim_runtimes(ONE, seed=1), loop=mode.split("-")[0], max_idle_rounds=IDLE)
        await engine.start()
        rid = engine.submit(Prompt((1, 2)))
        outcomes = []
        for wait in (engine.outputs(rid), engine.control(ControlMethod.PAUSE_SCHEDULER)):
            try:
                outcomes.append([m async for m in wait] if hasattr(wait, "__aiter__") else await wait)
            except OmniRuntimeError as exc:
                outcomes.append(exc)
        try:
            await engine.shutdown()
        except OmniRuntimeError as exc:
            return outcomes[0], outcomes[1], exc
        return outcomes[0], outcomes[1], None

    read, control, shutdown_error = _run_async(mode, main)
    assert repr(read) == ("EngineNotRunning('the engine shut down before request 0 ended (the orchestrator loop "
                          "failed: RuntimeError: orchestrator bug)')")  # fmt: skip
    assert repr(control) == "EngineNotRunning('the engine is shut down')"
    assert str(shutdown_error).startswith("the orchestrator loop failed: RuntimeError: orchestrator bug; failing the "
                                          "engine failed: RuntimeError: orchestrator bug")  # fmt: skip
