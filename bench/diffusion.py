"""Benchmark images per second through the orchestrator against the bare diffusers pipeline, same model and inputs.

The tiny random-weight pipeline (``omni_runtime.runtimes.diffusers.tiny``), ``--size`` x ``--size`` images (16: the
UNet's native 8x8 latents; a larger size gives the same UNet larger latents, as a larger ``sample_size`` would),
``--steps`` DDIM steps, CFG at the default guidance 7.5, one torch thread, TF32 off, on the CPU by default. Four
cases, alternated within each of ``--repeats`` rounds and reported as medians:

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

``--arrivals``: one Poisson arrival trace (``--requests`` requests) through the step-level loop (requests join the
running batch between steps) and through request-level batching (a batch runs to its end, then every waiting request
up to the same ``--batch`` starts; no added wait), at each of ``--loads`` (fractions of the step-level loop's
images/s at ``--batch`` concurrent, measured first): throughput and p50/p99 latency (arrival to image) of both.
Last line per load: ``arrivals: load=... size=... step_ips=... step_p99_ms=... request_ips=... request_p99_ms=...
p99_ratio=...``.

``--profile``: where the time per image-step goes at batch ``--batch``, bare against orchestrated (wall-clock timers
around the parts, without a profiler; then ``torch.profiler`` for the kernels, launches and host syncs, and cProfile's
top functions, written under ``--profile-dir``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from omni_fsm import StageKind
from omni_runtime import Engine, Prompt
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.engines.host import Host
from omni_runtime.runtimes.diffusers import (
    Denoiser,
    DiffusersOptions,
    DiffusersRuntime,
    build_pipeline,
    diffusers_runtimes,
    shared_denoiser,
)
from omni_runtime.runtimes.diffusers.tiny import WORDS


def prompt_text(i: int) -> str:
    """Return request ``i``'s prompt (three words of the tiny vocabulary)."""
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7))


def tiny_model(size: int) -> str | None:
    """Return the directory of the tiny pipeline whose UNet's ``sample_size`` makes ``size`` x ``size`` images (the
    same weights and configuration otherwise: ``sample_size`` shapes no parameter), saved once; ``None`` for 16, the
    tiny pipeline's own size (built in memory)."""
    if size == 16:
        return None
    directory = Path(tempfile.gettempdir()) / f"omni-fsm-tiny-sd-{size}"
    if not (directory / "model_index.json").exists():
        pipe = build_pipeline()
        pipe.unet.register_to_config(sample_size=size // pipe.vae_scale_factor)
        pipe.save_pretrained(directory)
    return str(directory)


MODEL: str | None = None  #: the pipeline every case runs (``tiny_model(--size)``), set by ``main``


def make_engine(max_running: int, steps: int, device: str, batching: str = "step") -> Engine:
    """Return a fresh engine over a one-stage diffusion pipeline on the shared denoiser."""
    stage = StageSpec("image", StageKind.DIFFUSION, final=True, max_running=max(max_running, 1), steps=steps)
    pipeline = Pipeline((stage,), name="diffusion-bench")
    options = DiffusersOptions(model=MODEL, device=device, batching=batching)
    return Engine(pipeline, diffusers_runtimes(pipeline, options))


def orchestrated(count: int, concurrent: bool, steps: int, device: str, size: int = 16,
                 ) -> tuple[float, list[np.ndarray]]:  # fmt: skip
    """Return (seconds, images) for requests ``0..count-1`` through a fresh engine: all at once or one by one (the
    pipeline's native size is ``size``: a one-stage pipeline's requests carry none)."""
    engine = make_engine(count, steps, device)
    prompts = [Prompt(text=prompt_text(i), height=size, width=size) for i in range(count)]
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


def bare(pipe: object, count: int, batched: bool, steps: int, size: int = 16) -> tuple[float, list[np.ndarray]]:
    """Return (seconds, images) of the stock pipeline for prompts ``0..count-1``: one call, or one per prompt."""
    call: Callable[..., object] = pipe  # type: ignore[assignment]

    def run(ids: list[int]) -> list[np.ndarray]:
        out = call([prompt_text(i) for i in ids], num_inference_steps=steps, height=size, width=size,
                   output_type="np", generator=[torch.Generator().manual_seed(i) for i in ids])  # fmt: skip
        return list(out.images)  # type: ignore[attr-defined]

    start = time.perf_counter()
    images = run(list(range(count))) if batched else [run([i])[0] for i in range(count)]
    return time.perf_counter() - start, images


def poisson_trace(count: int, rate: float, seed: int = 0) -> list[float]:
    """Return ``count`` arrival times in seconds: exponential gaps of mean ``1 / rate``."""
    rng = random.Random(seed)
    arrivals, at = [], 0.0
    for _ in range(count):
        at += rng.expovariate(rate)
        arrivals.append(at)
    return arrivals


def replay(arrivals: list[float], steps: int, device: str, size: int, max_batch: int, batching: str = "step",
           ) -> tuple[float, list[float]]:  # fmt: skip
    """Return (images/s, each request's latency in s) of the trace ``arrivals`` through a fresh engine: request ``i``
    is submitted at the first pumping round at or after ``arrivals[i]``; its latency runs from ``arrivals[i]`` to the
    round that delivered its image; images/s is the requests over the time from 0 to the last image."""
    engine = make_engine(max_batch, steps, device, batching)
    count = len(arrivals)
    finished: dict[int, float] = {}
    arrival_of: dict[int, float] = {}
    start = time.perf_counter()

    def listener(message: Any) -> None:
        if message.finished:
            finished.setdefault(message.rid, time.perf_counter() - start)

    nxt = 0
    while len(finished) < count:
        now = time.perf_counter() - start
        while nxt < count and arrivals[nxt] <= now:
            rid = engine.submit(Prompt(text=prompt_text(nxt), height=size, width=size), listener=listener)
            arrival_of[rid] = arrivals[nxt]
            nxt += 1
        if not engine.host.pump() and nxt < count:
            time.sleep(max(0.0, min(arrivals[nxt] - (time.perf_counter() - start), 0.001)))
    engine.shutdown()
    return count / max(finished.values()), [finished[r] - arrival_of[r] for r in finished]


def random_arrivals(count: int, gap_ms: float, steps: int, device: str, size: int = 16) -> tuple[float, float]:
    """Return (images/s, mean latency in s) for ``count`` requests arriving at exponential gaps (mean ``gap_ms``)."""
    ips, latencies = replay(poisson_trace(count, 1000.0 / gap_ms), steps, device, size, count)
    return ips, statistics.mean(latencies)


def percentile(values: list[float], q: float) -> float:
    """Return the ``q``-th percentile of ``values`` (linear interpolation, as ``numpy.percentile``)."""
    return float(np.percentile(np.asarray(values), q))


def overhead(args: argparse.Namespace, pipe: Any) -> dict[str, float]:
    """Run the four cases and the random arrivals; print them and the last line; return the figures."""
    cases: dict[str, list[float]] = {"bare_1": [], "orch_1": [], "bare_batch": [], "orch_batch": []}
    worst = 0.0
    made: dict[str, list[np.ndarray]] = {}
    for _ in range(args.repeats):
        for name, count, run in (
            ("bare_1", args.single, lambda n: bare(pipe, n, False, args.steps, args.size)),
            ("orch_1", args.single, lambda n: orchestrated(n, False, args.steps, args.device, args.size)),
            ("bare_batch", args.batch, lambda n: bare(pipe, n, True, args.steps, args.size)),
            ("orch_batch", args.batch, lambda n: orchestrated(n, True, args.steps, args.device, args.size)),
        ):
            seconds, images = run(count)
            cases[name].append(count / seconds)
            made[name] = images
            if name.startswith("orch"):  # each image against the bare case's just before it, same prompt and seed
                reference = made[name.replace("orch", "bare")]
                worst = max(worst, max(float(np.abs(a - b).max()) for a, b in zip(images, reference, strict=True)))
    assert worst <= 1e-4, f"orchestrated images differ from the bare pipeline's by {worst:.2e}"
    ips = {name: statistics.median(rates) for name, rates in cases.items()}
    arrival_ips, latency = random_arrivals(args.batch, args.gap, args.steps, args.device, args.size)
    for name, label in (("bare_1", "bare, batch 1"), ("orch_1", "orchestrated, 1 concurrent"),
                        ("bare_batch", f"bare, batch {args.batch}"),
                        ("orch_batch", f"orchestrated, {args.batch} concurrent")):  # fmt: skip
        print(f"{label}: {ips[name]:.1f} images/s (median of {args.repeats})")
    print(f"random arrivals ({args.batch} requests, mean gap {args.gap} ms): {arrival_ips:.1f} images/s, "
          f"mean latency {latency * 1000:.0f} ms")  # fmt: skip
    print(f"{args.steps} steps, {args.size}x{args.size}, CFG; images orchestrated vs bare: max-abs {worst:.2e}")
    ratio = ips["bare_batch"] / ips["orch_batch"]
    print(f"diffusion: device={args.device} bare_ips={ips['bare_batch']:.2f} orchestrated_ips={ips['orch_batch']:.2f} "
          f"overhead_ratio={ratio:.3f} batch={args.batch}")  # fmt: skip
    return {"bare_ips": ips["bare_batch"], "orchestrated_ips": ips["orch_batch"], "overhead_ratio": ratio,
            "arrival_ips": arrival_ips, "max_abs": worst}  # fmt: skip


def arrivals(args: argparse.Namespace) -> list[dict[str, float]]:
    """Replay one Poisson trace per load through step-level and request-level batching; print and return the
    figures (the loads are fractions of the step-level loop's images/s at ``--batch`` concurrent, measured here)."""
    capacity = statistics.median(args.batch / orchestrated(args.batch, True, args.steps, args.device, args.size)[0]
                                 for _ in range(args.repeats))  # fmt: skip
    print(f"capacity: {capacity:.1f} images/s ({args.batch} concurrent, {args.steps} steps, {args.size}x{args.size}, "
          f"median of {args.repeats})")  # fmt: skip
    figures = []
    for load in args.loads:
        rate = load * capacity
        trace = poisson_trace(args.requests, rate, seed=args.seed)
        got: dict[str, tuple[float, list[float]]] = {}
        for batching in ("step", "request"):
            got[batching] = replay(trace, args.steps, args.device, args.size, args.batch, batching)
        row: dict[str, float] = {"load": load, "rate": rate}
        for batching, (ips, latencies) in got.items():
            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            row |= {f"{batching}_ips": ips, f"{batching}_p50": p50, f"{batching}_p99": p99}
            print(f"  load {load:.2f} ({rate:.1f} requests/s, mean gap {1000 / rate:.2f} ms, {args.requests} "
                  f"requests), {batching}-level: {ips:.1f} images/s, p50 {p50 * 1000:.0f} ms, "
                  f"p99 {p99 * 1000:.0f} ms")  # fmt: skip
        row["p99_ratio"] = row["step_p99"] / row["request_p99"]
        figures.append(row)
        print(f"arrivals: load={load:.2f} size={args.size} step_ips={row['step_ips']:.2f} "
              f"step_p99_ms={row['step_p99'] * 1000:.0f} request_ips={row['request_ips']:.2f} "
              f"request_p99_ms={row['request_p99'] * 1000:.0f} p99_ratio={row['p99_ratio']:.3f}")  # fmt: skip
    return figures


@contextlib.contextmanager
def timed(targets: list[tuple[Any, str, str]], totals: dict[str, float]) -> Iterator[None]:
    """Wrap each ``(owner, attribute, label)`` callable so that its wall-clock seconds add up in ``totals[label]``
    (an owner without the attribute is skipped); restore them on exit."""
    saved = []
    for owner, name, label in targets:
        if not hasattr(owner, name):
            continue
        original = getattr(owner, name)
        saved.append((owner, name, vars(owner).get(name, _MISSING)))

        def wrapper(*a: Any, _f: Any = original, _label: str = label, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                totals[_label] = totals.get(_label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, prior in reversed(saved):
            if prior is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, prior)


_MISSING = object()


def _sync_counts(events: Any) -> dict[str, float]:
    """Return kernel launches, kernel time (us), host syncs and copies from ``torch.profiler``'s averages."""
    by = {e.key: e for e in events}
    launches = sum(by[k].count for k in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                        "cuLaunchKernelEx", "cudaGraphLaunch") if k in by)  # fmt: skip
    graphs = by["cudaGraphLaunch"].count if "cudaGraphLaunch" in by else 0
    kernel_us = sum(getattr(e, "self_device_time_total", 0.0) for e in events
                    if str(getattr(e, "device_type", "")).endswith("CUDA"))  # fmt: skip
    syncs = sum(by[k].count for k in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
                if k in by)  # fmt: skip
    scalar = by["aten::_local_scalar_dense"].count if "aten::_local_scalar_dense" in by else 0
    copies = by["cudaMemcpyAsync"].count if "cudaMemcpyAsync" in by else 0
    return {"launches": launches, "graph_launches": graphs, "kernel_us": kernel_us, "syncs": syncs,
            "item": scalar, "memcpy": copies}  # fmt: skip


def profile(args: argparse.Namespace, pipe: Any) -> dict[str, dict[str, float]]:
    """Print where each microsecond per image-step goes at batch ``--batch``, bare and orchestrated; return it."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out = Path(args.profile_dir)
    out.mkdir(parents=True, exist_ok=True)
    denoiser = shared_denoiser(MODEL, 0, args.device)
    work = args.batch * args.steps  # image-steps per run
    runs: dict[str, tuple[Callable[[], Any], list[tuple[Any, str, str]]]] = {
        "bare": (lambda: bare(pipe, args.batch, True, args.steps, args.size), [
            (pipe, "encode_prompt", "text encoder"), (pipe, "prepare_latents", "initial noise"),
            (pipe.unet, "forward", "UNet call"), (pipe.scheduler, "step", "scheduler step"),
            (pipe.vae, "decode", "VAE decode"), (pipe.image_processor, "postprocess", "postprocess")]),
        "orchestrated": (lambda: orchestrated(args.batch, True, args.steps, args.device, args.size), [
            (Host, "drain", "engine: reports"), (DiffusersRuntime, "step", "runtime step"),
            (Denoiser, "start_many", "start (text encoder, noise)"), (Denoiser, "step", "denoiser step"),
            (Denoiser, "_unet", "UNet call") if hasattr(Denoiser, "_unet") else (denoiser.pipe.unet, "forward",
                                                                                 "UNet call"),
            (Denoiser, "decode_start", "decode (VAE, postprocess)")]),
    }  # fmt: skip
    table: dict[str, dict[str, float]] = {}
    for name, (run, targets) in runs.items():
        run()
        walls = []
        for _ in range(args.repeats):
            walls.append(run()[0])
        parts: dict[str, float] = {}
        with timed(targets, parts):
            timed_wall = run()[0]
        row = {"wall (no timers), median": statistics.median(walls), "wall (with timers)": timed_wall}
        row |= {label: seconds for label, seconds in parts.items()}
        if name == "bare":
            row["the loop's own work (guidance, Python)"] = timed_wall - sum(parts.values())
        else:
            inside = sum(parts.get(k, 0.0) for k in ("start (text encoder, noise)", "denoiser step",
                                                     "decode (VAE, postprocess)"))  # fmt: skip
            row["runtime: bookkeeping, reports"] = parts.get("runtime step", 0.0) - inside
            row["denoiser: around the UNet call"] = parts.get("denoiser step", 0.0) - parts.get("UNet call", 0.0)
            row["engine: the rest of generate"] = (timed_wall - parts.get("runtime step", 0.0)
                                                   - parts.get("engine: reports", 0.0))  # fmt: skip
        stats_path = out / f"cprofile-{name}-{args.size}.txt"
        profiler = cProfile.Profile()
        profiler.enable()
        run()
        profiler.disable()
        with stats_path.open("w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("tottime").print_stats(40)
        if args.device == "cuda":
            torch.cuda.synchronize()
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run()
                torch.cuda.synchronize()
            events = prof.key_averages()
            (out / f"torch-{name}-{args.size}.txt").write_text(
                events.table(sort_by="self_cpu_time_total", row_limit=40))
            counts = _sync_counts(events)
            row |= {"GPU kernel time": counts["kernel_us"] / 1e6}
            row |= {f"per step: {k}": v / args.steps for k, v in counts.items() if k != "kernel_us"}
        table[name] = row
    labels = list(dict.fromkeys(k for row in table.values() for k in row))
    print(f"profile: batch {args.batch}, {args.steps} steps, {args.size}x{args.size}, CFG, {args.device}; "
          f"us per image-step (seconds / {work}); 'per step' rows are counts per denoising step")  # fmt: skip
    print(f"{'part':44s} {'bare':>12s} {'orchestrated':>14s}")
    for label in labels:
        cells = []
        for name in runs:
            value = table[name].get(label)
            if value is None:
                cells.append("-")
            elif label.startswith("per step"):
                cells.append(f"{value:.1f}")
            else:
                cells.append(f"{value * 1e6 / work:.1f}")
        print(f"{label:44s} {cells[0]:>12s} {cells[1]:>14s}")
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark (or ``--arrivals``, ``--profile``); print the cases and the last line; return its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--single", type=int, default=16, help="requests in the batch-1 / 1-concurrent cases")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", type=int, default=16, help="image side in pixels (a multiple of 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gap", type=float, default=5.0, help="random arrivals: mean gap in ms")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 requests, 2 steps, 1 repeat")
    parser.add_argument("--arrivals", action="store_true", help="step-level against request-level batching")
    parser.add_argument("--requests", type=int, default=256, help="--arrivals: requests in the trace")
    parser.add_argument("--loads", type=lambda s: [float(x) for x in s.split(",")], default=[0.5, 0.9],
                        help="--arrivals: arrival rates as fractions of the measured capacity")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="--arrivals: the trace's seed")
    parser.add_argument("--profile", action="store_true", help="where the time per image-step goes")
    parser.add_argument("--profile-dir", default="out/diffusion-profile")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.single, args.steps, args.repeats = 4, 2, 2, 1
        args.requests = min(args.requests, 8)
    torch.set_num_threads(1)
    torch.backends.cudnn.allow_tf32 = False
    global MODEL
    MODEL = tiny_model(args.size)
    pipe = build_pipeline(MODEL).to(args.device)
    denoiser = shared_denoiser(MODEL, 0, args.device)  # built before timing, as the bare pipeline is
    graphs = denoiser.prepare(args.size, args.size, args.batch)  # CUDA graphs captured before serving (CUDA only)
    if args.device == "cuda":
        print(f"CUDA graphs captured before timing: {graphs} (launch-bound row buckets up to {2 * args.batch} rows)")
    bare(pipe, 2, True, 2, args.size)  # warm-up
    orchestrated(2, True, 2, args.device, args.size)
    if args.profile:
        return {"profile": profile(args, pipe)}
    if args.arrivals:
        return {"arrivals": arrivals(args)}
    return overhead(args, pipe)


if __name__ == "__main__":
    main()
