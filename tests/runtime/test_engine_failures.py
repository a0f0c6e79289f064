"""The engines under failure: a bad report, a raising listener or shutdown, a crashed loop, misuse.

Nothing hangs, nothing is kept after a drain, every request gets exactly one terminal, and the
caller hears of it as an ``OmniRuntimeError`` (never a bare exception from inside a loop).
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import assert_drained, demo_pipeline

from omni_fsm import ControlMethod, Outcome, StageKind
from omni_runtime import AsyncEngine, Engine, EngineNotRunning, OmniRuntimeError, Prompt, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes
from omni_runtime.runtimes.sim.ar import SimAR

LOOPS = ["event", "poll"]


class UnknownStatus(SimAR):
    """Reports a scheduler status that is not in the protocol for every request it holds."""

    def step(self):
        for req_id in list(self.requests):
            self._sink(rp.StatusChanged(req_id, 0, "no-such-status"))  # type: ignore[arg-type]
        self.requests.clear()
        return False


async def _consume(engine, prompt):
    return [m async for m in engine.generate(prompt)]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_report_outside_the_protocol_fails_its_request_and_the_loop_goes_on(loop):
    pipeline = simple_pipeline([StageKind.AR], replicas=2)
    runtimes = sim_runtimes(pipeline, seed=1)
    runtimes[0][0] = UnknownStatus(pipeline.stages[0], 0, 0)

    async def main():
        async with AsyncEngine(pipeline, runtimes, loop=loop) as engine:
            results = await asyncio.wait_for(asyncio.gather(*(_consume(engine, Prompt((i,))) for i in range(4))), 10)
            return results, engine

    results, engine = asyncio.run(main())
    outcomes = [ms[-1].outcome for ms in results]
    assert Outcome.FAILED in outcomes and Outcome.FINISHED in outcomes  # one replica broke, the other served
    assert all([m.finished for m in ms].count(True) == 1 for ms in results)
    assert_drained(engine.host.orchestrator)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_listener_that_raises_aborts_only_its_request(loop):
    pipeline = demo_pipeline()

    def broken(message):
        raise ValueError("consumer broke")

    async def main():
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, seed=2), loop=loop)
        await engine.start()
        bad = engine.submit(Prompt((9,)), listener=broken)
        good = await asyncio.wait_for(_consume(engine, Prompt((1,))), 10)
        for _ in range(1000):
            if bad not in engine.host.orchestrator.routes:
                break
            await asyncio.sleep(0.001)
        kept = [(rid, type(exc)) for rid, exc in engine.host.listener_errors]
        with pytest.raises(OmniRuntimeError, match=f"^the listener of request {bad} raised ValueError"):
            await engine.shutdown()  # the error is reported (and logged when it happened), not swallowed
        return bad, good, kept, engine

    bad, good, kept, engine = asyncio.run(main())
    assert good[-1].outcome is Outcome.FINISHED
    assert kept == [(bad, ValueError)] and engine.host.listener_errors == []
    assert_drained(engine.host.orchestrator)


def test_the_sync_engine_raises_a_listener_error_and_aborts_that_request():
    pipeline = demo_pipeline()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=2))
    calls = []

    def broken(message):
        calls.append(message)
        raise ValueError("consumer broke")

    rid = engine.submit(Prompt((9,)), listener=broken)
    with pytest.raises(OmniRuntimeError, match=f"the listener of request {rid} raised ValueError"):
        engine.run_until_idle()
    engine.run_until_idle()
    assert len(calls) == 1 and rid not in engine.orchestrator.routes  # aborted, and not called again
    engine.shutdown()
    assert_drained(engine.host.orchestrator)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_crashed_loop_ends_every_request_and_shutdown_says_why(loop, monkeypatch):
    pipeline = demo_pipeline()

    async def main():
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, seed=3), loop=loop)
        real, calls = engine.host.orchestrator.report, [0]

        def report(stage, replica, r):
            calls[0] += 1
            if calls[0] == 5:
                raise RuntimeError("a bug in the orchestrator")
            return real(stage, replica, r)

        monkeypatch.setattr(engine.host.orchestrator, "report", report)
        await engine.start()
        results = await asyncio.wait_for(asyncio.gather(*(_consume(engine, Prompt((i,))) for i in range(3))), 10)
        with pytest.raises(OmniRuntimeError, match="the orchestrator loop failed: RuntimeError: a bug"):
            await engine.shutdown()
        return results, engine

    results, engine = asyncio.run(main())
    assert all(ms[-1].finished and ms[-1].outcome is Outcome.FATAL for ms in results)
    assert engine.host.runtimes_stopped


def test_an_async_engine_belongs_to_the_event_loop_that_started_it():
    pipeline = demo_pipeline()
    engine = AsyncEngine(pipeline, sim_runtimes(pipeline, seed=4))
    asyncio.run(asyncio.wait_for(_consume(engine, Prompt((1,))), 10))
    with pytest.raises(OmniRuntimeError, match="runs in the event loop that started it"):
        asyncio.run(asyncio.wait_for(_consume(engine, Prompt((2,))), 10))


def test_generate_after_shutdown_is_refused_and_starts_nothing():
    pipeline = demo_pipeline()

    async def main():
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, seed=5))
        await engine.start()
        await engine.shutdown()
        with pytest.raises(EngineNotRunning):
            await _consume(engine, Prompt((1,)))
        return engine

    assert asyncio.run(main())._tasks == []


def test_a_cancelled_control_call_leaves_no_answer_behind():
    pipeline = demo_pipeline()

    async def main():
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, seed=6)) as engine:
            call = asyncio.ensure_future(engine.control(ControlMethod.PAUSE_SCHEDULER))
            await asyncio.sleep(0)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            await engine.control(ControlMethod.RESUME_SCHEDULER)
            for _ in range(200):
                await asyncio.sleep(0.001)
            return engine

    engine = asyncio.run(main())
    assert engine.host.rpc_answers == {} and engine.host.abort_answers == {}


def test_no_physical_abort_is_kept_when_its_replica_dies_under_a_companion():
    pipeline = simple_pipeline([StageKind.AR, StageKind.DIFFUSION], replicas=2)
    engine = Engine(pipeline, sim_runtimes(pipeline, 0, SimConfig(replica_deaths=((0, 0, 2),))))
    messages = engine.generate(companions=1)
    assert [m.finished for m in messages].count(True) == 1
    engine.run_until_idle()
    assert_drained(engine.host.orchestrator)


class ShutdownRaises(SimAR):
    def shutdown(self):
        super().shutdown()
        raise RuntimeError("cannot stop")


def test_every_runtime_is_shut_down_even_after_one_raises():
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR], replicas=1)
    runtimes = sim_runtimes(pipeline, seed=7)
    runtimes[0][0] = ShutdownRaises(pipeline.stages[0], 0, 0)
    engine = Engine(pipeline, runtimes)
    with pytest.raises(OmniRuntimeError, match="shutdown raised in runtime 0/0: RuntimeError: cannot stop"):
        engine.shutdown()
    assert "runtime 1/0 shut down" in engine.host.history
