"""The demo's workload: random requests, aborts, cancellations and control RPCs on a pipeline.

Every lifecycle step is judged by ``omni_fsm.invariants.Monitor`` and written to a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable

import attrs

from omni_fsm import ControlMethod
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import CHECKS, Monitor
from omni_fsm.trace import TraceWriter
from omni_runtime.adapters import Prompt
from omni_runtime.driver import AsyncEngine
from omni_runtime.errors import RpcError
from omni_runtime.pipeline import Pipeline
from omni_runtime.sim import SimConfig, sim_runtimes


@attrs.frozen
class WorkloadOptions:
    requests: int = 300
    concurrency: int = 32
    abort_rate: float = 0.2
    fault_rate: float = 0.05
    parallel_rate: float = 0.15
    companion_rate: float = 0.15
    replica_deaths: int = 1
    seed: int = 0
    loop: str = "event"


@attrs.define
class DemoReport:
    pipeline: str
    requests: int
    seconds: float = 0.0
    outcomes: dict[str, int] = attrs.field(factory=dict)
    stages: dict[str, dict[str, int]] = attrs.field(factory=dict)
    dropped: dict[str, int] = attrs.field(factory=dict)
    faults: dict[str, int] = attrs.field(factory=dict)
    held: dict[str, int] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)
    steps: int = 0
    checks: int = len(CHECKS)


class _Tally:
    """Counts what the lifecycle did, from its steps."""

    def __init__(self, stages: int) -> None:
        self.outcomes: Counter[str] = Counter()
        self.dispatched = [0] * stages
        self.outputs = [0] * stages
        self.finished = [0] * stages

    def step(self, event: ev.Event | None, outputs: list[ob.Observation]) -> None:
        if isinstance(event, ev.StageOutput):
            self.outputs[event.stage] += 1
        elif isinstance(event, ev.StageFinished):
            self.finished[event.stage] += 1
        for o in outputs:
            if isinstance(o, ob.Dispatched):
                self.dispatched[o.stage] += 1
            elif isinstance(o, ob.Emitted) and o.finished:
                self.outcomes[f"{o.outcome.value if o.outcome else None}/{o.reason}"] += 1


def sim_config(pipeline: Pipeline, options: WorkloadOptions) -> SimConfig:
    """Return the simulator's faults for the demo: every fault at the rate, a few replica deaths."""
    deaths = [(s, spec.replicas - 1, 30 + 25 * s) for s, spec in enumerate(pipeline.stages) if spec.replicas > 1]
    return attrs.evolve(SimConfig.faulty(options.fault_rate), replica_deaths=tuple(deaths[: options.replica_deaths]))


async def run_demo(pipeline: Pipeline, options: WorkloadOptions, trace_path: str,
                   progress: Callable[[int], None] | None = None) -> DemoReport:  # fmt: skip
    """Run the workload on the simulator; return the summary (the trace is written to ``trace_path``)."""
    started = time.perf_counter()
    monitor = Monitor(pipeline.kinds, pipeline.final, pipeline.slots)
    tally = _Tally(len(pipeline.stages))
    rng = random.Random(options.seed)
    config = sim_config(pipeline, options)
    report = DemoReport(pipeline.name, options.requests)
    with TraceWriter(trace_path) as writer:
        writer.header(pipeline.kinds, pipeline.final, pipeline.slots)

        def on_step(event: ev.Event | None, outputs: list[ob.Observation]) -> None:
            monitor.step(event, outputs)
            writer.step(event, outputs)
            tally.step(event, outputs)

        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, options.seed, config), loop=options.loop,
                             on_step=on_step)  # fmt: skip
        faults: Counter[str] = Counter()
        await engine.start()
        done = 0
        gate = asyncio.Semaphore(options.concurrency)

        async def client(i: int) -> None:
            nonlocal done
            roll = rng.random()
            n = 2 if roll < options.parallel_rate else 1
            companions = 1 if n == 1 and roll < options.parallel_rate + options.companion_rate else 0
            abort_mode = rng.choice(("cancel", "abort")) if rng.random() < options.abort_rate else ""
            abort_at = rng.randint(0, 6)
            prompt = Prompt(tuple(rng.randrange(1000) for _ in range(rng.randint(1, 6))))
            async with gate:
                await _consume(engine, prompt, n, companions, abort_mode, abort_at, faults)
            done += 1
            if progress is not None:
                progress(done)

        tasks = [asyncio.create_task(client(i)) for i in range(options.requests)]
        tasks.append(asyncio.create_task(_control_plane(engine, rng, faults)))
        await asyncio.gather(*tasks)
        await engine.shutdown()
        writer.end()
    monitor.finish()
    orch = engine.host.orchestrator
    report.seconds = time.perf_counter() - started
    report.outcomes = dict(sorted(tally.outcomes.items()))
    for s, spec in enumerate(pipeline.stages):
        report.stages[spec.name] = {"dispatched": tally.dispatched[s], "outputs": tally.outputs[s],
                                    "finished": tally.finished[s]}  # fmt: skip
    report.dropped = orch.counters()
    report.faults = dict(sorted(faults.items())) | {"replicas_lost": sum(not up for st in orch.live for up in st)}
    report.held = orch.held_state()
    report.violations = [str(v) for v in monitor.violations]
    report.steps = monitor.steps
    return report


async def _consume(engine: AsyncEngine, prompt: Prompt, n: int, companions: int, abort_mode: str, abort_at: int,
                   faults: Counter[str]) -> None:  # fmt: skip
    count = 0
    async with contextlib.aclosing(engine.generate(prompt, n, companions)) as stream:
        async for message in stream:
            count += 1
            if count == abort_at and abort_mode == "cancel":
                faults["consumer_cancelled"] += 1
                break  # closing the stream aborts the request
            if count == abort_at and abort_mode == "abort" and not message.finished:
                ok = await engine.abort(message.rid)
                faults["aborts_ok" if ok else "aborts_failed_physically"] += 1


async def _control_plane(engine: AsyncEngine, rng: random.Random, faults: Counter[str]) -> None:
    """Pause and resume the scheduler a few times while requests run; a worker may raise."""
    for _ in range(3):
        for _ in range(rng.randint(5, 20)):
            await asyncio.sleep(0)
        try:
            await engine.control(ControlMethod.PAUSE_SCHEDULER)
        except RpcError:
            faults["rpc_errors"] += 1
        for _ in range(20):  # resume until it succeeds: a paused engine admits nothing
            try:
                await engine.control(ControlMethod.RESUME_SCHEDULER)
                break
            except RpcError:
                faults["rpc_errors"] += 1
