"""The vLLM runtime: AR stages on vLLM's real v1 scheduler (the only package that imports vLLM).

``VllmSchedulerRuntime`` runs one replica's requests through vLLM's own ``Scheduler`` (or a
subclass, such as ``AsyncScheduler`` or an Omni scheduler) with a deterministic stand-in for the
model executor; see ``scheduler.py`` for how each status assignment becomes a report.
"""

from __future__ import annotations

from omni_runtime.pipeline import StageSpec
from omni_runtime.runtimes.vllm._config import SchedulerOptions, build_scheduler
from omni_runtime.runtimes.vllm._plan import RequestPlan, plan_for
from omni_runtime.runtimes.vllm.scheduler import VllmSchedulerRuntime, reports_for_moves
from omni_runtime.runtimes.vllm.tiny import build_tiny_llama, write_tiny_llama_config


def scheduler_factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> VllmSchedulerRuntime:
    """Return a replica on vLLM's scheduler with the stand-in connector on (the conformance kit's factory)."""
    options = SchedulerOptions(max_num_seqs=spec.max_running, num_blocks=24, kv_connector=True,
                               enable_prefix_caching=bool(replica % 2))  # fmt: skip
    return VllmSchedulerRuntime(spec, options, seed=stage * 31 + replica, rpc_fails=rpc_fails)


def engine_factory(spec: StageSpec, stage: int, replica: int, model_dir: str) -> VllmSchedulerRuntime:
    """Return a replica on a real in-process ``EngineCore`` over ``model_dir`` (greedy; each request's
    ``max_tokens`` from its stage input, else the stage's). One per process: run each stage in a ``ProcessRuntime``
    (``ProcessRuntime("omni_runtime.runtimes.vllm:engine_factory", spec, stage, replica, model_dir)``)."""
    from omni_runtime.runtimes.vllm._engine import CoreEngine

    options = SchedulerOptions(max_num_seqs=spec.max_running, block_size=32, max_model_len=256,
                               max_num_batched_tokens=256)  # fmt: skip
    return VllmSchedulerRuntime(spec, options, engine=CoreEngine(model_dir, options),
                                plans=lambda s, rid, given: RequestPlan(max_tokens=given.max_tokens or s.max_tokens))


__all__ = ["RequestPlan", "SchedulerOptions", "VllmSchedulerRuntime", "build_scheduler", "build_tiny_llama",
           "engine_factory", "plan_for", "reports_for_moves", "scheduler_factory",
           "write_tiny_llama_config"]  # fmt: skip
