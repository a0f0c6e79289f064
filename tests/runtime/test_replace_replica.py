"""A lost replica is replaced while the engine runs: ``Engine.replace_replica`` / ``AsyncEngine.replace_replica``.

The requests bound to the lost replica end with it (failed, once each); the new runtime takes its place, new requests
are bound to it and finish, the lost one is shut down and whatever it still reports goes nowhere; every step is
judged by the monitor. A live replica, a position the pipeline lacks, an object that is no runtime, a dead or shut
down engine are refused and change nothing.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import assert_drained, monitor_for, verdict

from omni_fsm import Outcome, StageKind
from omni_fsm import observations as ob
from omni_runtime import (
    AsyncEngine,
    ConfigError,
    Engine,
    EngineNotRunning,
    Prompt,
    RequestRefused,
    simple_pipeline,
)
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import SimConfig, sim_replica, sim_runtimes

pytestmark = pytest.mark.covers("ORCH-INV-206")

TALKER = 1
DIES = SimConfig(replica_deaths=((TALKER, 0, 2),))  #: the talker's replica 0 dies at its step 2


def pipeline_and_runtimes(config: SimConfig = DIES):
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR], replicas=2)
    return pipeline, sim_runtimes(pipeline, 3, config)


class Judged:
    """The monitor's step hook, also keeping which replica each request was dispatched to, per stage."""

    def __init__(self, pipeline):
        self.monitor = monitor_for(pipeline)
        self.bound: dict[tuple[int, int], int] = {}  #: (request, stage) -> replica

    def step(self, event, outputs):
        self.monitor.step(event, outputs)
        for o in outputs:
            if isinstance(o, ob.Dispatched):
                self.bound[(o.rid, o.stage)] = o.replica


def ends(engine, rids):
    return {rid: [m for m in engine.outputs(rid) if m.finished] for rid in rids}


def test_a_replacement_takes_the_lost_replicas_place_and_serves_new_requests():
    pipeline, runtimes = pipeline_and_runtimes()
    judged = Judged(pipeline)
    engine = Engine(pipeline, runtimes, on_step=judged.step)
    first = [engine.submit(Prompt((1, i))) for i in range(6)]
    done = ends(engine, first)
    engine.run_until_idle()
    assert all(len(terminal) == 1 for terminal in done.values())
    failed = {rid for rid, (t,) in done.items() if t.outcome is Outcome.FAILED}
    assert failed and failed == {rid for rid in first if judged.bound.get((rid, TALKER)) == 0}
    assert engine.orchestrator.live[TALKER] == [False, True]

    lost = runtimes[TALKER][0]
    lost_sink = lost._sink
    replacement = sim_replica(pipeline.stages[TALKER], TALKER, 0, seed=4)
    engine.replace_replica(TALKER, 0, replacement)
    assert engine.orchestrator.live[TALKER] == [True, True]
    assert engine.host.runtimes[TALKER][0] is replacement and lost.closed
    assert "runtime 1/0 replaced" in engine.host.history
    lost_sink(rp.Finished(first[0], (7,)))  # a late report of the lost runtime: nobody takes it
    assert not engine.host.buffers[TALKER][0]  # not in the buffer the orchestrator reads for that replica now

    second = [engine.submit(Prompt((2, i))) for i in range(6)]
    done = ends(engine, second)
    engine.run_until_idle()
    assert all([t.outcome for t in terminal] == [Outcome.FINISHED] for terminal in done.values()), done
    assert {judged.bound[(rid, TALKER)] for rid in second} == {0, 1}  # the replacement got work, and finished it
    engine.shutdown()
    assert replacement.closed
    assert verdict(judged.monitor) == []
    assert_drained(engine.orchestrator)


def test_a_replacement_is_refused_for_a_live_replica_a_missing_position_or_no_runtime():
    pipeline, runtimes = pipeline_and_runtimes(SimConfig())
    engine = Engine(pipeline, runtimes)
    fresh = sim_replica(pipeline.stages[TALKER], TALKER, 0)
    with pytest.raises(RequestRefused, match=r"replica 1/0 is live: only a lost replica is replaced"):
        engine.replace_replica(TALKER, 0, fresh)
    with pytest.raises(ConfigError, match=r"has no replica 1/2"):
        engine.replace_replica(TALKER, 2, fresh)
    with pytest.raises(ConfigError, match=r"replace\(1, 0, runtime\): runtime is a str, not a StageRuntime"):
        engine.replace_replica(TALKER, 0, "sim")  # type: ignore[arg-type]
    assert engine.host.runtimes[TALKER][0] is runtimes[TALKER][0] and fresh._sink is None
    assert engine.generate(Prompt((1, 2)))[-1].outcome is Outcome.FINISHED
    engine.shutdown()
    with pytest.raises(EngineNotRunning, match="shut down"):
        engine.replace_replica(TALKER, 0, fresh)


def test_a_replacement_whose_bind_raises_leaves_the_replica_lost():
    class BindRaises(type(sim_replica(simple_pipeline([StageKind.AR]).stages[0], 0, 0))):
        def bind(self, sink):
            raise RuntimeError("no device")

    pipeline, runtimes = pipeline_and_runtimes()
    engine = Engine(pipeline, runtimes)
    engine.generate(Prompt((1, 2)))
    engine.run_until_idle()
    assert engine.orchestrator.live[TALKER] == [False, True]
    with pytest.raises(RuntimeError, match="no device"):
        engine.replace_replica(TALKER, 0, BindRaises(pipeline.stages[TALKER], TALKER, 0))
    assert engine.orchestrator.live[TALKER] == [False, True] and engine.host.runtimes[TALKER][0] is runtimes[TALKER][0]
    assert engine.generate(Prompt((1, 3)))[-1].outcome is Outcome.FINISHED  # the other replica serves
    engine.shutdown()


def test_a_dead_engine_gets_no_replacement():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    engine = Engine(pipeline, sim_runtimes(pipeline, 0, SimConfig(replica_deaths=((0, 0, 1),))))
    assert engine.generate(Prompt((1, 2)))[-1].outcome is Outcome.FATAL  # its only replica: the engine died
    with pytest.raises(EngineNotRunning):
        engine.replace_replica(0, 0, sim_replica(pipeline.stages[0], 0, 0))


def test_the_async_engine_steps_a_replacement_in_the_lost_replicas_loop():
    pipeline, runtimes = pipeline_and_runtimes()
    judged = Judged(pipeline)

    async def main():
        async with AsyncEngine(pipeline, runtimes, on_step=judged.step) as engine:
            first = await engine.generate([Prompt((1, i)) for i in range(6)])
            assert Outcome.FAILED in {r.outcome for r in first}
            while engine.host.orchestrator.live[TALKER][0]:
                await asyncio.sleep(0.001)
            engine.replace_replica(TALKER, 0, sim_replica(pipeline.stages[TALKER], TALKER, 0, seed=5))
            second = await engine.generate([Prompt((2, i)) for i in range(6)])
            return second

    second = asyncio.run(main())
    assert [r.outcome for r in second] == [Outcome.FINISHED] * 6
    assert {judged.bound[(r.rid, TALKER)] for r in second} == {0, 1}
    assert verdict(judged.monitor) == []
