"""The vLLM runtime: AR stages on vLLM's real v1 scheduler (the only package that imports vLLM).

``VllmSchedulerRuntime`` runs one replica's requests through vLLM's own ``Scheduler`` (or a
subclass, such as ``AsyncScheduler`` or an Omni scheduler) with a deterministic stand-in for the
model executor; see ``scheduler.py`` for how each status assignment becomes a report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from omni_fsm import StageKind
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.core.protocol import RuntimeFactory
from omni_runtime.errors import ConfigError
from omni_runtime.hosting.process import ProcessRuntime, process_factory, process_runtimes
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


def _given_max_tokens(spec: StageSpec, req_id: int, given: StageInput) -> RequestPlan:
    return RequestPlan(max_tokens=given.max_tokens or spec.max_tokens)


def engine_kit_factory(model_dir: str) -> Callable[[StageSpec, int, int, bool], VllmSchedulerRuntime]:
    """Return a conformance-kit factory whose runtimes all run on one in-process ``EngineCore`` over ``model_dir``
    (made at the first call, stopped by the factory's ``close()``): each runtime's ``shutdown`` checks that it
    left no request and no KV block in the engine (``EngineNotDrained``) and drains it for the next example."""
    from omni_runtime.runtimes.vllm._engine import CoreEngine, DrainedEngine

    options = SchedulerOptions(max_num_seqs=4, block_size=32, max_model_len=256, max_num_batched_tokens=256)
    cores: list[CoreEngine] = []

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> VllmSchedulerRuntime:
        if not cores:
            cores.append(CoreEngine(model_dir, options))
        return VllmSchedulerRuntime(spec, options, engine=DrainedEngine(cores[0].core), rpc_fails=rpc_fails,
                                    plans=_given_max_tokens)

    def close() -> None:
        while cores:
            cores.pop().shutdown()

    factory.close = close  # type: ignore[attr-defined]
    return factory


def tiny_model_dir() -> Path:
    """Return the tiny Llama's directory in the user's cache (built there once: ``$XDG_CACHE_HOME`` or ``~/.cache``,
    ``omni-fsm/tiny-llama``)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return build_tiny_llama(cache / "omni-fsm" / "tiny-llama")


#: what vLLM needs on a CPU machine with no model hub, set (where not set already) before stage processes start: no
#: hub, no telemetry, a small KV cache (GiB), the engine in the stage's own process, one thread per process
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "ERROR",
}  # fmt: skip


def _model(model_dir: str | None) -> str:
    """Return ``model_dir`` (``None``: the tiny Llama, built once), ``ENGINE_ENV`` set where not set; ``ConfigError``
    when it holds no model."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    model = model_dir if model_dir is not None else str(tiny_model_dir())
    if not (Path(model) / "config.json").is_file():
        raise ConfigError(f"{model}: no model there (config.json missing)")
    return model


def _ar_only(spec: StageSpec, stage: int) -> None:
    if spec.kind is not StageKind.AR:
        raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: the vllm runtime runs AR stages only")


def vllm_factory(model_dir: str | None = None) -> RuntimeFactory[ProcessRuntime]:
    """Return the runtime factory of a real vLLM engine per replica of an AR stage, each in a process of its own
    (the registry's ``vllm-engine`` on ``model_dir``, default: the tiny Llama, built once): the registry's ``vllm``.
    ``ENGINE_ENV`` is set where not set."""
    made = process_factory("vllm-engine", model_dir=_model(model_dir))

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> ProcessRuntime:
        _ar_only(spec, stage)
        return made(spec, stage, replica, rpc_fails)

    return factory


def vllm_engine_factory(model_dir: str | None = None) -> RuntimeFactory[VllmSchedulerRuntime]:
    """Return the runtime factory of a real vLLM engine over ``model_dir`` (default: the tiny Llama) in the caller's
    process, one per process (``engine_factory``; with ``rpc_fails``, the kit's ``engine_kit_factory``): the
    registry's ``vllm-engine``, what a child process or a Ray actor runs."""
    model = _model(model_dir)

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> VllmSchedulerRuntime:
        _ar_only(spec, stage)
        if rpc_fails:
            return engine_kit_factory(model)(spec, stage, replica, True)
        return engine_factory(spec, stage, replica, model)

    return factory


def vllm_scheduler_factory() -> RuntimeFactory[VllmSchedulerRuntime]:
    """Return ``scheduler_factory`` (``ENGINE_ENV`` set where not set): the registry's ``vllm-scheduler``."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    return scheduler_factory


def vllm_runtimes(pipeline: Pipeline, model_dir: str | None = None) -> list[list[ProcessRuntime]]:
    """Return a real vLLM engine per replica of every stage, each in a process of its own (``engine_factory`` on
    ``model_dir``, default: the tiny Llama, built once); ``ENGINE_ENV`` is set for them where not set already.
    Raises ``ConfigError`` for a stage that is not AR."""
    for i, spec in enumerate(pipeline.stages):
        _ar_only(spec, i)
    return process_runtimes(pipeline, "omni_runtime.runtimes.vllm:engine_factory", _model(model_dir))


__all__ = ["ENGINE_ENV", "RequestPlan", "SchedulerOptions", "VllmSchedulerRuntime", "build_scheduler",
           "build_tiny_llama", "engine_factory", "engine_kit_factory", "plan_for", "reports_for_moves",
           "scheduler_factory", "tiny_model_dir", "vllm_engine_factory", "vllm_factory", "vllm_runtimes",
           "vllm_scheduler_factory", "write_tiny_llama_config"]  # fmt: skip
