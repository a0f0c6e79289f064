"""Workload helpers shared by the runtime tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from omni_fsm import Outcome, StageKind
from omni_fsm.invariants import Monitor
from omni_runtime import AsyncEngine, ClientMessage, Engine, Orchestrator, Pipeline, Prompt, simple_pipeline
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes


def demo_pipeline(replicas: int = 2) -> Pipeline:
    """Return AR -> AR (final) -> diffusion, like examples/pipeline.toml."""
    return simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION], final=[False, True, True],
                           replicas=replicas, max_running=3)  # fmt: skip


def monitor_for(pipeline: Pipeline) -> Monitor:
    """Return a monitor for ``pipeline`` (pass ``monitor.step`` as ``on_step``)."""
    return Monitor(pipeline.kinds, pipeline.final, pipeline.slots)


def monitored_engine(pipeline: Pipeline, runtimes) -> tuple[Engine, Monitor]:
    """Return a sync engine over ``runtimes`` and the monitor that judges every step it takes."""
    monitor = monitor_for(pipeline)
    return Engine(pipeline, runtimes, on_step=monitor.step), monitor


def verdict(monitor: Monitor) -> list[tuple[str, str, int | None]]:
    """Return every violation the monitor found, the end-of-history rules included."""
    monitor.finish()
    return [(v.invariant, v.check, v.rid) for v in monitor.violations]


def assert_drained(orchestrator: Orchestrator) -> None:
    """Nothing is held: every count in ``orchestrator.held_state()`` is zero."""
    held = orchestrator.held_state()
    assert held == dict.fromkeys(held, 0), held


def run_sync(pipeline: Pipeline, specs: Sequence[tuple[int, int, int]], seed: int, config: SimConfig,
             on_step=None) -> dict[int, list[ClientMessage]]:  # fmt: skip
    """Submit ``(n, companions, abort_at)`` requests, consume them (aborting at message ``abort_at``)."""
    engine = Engine(pipeline, sim_runtimes(pipeline, seed, config), on_step=on_step)
    rids = [(engine.submit(Prompt((1, 2, seed % 7)), n, c), abort_at) for n, c, abort_at in specs]
    seen: dict[int, list[ClientMessage]] = {}
    for rid, abort_at in rids:
        seen[rid] = []
        for message in engine.outputs(rid):
            seen[rid].append(message)
            if len(seen[rid]) == abort_at and not message.finished:
                engine.abort(rid)
    engine.run_until_idle()
    engine.shutdown()
    assert_drained(engine.orchestrator)
    return seen


def run_loop(loop: str, specs, seed: int, engine_class=AsyncEngine):
    """Run the workload on ``loop``; return the client messages per request and the observed history."""
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)
    history: list = []

    def on_step(event, observations) -> None:
        history.append((event, list(observations)))
        monitor.step(event, observations)

    async def main() -> dict[int, list]:
        engine = engine_class(pipeline, sim_runtimes(pipeline, seed, SimConfig.legal(0.2)), loop=loop,
                              on_step=on_step)  # fmt: skip
        await engine.start()
        seen: dict[int, list] = {}
        done = asyncio.Event()

        def listener_for(abort_at: int):
            def listener(message) -> None:
                seen[message.rid].append(message)
                if len(seen[message.rid]) == abort_at and not message.finished:
                    engine.abort_nowait(message.rid)  # keyed to the k-th output, synchronously
                if all(ms and ms[-1].finished for ms in seen.values()) and len(seen) == len(specs):
                    done.set()

            return listener

        for i, (n, companions, abort_at) in enumerate(specs):
            rid = engine.host.orchestrator.next_rid
            seen[rid] = []
            engine.submit(Prompt((i, 1, 2)), n, companions, listener_for(abort_at))
        await asyncio.wait_for(done.wait(), 10)
        await engine.shutdown()
        return seen

    seen = asyncio.run(main())
    assert monitor.finish() == [] and monitor.violations == []
    return seen, history


def assert_stage_ordered(messages: Sequence[ClientMessage]) -> None:
    """Exactly one terminal, last; each stream (the request's, each sample's) in stage order."""
    assert [m.finished for m in messages].count(True) == 1
    assert messages[-1].finished and messages[-1].reason is not None
    last: dict[int, int] = {}
    for m in messages:
        assert m.stage >= last.get(m.sample, -1), messages
        last[m.sample] = m.stage
    if messages[-1].outcome is Outcome.FINISHED and messages[-1].reason != "length":
        assert messages[-1].stage == max(m.stage for m in messages)


class WatchedDriver:
    """A host's driver that first calls ``on_answer`` with every abort and RPC answer the host hands it."""

    def __init__(self, driver: Any, on_answer: Any) -> None:
        self.driver, self.on_answer = driver, on_answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)

    def answered(self, answer: Any) -> None:
        self.on_answer(answer)
        self.driver.answered(answer)


def record_answers(host: Any) -> list[Any]:
    """Return the list that every answer ``host`` gives its driver from now on is appended to, before the driver
    gets it."""
    answers: list[Any] = []
    host.driver = WatchedDriver(host.driver, answers.append)
    return answers
