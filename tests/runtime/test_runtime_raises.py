"""A runtime that raises (instead of reporting) never leaves a request hanging or state behind.

A runtime is outside code: the host catches what it raises and the orchestrator answers as the
missing report would have (``Orchestrator.runtime_raised``); a ``step`` that raises loses that
replica (``ReplicaDied``). Every request still gets exactly one terminal and nothing is kept.
"""

from __future__ import annotations

import asyncio

import pytest
from faulty_runtimes import Raising
from helpers import assert_drained, demo_pipeline, monitor_for, monitored_engine

from omni_fsm import ControlMethod, Outcome
from omni_runtime import AsyncEngine, Engine, Prompt, RpcError
from omni_runtime.runtimes.sim import sim_runtimes


def engine_with(stage: int, replica: int, **calls: int):
    pipeline = demo_pipeline()
    runtimes = sim_runtimes(pipeline, seed=1)
    runtimes[stage][replica] = Raising.around(runtimes[stage][replica], **calls)
    return monitored_engine(pipeline, runtimes)


def drained(engine: Engine, monitor) -> None:
    engine.run_until_idle()
    engine.shutdown()
    assert monitor.finish() == [] and monitor.violations == []
    assert_drained(engine.orchestrator)


def test_a_dispatch_the_runtime_cannot_take_fails_only_that_request():
    engine, monitor = engine_with(0, 0, add_request=1)
    first, second = engine.generate(Prompt((1, 2))), engine.generate(Prompt((3, 4)))
    assert first[-1].outcome is Outcome.FAILED and "add_request broke" in (first[-1].error or "")
    assert second[-1].outcome is Outcome.FINISHED
    drained(engine, monitor)


def test_a_physical_abort_that_raises_is_answered_as_failed_and_the_request_runs_on():
    engine, monitor = engine_with(1, 0, abort_requests=1)  # the first request streams from stage 1, replica 0
    rid = engine.submit(Prompt((1, 2)))
    messages = engine.outputs(rid)
    first = next(messages)
    assert not first.finished
    assert engine.abort(rid) is False  # the runtime never confirmed the request gone
    rest = [first, *messages]
    assert [m.finished for m in rest].count(True) == 1 and rest[-1].outcome is not Outcome.ABORTED
    drained(engine, monitor)


def test_a_control_rpc_that_raises_in_the_runtime_reaches_its_caller():
    engine, monitor = engine_with(1, 0, control=1)
    with pytest.raises(RpcError, match="control broke"):
        engine.control(ControlMethod.PAUSE_SCHEDULER)
    assert engine.generate(Prompt((5,)))[-1].finished
    drained(engine, monitor)


def test_a_step_that_raises_loses_the_replica_and_fails_its_requests():
    engine, monitor = engine_with(0, 0, step=1)
    rids = [engine.submit(Prompt((i,))) for i in range(4)]
    ends = {rid: list(engine.outputs(rid))[-1] for rid in rids}
    assert all(m.finished for m in ends.values())
    assert {m.outcome for m in ends.values()} >= {Outcome.FAILED}  # those bound to the lost replica
    assert not engine.host.orchestrator.live[0][0]
    assert engine.generate(Prompt((9,)))[-1].outcome is Outcome.FINISHED  # the other replica serves on
    drained(engine, monitor)


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_both_loops_survive_a_step_that_raises(loop):
    pipeline = demo_pipeline()
    runtimes = sim_runtimes(pipeline, seed=1)
    runtimes[1][0] = Raising.around(runtimes[1][0], step=1)
    monitor = monitor_for(pipeline)

    async def main():
        async with AsyncEngine(pipeline, runtimes, loop=loop, on_step=monitor.step) as engine:
            return [[m async for m in engine.generate(Prompt((i,)))] for i in range(3)]

    results = asyncio.run(asyncio.wait_for(main(), 20))
    assert all(ms[-1].finished and [m.finished for m in ms].count(True) == 1 for ms in results)
    assert monitor.finish() == [] and monitor.violations == []
