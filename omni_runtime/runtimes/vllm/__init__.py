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
from omni_runtime.runtimes.vllm.tiny import write_tiny_llama_config


def scheduler_factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> VllmSchedulerRuntime:
    """Return a replica on vLLM's scheduler with the stand-in connector on (the conformance kit's factory)."""
    options = SchedulerOptions(max_num_seqs=spec.max_running, num_blocks=24, kv_connector=True,
                               enable_prefix_caching=bool(replica % 2))  # fmt: skip
    return VllmSchedulerRuntime(spec, options, seed=stage * 31 + replica, rpc_fails=rpc_fails)


__all__ = ["RequestPlan", "SchedulerOptions", "VllmSchedulerRuntime", "build_scheduler", "plan_for",
           "reports_for_moves", "scheduler_factory", "write_tiny_llama_config"]  # fmt: skip
