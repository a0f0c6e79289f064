"""diffusers in Ray actors, on the local two-node cluster: the conformance kit passes on the diffusers runtime
(``runtime = "diffusers"``, the tiny pipeline) with each replica in an actor, and an AR -> diffusion pipeline runs
with its image stage in an actor, the image the one the runtime makes in this process for the same request."""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("ray", "pip install 'ray==2.60.0' (the ray extra)")
require("diffusers", "pip install diffusers (the diffusion extra)")

import numpy as np  # noqa: E402

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_runtime import Engine, Pipeline, Prompt, Sampling, StageSpec  # noqa: E402
from omni_runtime.hosting.ray import RayRuntime, actor_factory  # noqa: E402
from omni_runtime.runtimes.diffusers import diffusers_runtimes  # noqa: E402
from omni_runtime.runtimes.sim import sim_replica  # noqa: E402
from omni_runtime.testing import check_runtime  # noqa: E402

pytestmark = pytest.mark.covers("ORCH-INV-101", "ORCH-INV-202", "ORCH-INV-209")



def test_the_conformance_kit_passes_on_diffusers_in_ray_actors(cluster):
    check_runtime(actor_factory("diffusers"), max_examples=2, kinds={StageKind.DIFFUSION}, derandomize=True,
                  may_fail=False)


def test_an_image_stage_in_a_ray_actor_makes_the_image_it_makes_here(cluster):
    pipeline = Pipeline((
        StageSpec("prior", StageKind.AR, max_tokens=3),
        StageSpec("image", StageKind.DIFFUSION, final=True, adapter="ar2diffusion", steps=2,
                  placement={"runtime": "diffusers", "resources": {"stage1": 1}}),
    ))  # fmt: skip
    prompt = Prompt((1, 2, 3), height=16, width=16, sampling=Sampling(seed=7))

    def image(runtimes) -> np.ndarray:
        with Engine(pipeline, runtimes) as engine:
            result = engine.generate([prompt])[0]
        assert result.outcome is Outcome.FINISHED, result.error
        assert result.data[0]["seed"] == 7
        return np.asarray(result.data[0]["image"])

    here = image(diffusers_runtimes(pipeline))
    in_actor = image([[sim_replica(pipeline.stages[0], 0, 0)], [RayRuntime(pipeline.stages[1], 1, 0)]])
    assert here.shape[-1] == 3 and np.array_equal(here, in_actor)
