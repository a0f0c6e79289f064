"""``python -m omni_runtime.apps.text2image --out DIR --requests N``: the text-to-image pipeline
(``examples/diffusion_pipeline.toml``: an AR stage on the simulator, each request with a CFG companion, a diffusion
stage on diffusers' tiny pipeline) through the Engine, a few requests aborted at random moments and one asking for
a size the pipeline refuses (it fails alone). Writes ``DIR/trace.jsonl`` (check it with ``omni-fsm check``), each
finished request's image as ``DIR/request-<id>.png`` and ``DIR/report.html``
(``omni_runtime.runtimes.diffusers.report``)."""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from omni_fsm import StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import Monitor
from omni_fsm.trace import TraceWriter
from omni_runtime import registry
from omni_runtime.core.commands import ClientMessage
from omni_runtime.core.pipeline import example_pipeline, load_pipeline
from omni_runtime.core.prompts import Prompt, Sampling
from omni_runtime.engines.engine import Engine
from omni_runtime.runtimes.diffusers import demo_kit


@attrs.frozen
class DemoRun:
    """What the demo made: a record per request (in submission order), the monitor's violations, the files."""

    records: list[Any]  #: ``omni_runtime.runtimes.diffusers.report.RequestRecord``
    violations: list[str]
    trace: Path
    report: Path
    images: list[Path]


def _workload(requests: int, rng: random.Random, words: tuple[str, ...]) -> list[tuple[str, str | None, int]]:
    """Return (prompt, negative prompt, image side) per request: one in 5 with no negative prompt, the 4th a size
    that is not a multiple of 8 (the diffusion stage fails it)."""
    asks = []
    for i in range(requests):
        prompt = " ".join(rng.choice(words) for _ in range(rng.randint(2, 4)))
        negative = None if i % 5 == 4 else rng.choice(("dark", "blurry sky", "old photo"))
        asks.append((prompt, negative, 20 if i % 8 == 3 else 16))
    return asks


def run_demo(out: Path, requests: int = 12, seed: int = 0, abort_every: int = 3) -> DemoRun:
    """Run the demo into ``out``; return what it made. Every ``abort_every``-th request (from the 2nd) is aborted
    at a random round while it runs."""
    out.mkdir(parents=True, exist_ok=True)
    kit = demo_kit()
    kit.torch_threads(1)
    rng = random.Random(seed)
    pipeline = load_pipeline(example_pipeline("diffusion_pipeline"))
    monitor = Monitor(pipeline.kinds, pipeline.final, pipeline.slots)
    start = time.perf_counter()
    forwarded: dict[int, float] = {}
    trace = out / "trace.jsonl"
    with TraceWriter(trace) as writer:
        writer.header(pipeline.kinds, pipeline.final, pipeline.slots)

        def on_step(event: ev.Event | None, observations: Sequence[ob.Observation]) -> None:
            monitor.step(event, observations)
            writer.step(event, observations)
            for o in observations:
                if isinstance(o, ob.Forwarded):
                    forwarded.setdefault(o.rid, time.perf_counter() - start)

        runtimes = registry.runtimes(pipeline, {StageKind.AR: "sim", StageKind.DIFFUSION: "diffusers"})
        engine = Engine(pipeline, runtimes, on_step=on_step)
        asks = _workload(requests, rng, kit.words)
        boxes: list[list[ClientMessage]] = [[] for _ in asks]
        ended = [0.0 for _ in asks]

        def listener_for(i: int) -> Any:
            def listener(message: ClientMessage) -> None:
                boxes[i].append(message)
                if message.finished:
                    ended[i] = time.perf_counter() - start

            return listener

        rids, submitted, abort_at = [], [], {}
        for i, (prompt, negative, side) in enumerate(asks):
            submitted.append(time.perf_counter() - start)
            rid = engine.submit(Prompt(text=prompt, height=side, width=side, negative=negative,
                                       sampling=Sampling(seed=seed * 1000 + i)), companions=1,
                                listener=listener_for(i))  # fmt: skip
            rids.append(rid)
            if i % abort_every == 1:
                abort_at[rid] = rng.randint(1, 5)  # a pumping round: at the AR stage or mid-denoising
        rounds = 0
        while not all(box and box[-1].finished for box in boxes):
            rounds += 1
            engine.host.pump()
            for rid, box in zip(rids, boxes, strict=True):
                if abort_at.get(rid) == rounds and not (box and box[-1].finished):
                    engine.host.abort_nowait(rid)
        engine.run_until_idle()
        engine.shutdown()
        monitor.finish()
        writer.end()
    records, images = [], []
    for rid, (prompt, negative, _), box, at, end in zip(rids, asks, boxes, submitted, ended, strict=True):
        last = box[-1]
        data: Any = last.data if isinstance(last.data, dict) else {}
        outcome = last.outcome.value if last.outcome is not None else "unknown"
        image = data.get("image") if outcome == "finished" else None
        records.append(kit.record(rid, prompt, negative, outcome, last.error or last.reason, at, forwarded.get(rid),
                                     end, image, str(data.get("prompt", ""))))  # fmt: skip
        if image is not None:
            images.append(out / f"request-{rid}.png")
            images[-1].write_bytes(kit.png_bytes(image))
    violations = [str(v) for v in monitor.violations]
    wall = time.perf_counter() - start
    facts = {"pipeline": pipeline.name, "requests": str(requests), "wall time": f"{wall:.2f} s",
             "torch threads": str(kit.torch_threads()), "trace": trace.name}  # fmt: skip
    report = out / "report.html"
    report.write_text(kit.render_report(records, violations, facts), encoding="utf-8")
    return DemoRun(records, violations, trace, report, images)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo from the command line; return 0, or 1 when the monitor found a violation."""
    parser = argparse.ArgumentParser(prog="python -m omni_runtime.apps.text2image", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/text2image"), help="directory for the outputs")
    parser.add_argument("--requests", type=int, default=12, help="requests to submit (default 12)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (prompts, seeds, aborts)")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    run = run_demo(args.out, args.requests, args.seed)
    counts: dict[str, int] = {}
    for record in run.records:
        counts[record.outcome] = counts.get(record.outcome, 0) + 1
    outcomes = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    print(f"text2image: {outcomes} images={len(run.images)} violations={len(run.violations)}")
    print(f"report: {run.report}\ntrace: {run.trace}")
    return 1 if run.violations else 0


if __name__ == "__main__":
    sys.exit(main())
