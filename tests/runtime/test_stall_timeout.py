"""A replica that says it is busy, holds requests and reports nothing for ``stall_timeout_s`` is lost: its requests
fail naming the stall, everything else runs on. On by default; the engine paused or asleep is not silence."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from omni_fsm import ControlMethod, Outcome, StageKind, StopKind
from omni_runtime import AsyncEngine, ConfigError, Engine, Prompt, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.engines.host import STALL_TIMEOUT_S
from omni_runtime.hosting.process import process_runtimes

STALL = 0.3  #: the bound every case runs under, in seconds
ONE = simple_pipeline([StageKind.AR], replicas=1, max_running=4, max_tokens=4)
TWO = simple_pipeline([StageKind.AR], replicas=2, max_running=4, max_tokens=4)
LOST = f"replica 0/0 is lost: it stalled: busy but no report for {STALL:g} s (stall_timeout_s)"


class Runtime:
    """Runs each request one token per step to ``tokens``; ``stalls``: once given a request, it says it is busy for
    ever and reports nothing; while paused it says it is busy and reports nothing (the worst case, not a stall)."""

    def __init__(self, stalls: bool = False, tokens: int = 3) -> None:
        self.stalls, self.tokens, self.sink = stalls, tokens, None
        self.held: dict[int, int] = {}
        self.paused = False

    def bind(self, sink: rp.ReportSink) -> None:
        self.sink = sink

    def add_request(self, req_id: int, stage_input: Any) -> None:
        self.held[req_id] = 0

    def abort_requests(self, abort_id: int, req_ids: Any) -> None:
        for req_id in req_ids:
            self.held.pop(req_id, None)
            self.sink(rp.AbortResult(abort_id, req_id, True))

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        self.paused = {ControlMethod.PAUSE_SCHEDULER: True, ControlMethod.RESUME_SCHEDULER: False}.get(method,
                                                                                                     self.paused)
        self.sink(rp.RpcResult(call_id, True))

    def step(self) -> bool:
        if self.stalls or self.paused:
            return bool(self.held)
        for req_id in list(self.held):
            seq = self.held[req_id]
            if seq == 0:
                self.sink(rp.StatusChanged(req_id, 0, rp.Status.SCHEDULED))
                seq = 1
            self.sink(rp.Output(req_id, seq, 1, (7,)))
            self.held[req_id] = seq + 1
            if seq == self.tokens:
                self.sink(rp.Finished(req_id, seq + 1, StopKind.LENGTH))
                del self.held[req_id]
        return bool(self.held)

    def shutdown(self) -> None:
        self.held.clear()


def _timed(body: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = body()
    return result, time.monotonic() - started


def _lost(messages: list[Any], outcome: Outcome = Outcome.FATAL) -> None:
    terminal = messages[-1]
    assert terminal.finished and terminal.outcome is outcome and terminal.error == LOST, terminal


def test_the_stall_bound_is_on_by_default_and_checked() -> None:
    assert Engine(ONE).host.stall.stall_timeout_s == STALL_TIMEOUT_S == 300.0
    assert AsyncEngine(ONE).host.stall.stall_timeout_s == 300.0
    with pytest.raises(ConfigError, match="stall_timeout_s is a number of seconds > 0 or None, not 0"):
        Engine(ONE, stall_timeout_s=0)


def test_a_busy_silent_runtime_ends_a_sync_wait_within_the_bound() -> None:
    engine = Engine(ONE, [[Runtime(stalls=True)]], stall_timeout_s=STALL)
    messages, took = _timed(lambda: engine.generate(Prompt((1,))))
    _lost(messages)  # the stage's only replica: the engine dies with it, as with any lost replica
    assert STALL <= took < STALL + 1.0
    engine.shutdown()


def test_a_stalled_replica_fails_only_its_requests_the_other_replica_runs_on() -> None:
    engine = Engine(TWO, [[Runtime(stalls=True), Runtime()]], stall_timeout_s=STALL)
    results, took = _timed(lambda: engine.generate([Prompt((1,)), Prompt((2,)), Prompt((3,))]))
    assert [r.outcome for r in results] == [Outcome.FAILED, Outcome.FINISHED, Outcome.FAILED]
    assert results[0].error == LOST and took < STALL + 1.0
    assert engine.generate(Prompt((4,)))[-1].outcome is Outcome.FINISHED  # the engine runs on
    engine.shutdown()


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_a_busy_silent_runtime_ends_an_async_wait_within_the_bound(loop: str) -> None:
    async def main() -> list[Any]:
        async with AsyncEngine(ONE, [[Runtime(stalls=True)]], loop=loop, stall_timeout_s=STALL) as engine:
            return [m async for m in engine.generate(Prompt((1,)))]

    messages, took = _timed(lambda: asyncio.run(asyncio.wait_for(main(), 10)))
    _lost(messages)
    assert STALL <= took < STALL + 1.0


def test_a_busy_silent_runtime_in_a_child_process_ends_the_wait_within_the_bound() -> None:
    runtimes = process_runtimes(ONE, "tests.runtimes.process_factories:busy_and_silent")
    engine = Engine(ONE, runtimes, stall_timeout_s=STALL)
    try:
        messages, took = _timed(lambda: engine.generate(Prompt((1,))))
    finally:
        engine.shutdown()
    _lost(messages)
    assert took < STALL + 1.0


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_a_replica_paused_by_the_client_longer_than_the_bound_is_not_stalled(loop: str) -> None:
    async def main() -> list[Any]:
        async with AsyncEngine(ONE, [[Runtime(tokens=3)]], loop=loop, stall_timeout_s=STALL) as engine:
            stream = engine.generate(Prompt((1,)))
            first = [await anext(stream)]
            await engine.control(ControlMethod.PAUSE_SCHEDULER)
            await asyncio.sleep(2 * STALL)  # busy, silent and stepped all along: paused, not stalled
            await engine.control(ControlMethod.RESUME_SCHEDULER)
            return first + [m async for m in stream]

    messages = asyncio.run(asyncio.wait_for(main(), 10))
    assert messages[-1].outcome is Outcome.FINISHED, messages[-1]


def test_the_time_between_two_sync_waits_is_not_silence() -> None:
    slow = Runtime(tokens=2)
    engine = Engine(TWO, [[slow, Runtime(tokens=12)]], stall_timeout_s=STALL)
    slow_one, chatty = (engine.submit(Prompt((i,))) for i in range(2))
    slow.paused = True  # busy and silent, but stepped only while the client waits for the other request
    messages = []
    for message in engine.outputs(chatty):
        messages.append(message)
        time.sleep(STALL / 4)  # the client's own time: no runtime is stepped
    assert messages[-1].outcome is Outcome.FINISHED
    slow.paused = False
    assert list(engine.outputs(slow_one))[-1].outcome is Outcome.FINISHED
    engine.shutdown()
