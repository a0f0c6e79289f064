"""A consumer that cancels its generate() aborts its request; an RPC worker error reaches its caller only."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from helpers import demo_pipeline, monitor_for

from omni_fsm import ControlMethod, Outcome, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_runtime import AsyncEngine, Engine, Prompt, RpcError, simple_pipeline
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes


def _recording_monitor(pipeline, rid=0):
    """Return a monitor, the recorded steps, the hook, and an event set once ``rid``'s terminal was emitted."""
    monitor = monitor_for(pipeline)
    steps: list = []
    ended = asyncio.Event()

    def on_step(event, outputs):
        monitor.step(event, outputs)
        steps.append((event, outputs))
        if any(isinstance(o, ob.Emitted) and o.finished and o.rid == rid for o in outputs):
            ended.set()

    return monitor, steps, on_step, ended


@pytest.mark.parametrize("loop", ["event", "poll"])
@pytest.mark.parametrize("how", ["cancel", "break"])
def test_consumer_that_stops_early_aborts_its_request(loop, how):
    pipeline = demo_pipeline()
    monitor, steps, on_step, ended = _recording_monitor(pipeline)
    before_shutdown: list[int] = []

    async def main() -> None:
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, 5), loop=loop, on_step=on_step)
        await engine.start()
        first = asyncio.Event()

        async def consume() -> None:
            async with contextlib.aclosing(engine.generate(Prompt(max_tokens=8))) as stream:
                async for _ in stream:
                    first.set()
                    if how == "break":
                        break

        task = asyncio.create_task(consume())
        await first.wait()
        if how == "cancel":
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        try:  # the abort alone must end the request: its terminal arrives while the engine still runs
            await asyncio.wait_for(ended.wait(), timeout=10)
        except TimeoutError:
            pytest.fail(f"request 0 got no terminal within 10 s of its consumer stopping ({len(steps)} steps)")
        before_shutdown.append(len(steps))
        assert engine.host.orchestrator.idle()
        await engine.shutdown()

    asyncio.run(main())
    (cut,) = before_shutdown
    observed = [o for _, outs in steps[:cut] for o in outs]
    assert any(isinstance(o, ob.AbortRequested) and o.rid == 0 for o in observed)
    (terminal_step,) = [i for i, (_, outs) in enumerate(steps)
                        if any(isinstance(o, ob.Emitted) and o.finished and o.rid == 0 for o in outs)]  # fmt: skip
    assert terminal_step < cut  # not the shutdown's terminal
    event, outputs = steps[terminal_step]
    assert isinstance(event, (ev.AbortDone, ev.StageFinished)) and event.rid == 0, event  # the abort path
    assert ob.AbortCommitted(0) in outputs  # committed by the abort (a shutdown commits nothing)
    (terminal,) = [o for o in outputs if isinstance(o, ob.Emitted) and o.finished and o.rid == 0]
    assert terminal.outcome is Outcome.ABORTED
    assert not any(isinstance(e, ev.Shutdown) for e, _ in steps[:cut])
    assert monitor.finish() == [] and monitor.violations == []


def test_rpc_worker_error_reaches_its_caller_and_leaves_requests_running():
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)
    engine = Engine(pipeline, sim_runtimes(pipeline, 2, SimConfig(rpc_error=1.0)), on_step=monitor.step)
    rids = [engine.submit(Prompt()) for _ in range(4)]
    engine.host.pump()
    with pytest.raises(RpcError, match="WorkerError") as info:
        engine.control(ControlMethod.SLEEP)
    assert info.value.method == "sleep"
    for rid in rids:
        assert list(engine.outputs(rid))[-1].outcome is Outcome.FINISHED
    engine.shutdown()
    assert monitor.finish() == [] and monitor.violations == []


def test_async_rpc_worker_error_reaches_its_caller():
    pipeline = demo_pipeline()

    async def main() -> list:
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, 2, SimConfig(rpc_error=1.0)))
        await engine.start()
        outputs = []

        async def consume() -> None:
            async for m in engine.generate(Prompt()):
                outputs.append(m)

        task = asyncio.create_task(consume())
        with pytest.raises(RpcError, match="WorkerError"):
            await engine.control(ControlMethod.PAUSE_SCHEDULER)
        await task
        await engine.shutdown()
        return outputs

    outputs = asyncio.run(main())
    assert outputs[-1].finished and outputs[-1].outcome is Outcome.FINISHED


def test_a_request_submitted_while_the_engine_sleeps_fails_saying_why():
    engine = Engine(simple_pipeline([StageKind.AR]))
    engine.control(ControlMethod.SLEEP)
    (message,) = engine.generate(Prompt())
    assert (message.finished, message.outcome) == (True, Outcome.FAILED)
    assert message.error == "the engine is sleeping (wake it up first)"
    engine.control(ControlMethod.WAKE_UP)  # awake, the scheduler still paused
    engine.control(ControlMethod.RESUME_SCHEDULER)
    assert engine.generate(Prompt())[-1].outcome is Outcome.FINISHED
