"""The tiny text-to-image pipeline for every diffusers test: the runtime's (built by code, in memory) and the stock
``StableDiffusionPipeline`` the images are judged against, loaded offline from the runtime's pipeline saved to a
temporary directory (separate objects: nothing the runtime does to its own can reach the reference)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.runtimes.real_engines import ENGINE_ENV, require

require("diffusers", "pip install 'diffusers==0.42.1'")

import torch  # noqa: E402

torch.set_num_threads(1)  # repeatable floats, and the machine's cores are shared
# on CUDA (where the runtime runs by default), TF32 convolutions, PyTorch's default, make a batched row differ from
# its batch-1 call by up to 1e-3; the 1e-4 claims are about the pipeline's float32 arithmetic (docs/diffusion.md)
torch.backends.cudnn.allow_tf32 = False
assert ENGINE_ENV["HF_HUB_OFFLINE"] == "1"


@pytest.fixture(scope="session")
def stock(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Return the stock pipeline: the runtime's default pipeline, saved, then loaded back offline."""
    from diffusers import StableDiffusionPipeline

    from omni_runtime.runtimes.diffusers import build_pipeline, default_device

    directory = tmp_path_factory.mktemp("tiny-sd")
    build_pipeline().save_pretrained(directory)
    pipe = StableDiffusionPipeline.from_pretrained(directory, local_files_only=True, safety_checker=None,
                                                   requires_safety_checker=False)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(default_device())  # where the runtime runs


@pytest.fixture(scope="session")
def stock_image(stock: Any) -> Callable[..., Any]:
    """Return ``image(prompt, negative, guidance, steps, seed, size)``: the stock call's one image (batch 1)."""

    def image(prompt: str, negative: str | None = None, guidance: float = 7.5, steps: int = 3, seed: int = 0,
              size: int = 16) -> Any:  # fmt: skip
        out = stock(prompt, negative_prompt=negative, guidance_scale=guidance, num_inference_steps=steps,
                    generator=torch.Generator().manual_seed(seed), height=size, width=size, output_type="np")
        return out.images[0]

    return image
