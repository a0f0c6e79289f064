"""Benchmark images per second through the orchestrator against the bare diffusers pipeline, same model and inputs.

The tiny random-weight pipeline (``omni_runtime.runtimes.diffusers.tiny``: 16x16 images), ``--steps`` DDIM steps,
CFG at the default guidance 7.5, one torch thread, on the CPU by default. Four cases, alternated within each of
``--repeats`` rounds and reported as medians:

- bare, batch 1: the stock ``StableDiffusionPipeline`` built from the same components, one call per prompt;
- orchestrated, 1 concurrent: ``Engine`` with the diffusers runtime on a one-stage diffusion pipeline, one request
  at a time (``generate`` of one prompt);
- bare, batch ``--batch``: one stock call with ``--batch`` prompts and as many generators;
- orchestrated, ``--batch`` concurrent: ``generate`` of the ``--batch`` prompts (``max_running = --batch``).

Request ``i`` gets prompt ``i`` and seed ``i`` in every case (the runtime draws a request's seed from its id, and a
fresh engine numbers requests from 0; each image is checked against the bare call's, within 1e-4). Then ``--batch``
requests arriving at random times (exponential gaps, mean ``--gap`` ms): images per second and the mean latency.

Last line: ``diffusion: device=... bare_ips=... orchestrated_ips=... overhead_ratio=... batch=...`` where
``overhead_ratio`` is the bare batch's images/s over the orchestrated concurrent run's (target <= 1.05).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from omni_fsm import StageKind
from omni_runtime import Engine, Prompt
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.runtimes.diffusers import DiffusersOptions, build_pipeline, diffusers_runtimes, shared_denoiser
from omni_runtime.runtimes.diffusers.tiny import WORDS


def prompt_text(i: int) -> str:
    """Return request ``i``'s prompt (three words of the tiny vocabulary)."""
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7))


def orchestrated(count: int, concurrent: bool, steps: int, device: str) -> tuple[float, list[np.ndarray]]:
    """Return (seconds, images) for requests ``0..count-1`` through a fresh engine: all at once or one by one."""
    stage = StageSpec("image", StageKind.DIFFUSION, final=True, max_running=max(count, 1), steps=steps)
    pipeline = Pipeline((stage,), name="diffusion-bench")
    engine = Engine(pipeline, diffusers_runtimes(pipeline, DiffusersOptions(device=device)))
    prompts = [Prompt(text=prompt_text(i), height=16, width=16) for i in range(count)]
    start = time.perf_counter()
    if concurrent:
        results = engine.generate(prompts)
        made = [r.data[0] for r in results]
    else:
        made = [engine.generate(p)[-1].data for p in prompts]
    seconds = time.perf_counter() - start
    engine.shutdown()
    assert [m["seed"] for m in made] == list(range(count)), "a fresh engine numbers its requests from 0"
    return seconds, [m["image"] for m in made]


def bare(pipe: object, count: int, batched: bool, steps: int) -> tuple[float, list[np.ndarray]]:
    """Return (seconds, images) of the stock pipeline for prompts ``0..count-1``: one call, or one per prompt."""
    call: Callable[..., object] = pipe  # type: ignore[assignment]

    def run(ids: list[int]) -> list[np.ndarray]:
        out = call([prompt_text(i) for i in ids], num_inference_steps=steps, height=16, width=16, output_type="np",
                   generator=[torch.Generator().manual_seed(i) for i in ids])  # fmt: skip
        return list(out.images)  # type: ignore[attr-defined]

    start = time.perf_counter()
    images = run(list(range(count))) if batched else [run([i])[0] for i in range(count)]
    return time.perf_counter() - start, images


def random_arrivals(count: int, gap_ms: float, steps: int, device: str, seed: int = 0) -> tuple[float, float]:
    """Return (images/s, mean latency in s) for ``count`` requests arriving at exponential gaps (mean ``gap_ms``)."""
    stage = StageSpec("image", StageKind.DIFFUSION, final=True, max_running=count, steps=steps)
    pipeline = Pipeline((stage,), name="diffusion-bench")
    engine = Engine(pipeline, diffusers_runtimes(pipeline, DiffusersOptions(device=device)))
    rng = random.Random(seed)
    arrivals, at = [], 0.0
    for _ in range(count):
        at += rng.expovariate(1000.0 / gap_ms)
        arrivals.append(at)
    done: dict[int, float] = {}
    submitted: dict[int, float] = {}
    start = time.perf_counter()
    nxt = 0
    while len(done) < count:
        now = time.perf_counter() - start
        while nxt < count and arrivals[nxt] <= now:
            rid = engine.submit(Prompt(text=prompt_text(nxt), height=16, width=16),
                                listener=lambda m: done.setdefault(m.rid, time.perf_counter() - start)
                                if m.finished else None)  # fmt: skip
            submitted[rid] = now
            nxt += 1
        if not engine.host.pump() and nxt < count:
            time.sleep(max(0.0, min(arrivals[nxt] - (time.perf_counter() - start), 0.001)))
    seconds = time.perf_counter() - start
    engine.shutdown()
    return count / seconds, statistics.mean(done[r] - submitted[r] for r in done)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark; print the cases and the last line; return its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--single", type=int, default=16, help="requests in the batch-1 / 1-concurrent cases")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gap", type=float, default=5.0, help="random arrivals: mean gap in ms")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 requests, 2 steps, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.single, args.steps, args.repeats = 4, 2, 2, 1
    torch.set_num_threads(1)
    torch.backends.cudnn.allow_tf32 = False
    pipe = build_pipeline().to(args.device)
    shared_denoiser(None, 0, args.device)  # built before timing, as the bare pipeline is
    bare(pipe, 2, True, 2)  # warm-up
    orchestrated(2, True, 2, args.device)
    cases: dict[str, list[float]] = {"bare_1": [], "orch_1": [], "bare_batch": [], "orch_batch": []}
    worst = 0.0
    made: dict[str, list[np.ndarray]] = {}
    for _ in range(args.repeats):
        for name, count, run in (
            ("bare_1", args.single, lambda n: bare(pipe, n, False, args.steps)),
            ("orch_1", args.single, lambda n: orchestrated(n, False, args.steps, args.device)),
            ("bare_batch", args.batch, lambda n: bare(pipe, n, True, args.steps)),
            ("orch_batch", args.batch, lambda n: orchestrated(n, True, args.steps, args.device)),
        ):
            seconds, images = run(count)
            cases[name].append(count / seconds)
            made[name] = images
            if name.startswith("orch"):  # each image against the bare case's just before it, same prompt and seed
                reference = made[name.replace("orch", "bare")]
                worst = max(worst, max(float(np.abs(a - b).max()) for a, b in zip(images, reference, strict=True)))
    assert worst <= 1e-4, f"orchestrated images differ from the bare pipeline's by {worst:.2e}"
    ips = {name: statistics.median(rates) for name, rates in cases.items()}
    arrival_ips, latency = random_arrivals(args.batch, args.gap, args.steps, args.device)
    for name, label in (("bare_1", "bare, batch 1"), ("orch_1", "orchestrated, 1 concurrent"),
                        ("bare_batch", f"bare, batch {args.batch}"),
                        ("orch_batch", f"orchestrated, {args.batch} concurrent")):  # fmt: skip
        print(f"{label}: {ips[name]:.1f} images/s (median of {args.repeats})")
    print(f"random arrivals ({args.batch} requests, mean gap {args.gap} ms): {arrival_ips:.1f} images/s, "
          f"mean latency {latency * 1000:.0f} ms")  # fmt: skip
    print(f"{args.steps} steps, 16x16, CFG; images orchestrated vs bare: max-abs {worst:.2e}")
    ratio = ips["bare_batch"] / ips["orch_batch"]
    print(f"diffusion: device={args.device} bare_ips={ips['bare_batch']:.2f} orchestrated_ips={ips['orch_batch']:.2f} "
          f"overhead_ratio={ratio:.3f} batch={args.batch}")  # fmt: skip
    return {"bare_ips": ips["bare_batch"], "orchestrated_ips": ips["orch_batch"], "overhead_ratio": ratio,
            "arrival_ips": arrival_ips, "max_abs": worst}  # fmt: skip


if __name__ == "__main__":
    main()
