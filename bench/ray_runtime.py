"""Benchmark the Ray runtime against stage processes: the same workload, the same stage runtimes, two transports.

The pipeline: ``examples/ray_pipeline.toml`` (thinker -> talker, AR, the talker of two replicas). What each replica
runs (``--runtime``, default ``vllm`` where vLLM is installed, else ``sim``, and the output says which):

- ``vllm``: a real vLLM engine over the tiny local Llama (``omni_runtime.runtimes.vllm:engine_factory``, built once
  into the user's cache), greedy; the thinker's tokens are the talker's prompt.
- ``sim``: the simulator (the registry's ``sim``, its ``step_s`` option) whose busy steps take ``--step-ms`` more (a
  forward pass; 0: the simulator's own cost only, which measures the transports alone).

The transports:

- process: each replica in a ``ProcessRuntime`` (a child process; one command and one reply per protocol call,
  a step included).
- ray: each replica in a ``RayRuntime`` (a Ray actor stepping its runtime itself, reports collected in batches),
  placed by the stages' ``[stages.placement]`` on a local cluster of two nodes (``ray.cluster_utils.Cluster``).

Both engines (``AsyncEngine``, the event-driven loop, as ``omni-run`` runs) are started once, their runtimes built
before any clock starts; then the rounds alternate process and ray in one event loop, each round ``--requests``
prompts submitted at once. Each figure is the median over the rounds. A token is one the talker (the last stage)
generated; every request must finish. Each round also counts the requests whose messages were the same on both
transports (the simulator: all; vLLM: greedy decoding on CPU is not batch-invariant, and the transports batch the
requests differently, so on the tiny random model, whose top logits lie close, many differ: 17-21 of 128 matched in
the run docs/scale-out.md quotes).

Last line: ``ray_runtime: process_tok_s=... ray_tok_s=... ratio=...`` (ratio: ray over process).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import time
from pathlib import Path
from typing import Any

from omni_fsm import Outcome
from omni_runtime import AsyncEngine, Prompt, load_pipeline
from omni_runtime.core.pipeline import Pipeline
from omni_runtime.hosting.process import ProcessRuntime
from omni_runtime.hosting.ray import RayRuntime
from omni_runtime.hosting.ray.local import nodes_for, start_cluster, stop_cluster

PIPELINE = Path(__file__).resolve().parents[1] / "examples" / "ray_pipeline.toml"
VLLM = "omni_runtime.runtimes.vllm:engine_factory"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("vllm", "sim"), default=None,
                        help="what each replica runs (default: vllm where installed, else sim)")  # fmt: skip
    parser.add_argument("--requests", type=int, default=None, help="prompts per round (default: vllm 128, sim 300)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=1.0, help="sim: extra time of each busy step (ms)")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="RayRuntime's wait_s, in ms")
    args = parser.parse_args()
    runtime = args.runtime or ("vllm" if importlib.util.find_spec("vllm") is not None else "sim")
    requests = args.requests or (128 if runtime == "vllm" else 300)
    pipeline = load_pipeline(PIPELINE)
    made = _Made(runtime, pipeline, args.step_ms / 1000, args.wait_ms / 1000)
    if runtime == "vllm":
        print(f"runtime: vllm (a real engine per replica over {made.model})")
    else:
        print(f"runtime: sim ({args.step_ms:g} ms a busy step)" + (
            "" if importlib.util.find_spec("vllm") is None else "; --runtime vllm for real engines"))  # fmt: skip
    cluster = start_cluster(nodes_for(pipeline, 2))
    try:
        figures = asyncio.run(_rounds(pipeline, made, requests, args.rounds))
    finally:
        stop_cluster(cluster)
    process, ray_ = statistics.median(figures["process"]), statistics.median(figures["ray"])
    print(f"pipeline {pipeline.name} ({runtime}), {requests} requests a round, wait_s={args.wait_ms:g} ms, "
          f"medians of {args.rounds} rounds")  # fmt: skip
    print(f"ray_runtime: process_tok_s={process:.0f} ray_tok_s={ray_:.0f} ratio={ray_ / process:.2f}")


class _Made:
    """Builds each transport's runtimes for the chosen stage runtime."""

    def __init__(self, runtime: str, pipeline: Pipeline, step_s: float, wait_s: float) -> None:
        self.runtime, self.pipeline, self.step_s, self.wait_s = runtime, pipeline, step_s, wait_s
        self.model = ""
        if runtime == "vllm":
            from omni_runtime.runtimes import vllm as engines

            for key, value in engines.ENGINE_ENV.items():
                os.environ.setdefault(key, value)
            self.model = str(engines.tiny_model_dir())

    def runtimes(self, transport: str) -> list[list[Any]]:
        stages = list(enumerate(self.pipeline.stages))
        sim: dict[str, Any] = {"seed": 0, "step_s": self.step_s}
        if transport == "process":
            if self.runtime == "vllm":
                return [[ProcessRuntime(VLLM, spec, stage, replica, self.model) for replica in range(spec.replicas)]
                        for stage, spec in stages]  # fmt: skip
            return [[ProcessRuntime("sim", spec, stage, replica, False, options=sim)
                     for replica in range(spec.replicas)] for stage, spec in stages]  # fmt: skip
        name, options = ("vllm-engine", {"model_dir": self.model}) if self.runtime == "vllm" else ("sim", sim)
        return [[RayRuntime(spec, stage, replica, False, runtime=name, options=options, wait_s=self.wait_s)
                 for replica in range(spec.replicas)] for stage, spec in stages]  # fmt: skip


async def _one(engine: AsyncEngine, i: int) -> tuple[Outcome | None, int, tuple[Any, ...]]:
    """Run prompt ``i``; return its outcome, the talker's tokens (count) and what every message carried."""
    messages = [message async for message in engine.generate(Prompt((1 + i % 97, 3, 5)))]
    return messages[-1].outcome, messages[-1].cumulative, tuple(m.data for m in messages)


async def _rounds(pipeline: Pipeline, made: _Made, requests: int, rounds: int) -> dict[str, list[float]]:
    """Start both engines (not timed: ``bind`` waits for every runtime), alternate the rounds, shut both down."""
    engines: dict[str, AsyncEngine] = {}
    figures: dict[str, list[float]] = {"process": [], "ray": []}
    try:
        for transport in figures:
            started = time.perf_counter()
            engines[transport] = AsyncEngine(pipeline, made.runtimes(transport))
            await engines[transport].start()
            print(f"{transport}: runtimes up in {time.perf_counter() - started:.1f} s", flush=True)
        for i in range(rounds):
            seen: dict[str, list[tuple[Any, ...]]] = {}  #: transport -> each request's messages' data
            for transport, engine in engines.items():
                started = time.perf_counter()
                results = await asyncio.gather(*(_one(engine, k) for k in range(requests)))
                seconds = time.perf_counter() - started
                assert all(outcome is Outcome.FINISHED for outcome, _, _ in results), [o for o, _, _ in results]
                seen[transport] = [data for _, _, data in results]
                count = sum(tokens for _, tokens, _ in results)
                figures[transport].append(count / seconds)
                print(f"round {i + 1} {transport}: {count} tokens in {seconds:.3f} s = {count / seconds:,.0f} tok/s",
                      flush=True)  # fmt: skip
            same = sum(a == b for a, b in zip(seen["process"], seen["ray"], strict=True))
            print(f"round {i + 1}: {same} of {requests} requests got the same messages on both transports", flush=True)
    finally:
        for engine in engines.values():
            await engine.shutdown()
    return figures


if __name__ == "__main__":
    main()
