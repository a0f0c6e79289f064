"""The example text-to-image pipeline (an AR stage on the simulator, a diffusion stage on diffusers) runs end to end
through the Engine, the diffusers runtime chosen by name: every request gets an image, each the stock pipeline's
for the prompt, negative prompt and seed the stage read, and the stage batched the requests' denoising steps."""

from __future__ import annotations

import numpy as np

from omni_fsm import Outcome, StageKind
from omni_runtime import Engine, Prompt, registry
from omni_runtime.core.pipeline import example_pipeline, load_pipeline


def test_the_example_diffusion_pipeline_runs_end_to_end_on_the_engine(stock_image):
    pipeline = load_pipeline(example_pipeline("diffusion_pipeline"))
    runtimes = registry.runtimes(pipeline, {StageKind.AR: "sim", StageKind.DIFFUSION: "diffusers"})
    image_stage = runtimes[1][0]
    engine = Engine(pipeline, runtimes)
    prompts = [Prompt(text=f"request {i}", height=16, width=16, negative="dark" if i % 2 else None) for i in range(6)]
    try:
        results = engine.generate(prompts, companions=1)
    finally:
        engine.shutdown()
    assert [r.outcome for r in results] == [Outcome.FINISHED] * 6
    steps = pipeline.stages[1].steps
    for result in results:
        made = result.data[0]
        assert made["image"].shape == (16, 16, 3) and made["steps"] == steps
        assert made["negative_prompt"] is not None  # the CFG companion's tokens, read as words
        reference = stock_image(made["prompt"], made["negative_prompt"], made["guidance_scale"], steps, made["seed"])
        assert np.abs(made["image"] - reference).max() <= 1e-4
    assert len({r.data[0]["seed"] for r in results}) == 6
    assert image_stage.unet_calls < 6 * steps  # samples in flight together shared UNet calls


def test_the_clients_seed_reaches_the_diffusion_stage_through_the_ar_to_diffusion_adapter() -> None:
    """AR-INV-002: the adapter carries the client's sampling seed to the diffusion stage: the same seed gives the
    same image whatever the request id; another seed, another image."""
    from omni_runtime import Sampling

    pipeline = load_pipeline(example_pipeline("diffusion_pipeline"))
    engine = Engine(pipeline, registry.runtimes(pipeline, {StageKind.AR: "sim", StageKind.DIFFUSION: "diffusers"}))

    def prompt(seed: int) -> Prompt:
        return Prompt(text="a red square", height=16, width=16, sampling=Sampling(seed=seed))

    try:
        first, other, again = engine.generate([prompt(7), prompt(8), prompt(7)])
    finally:
        engine.shutdown()
    assert first.rid != again.rid
    assert [r.data[0]["seed"] for r in (first, other, again)] == [7, 8, 7]
    assert np.array_equal(first.data[0]["image"], again.data[0]["image"])
    assert not np.array_equal(first.data[0]["image"], other.data[0]["image"])
