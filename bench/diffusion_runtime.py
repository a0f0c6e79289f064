"""Benchmark the diffusers runtime: images per second with one sample per UNet call against a batch of eight.

The tiny random-weight pipeline (8x8 latents, 16x16 images), ``--steps`` DDIM steps with CFG (two UNet rows per
sample), one torch thread. The same ``--requests`` requests (distinct prompts and seeds) run through one replica
whose ``max_running`` is 1 (each sample alone: batch 1), then one whose ``max_running`` is 8 (eight samples per
UNet call: batched); each run is timed from the first step to the last finish, after a warm-up run, and the best of
``--repeats`` runs is taken. The images of the two runs are also compared (they must agree within 1e-4).

Last line: ``diffusion_runtime: batch1_img_s=... batched_img_s=... ratio=...``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from omni_fsm import StageKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import Sampling, StageInput
from omni_runtime.runtimes.diffusers import DiffusersOptions, diffusers_factory


def run(max_running: int, requests: int, steps: int, device: str) -> tuple[float, dict[int, np.ndarray], int]:
    """Return (seconds, images by request id, UNet calls) for ``requests`` requests on one replica."""
    spec = StageSpec("image", StageKind.DIFFUSION, final=True, max_running=max_running, steps=steps)
    runtime = diffusers_factory(DiffusersOptions(device=device))(spec, 0, 0, False)
    images: dict[int, np.ndarray] = {}

    def sink(report: rp.Report) -> None:
        if isinstance(report, rp.Finished):
            images[report.req_id] = report.payload["image"]

    runtime.bind(sink)
    for i in range(requests):
        runtime.add_request(i, StageInput(text=f"red cat {i}", multimodal={"size": (16, 16), "guidance_scale": 5.0},
                                          sampling=Sampling(seed=i)))  # fmt: skip
    start = time.perf_counter()
    while runtime.step():
        pass
    seconds = time.perf_counter() - start
    runtime.shutdown()
    assert len(images) == requests
    return seconds, images, runtime.unet_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu (the default: the figures docs/diffusion.md gives), cuda")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.backends.cudnn.allow_tf32 = False  # CUDA: float32 convolutions, as faithfulness is claimed
    run(8, 8, 2, args.device)  # warm-up: builds the pipeline, first calls
    best: dict[int, tuple[float, dict[int, np.ndarray], int]] = {}
    for _ in range(args.repeats):
        for batch in (1, 8):
            result = run(batch, args.requests, args.steps, args.device)
            if batch not in best or result[0] < best[batch][0]:
                best[batch] = result
    worst_diff = max(float(np.abs(best[1][1][i] - best[8][1][i]).max()) for i in range(args.requests))
    assert worst_diff <= 1e-4, worst_diff
    rates = {batch: args.requests / seconds for batch, (seconds, _, _) in best.items()}
    for batch, (seconds, _, calls) in sorted(best.items()):
        print(f"max_running={batch}: {args.requests} images x {args.steps} steps in {seconds:.3f} s, "
              f"{calls} UNet calls, {rates[batch]:.1f} images/s")  # fmt: skip
    print(f"device {args.device}; images of the two runs: max-abs difference {worst_diff:.2e}")
    print(f"diffusion_runtime: batch1_img_s={rates[1]:.2f} batched_img_s={rates[8]:.2f} "
          f"ratio={rates[8] / rates[1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
