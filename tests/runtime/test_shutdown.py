"""On shutdown every open request gets its terminal, and the orchestrator stops before any runtime."""

from __future__ import annotations

import asyncio

from helpers import assert_drained, demo_pipeline, monitor_for
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_fsm import Outcome
from omni_runtime import AsyncEngine, Engine, Prompt
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes


def _order_ok(history: list[str]) -> None:
    first_runtime = next(i for i, h in enumerate(history) if h.startswith("runtime"))
    assert history.index("orchestrator stopped") < first_runtime


@settings(max_examples=30)
@given(requests=st.integers(0, 8), rounds=st.integers(0, 12), seed=st.integers(0, 1000))
def test_shutdown_ends_every_open_request_then_stops_in_order(requests, rounds, seed):
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)
    engine = Engine(pipeline, sim_runtimes(pipeline, seed, SimConfig.legal(0.1)), on_step=monitor.step)
    rids = [engine.submit(Prompt(), n=1 + (i % 3 == 1), companions=int(i % 3 == 2)) for i in range(requests)]
    for _ in range(rounds):
        engine.host.pump()
    open_before = set(engine.orchestrator.open_requests())
    engine.shutdown()
    for rid in rids:
        messages = list(engine.host.mailboxes.get(rid, ()))
        terminals = [m for m in messages if m.finished]
        assert len(terminals) == 1 and messages[-1].finished
        if rid in open_before:
            assert terminals[0].outcome is Outcome.ABORTED
    _order_ok(engine.host.history)
    assert_drained(engine.orchestrator)
    assert monitor.finish() == [] and monitor.violations == []


def test_async_shutdown_stops_the_loop_before_the_runtimes():
    async def main() -> list[str]:
        pipeline = demo_pipeline()
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, 1))
        await engine.start()
        got: dict[int, list] = {}
        for _ in range(4):
            rid = engine.submit(Prompt(), listener=lambda m: got.setdefault(m.rid, []).append(m))
            got.setdefault(rid, [])
        await asyncio.sleep(0)
        await engine.shutdown()
        assert all(ms and ms[-1].finished for ms in got.values())
        return engine.host.history

    history = asyncio.run(main())
    _order_ok(history)
    assert history.index("orchestrator loop ended") < next(i for i, h in enumerate(history) if h.startswith("runtime"))
