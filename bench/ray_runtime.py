"""Benchmark the Ray runtime against stage processes: the same workload, the same simulator, two transports.

The pipeline: ``examples/ray_pipeline.toml`` (thinker -> talker, AR, the talker of two replicas), every replica the
simulator (``omni_runtime.runtimes.ray._inner:sim``) whose busy steps take ``--step-ms`` more (a forward pass;
0: the simulator's own cost only, which measures the transports alone). The workload: ``--requests`` prompts
submitted at once through the asyncio driver (``AsyncEngine``, the event-driven loop, as ``omni-run`` runs).

- process: each replica in a ``ProcessRuntime`` (a child process; one command and one reply per protocol call,
  a step included).
- ray: each replica in a ``RayRuntime`` (a Ray actor stepping its runtime itself, reports collected in batches),
  placed by the stages' ``[stages.placement]`` on a local cluster of two nodes (``ray.cluster_utils.Cluster``).

Both sets of runtimes are started once; the rounds alternate process and ray on the same machine, and each figure
is the median over the rounds. A token is one the talker (the last stage) generated; every request must finish.

Last line: ``ray_runtime: process_tok_s=... ray_tok_s=... ratio=...`` (ratio: ray over process).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from omni_fsm import Outcome
from omni_runtime import AsyncEngine, Prompt, load_pipeline
from omni_runtime.runtimes.process import ProcessRuntime
from omni_runtime.runtimes.ray import RayRuntime
from omni_runtime.runtimes.ray.local import nodes_for, start_cluster, stop_cluster

PIPELINE = Path(__file__).resolve().parents[1] / "examples" / "ray_pipeline.toml"
SIM = "omni_runtime.runtimes.ray._inner:sim"


async def _one(engine: AsyncEngine, i: int) -> tuple[Outcome | None, int]:
    last = None
    async for message in engine.generate(Prompt((i % 97, 3, 5))):
        last = message
    assert last is not None
    return last.outcome, last.cumulative


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=1.0, help="extra time of each busy simulator step (ms)")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="RayRuntime's wait_s, in ms")
    args = parser.parse_args()
    pipeline = load_pipeline(PIPELINE)
    step_s = args.step_ms / 1000
    cluster = start_cluster(nodes_for(pipeline, 2))
    figures: dict[str, list[float]] = {"process": [], "ray": []}
    try:
        for _ in range(args.rounds):
            for name in ("process", "ray"):
                runtimes = _runtimes(name, pipeline, step_s, args.wait_ms / 1000)
                seconds, tokens = asyncio.run(_timed(pipeline, runtimes, args.requests))
                figures[name].append(tokens / seconds)
                print(f"{name}: {tokens} tokens in {seconds:.3f} s = {tokens / seconds:,.0f} tok/s", flush=True)
    finally:
        stop_cluster(cluster)
    process, ray_ = statistics.median(figures["process"]), statistics.median(figures["ray"])
    print(f"pipeline {pipeline.name} (simulator, {args.step_ms:g} ms a busy step), {args.requests} requests, "
          f"wait_s={args.wait_ms:g} ms, medians of {args.rounds} rounds")  # fmt: skip
    print(f"ray_runtime: process_tok_s={process:.0f} ray_tok_s={ray_:.0f} ratio={ray_ / process:.2f}")


def _runtimes(name: str, pipeline: Any, step_s: float, wait_s: float) -> list[list[Any]]:
    if name == "process":
        return [[ProcessRuntime(SIM, spec, stage, replica, False, 0, step_s) for replica in range(spec.replicas)]
                for stage, spec in enumerate(pipeline.stages)]  # fmt: skip
    return [[RayRuntime(spec, stage, replica, False, 0, step_s, wait_s=wait_s) for replica in range(spec.replicas)]
            for stage, spec in enumerate(pipeline.stages)]  # fmt: skip


async def _timed(pipeline: Any, runtimes: list[list[Any]], requests: int) -> tuple[float, int]:
    """Start an engine on ``runtimes`` (their start not timed: ``bind`` waits for them), run the round, shut down."""
    engine = AsyncEngine(pipeline, runtimes)
    await engine.start()
    try:
        started = time.perf_counter()
        results = await asyncio.gather(*(_one(engine, i) for i in range(requests)))
        seconds = time.perf_counter() - started
    finally:
        await engine.shutdown()
    assert all(outcome is Outcome.FINISHED for outcome, _ in results), [o for o, _ in results]
    return seconds, sum(tokens for _, tokens in results)


if __name__ == "__main__":
    main()
