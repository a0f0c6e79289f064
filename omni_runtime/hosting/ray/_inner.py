"""The runtimes a Ray actor runs, by the name a pipeline file gives (``[stages.placement] runtime = "..."``).

Each is a runtime factory, ``factory(spec, stage, replica, rpc_fails, *args)``, imported in the actor only: the
driver names it. A name not here is taken as ``package.module:factory``, importable on every node.
"""

from __future__ import annotations

import os
import time
from typing import Any

#: runtime name -> ``package.module:factory`` run in the actor
INNER: dict[str, str] = {
    "sim": "omni_runtime.hosting.ray._inner:sim",  # the simulator, no injected faults
    "sim-kit": "omni_runtime.runtimes.sim:kit_replica",  # the conformance kit's reference runtime
    "vllm": "omni_runtime.hosting.ray._inner:vllm",  # a real vLLM engine (AR stages), in the actor's process
    "vllm-scheduler": "omni_runtime.hosting.ray._inner:vllm_scheduler",  # vLLM's scheduler, the kit's vLLM runtime
    "diffusers": "omni_runtime.hosting.ray._inner:diffusers",  # a diffusers pipeline (diffusion stages)
}
#: the runtime a stage whose placement names none runs
DEFAULT = "sim"


def target(name: str) -> str:
    """Return the ``package.module:factory`` that runtime ``name`` stands for (``ValueError``: neither)."""
    found = INNER.get(name, name)
    module, _, attribute = found.partition(":")
    if not module or not attribute:
        raise ValueError(f"unknown runtime {name!r} (known: {', '.join(sorted(INNER))}, or package.module:factory)")
    return found


def sim(spec: Any, stage: int, replica: int, rpc_fails: bool = False, seed: int = 0, step_s: float = 0.0) -> Any:
    """Return a simulated replica seeded ``seed`` (``rpc_fails``: every control RPC fails in a worker) whose every
    busy step takes ``step_s`` seconds more, as a real engine's forward pass does (the tests, the benchmark)."""
    from omni_runtime.runtimes.sim import sim_factory

    made = sim_factory(seed)(spec, stage, replica, rpc_fails)
    return Paced(made, step_s) if step_s > 0 else made


class Paced:
    """A runtime whose busy steps take ``step_s`` seconds longer (every other call is the runtime's own)."""

    def __init__(self, runtime: Any, step_s: float) -> None:
        self.runtime, self.step_s = runtime, step_s
        self.busy = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)

    def step(self) -> bool:
        if self.busy:
            time.sleep(self.step_s)
        self.busy = bool(self.runtime.step())
        return self.busy


def vllm(spec: Any, stage: int, replica: int, rpc_fails: bool = False, model_dir: str | None = None) -> Any:
    """Return a replica on a real vLLM engine over ``model_dir`` (default: the tiny Llama), in this process."""
    from omni_runtime.runtimes import vllm as engines

    for key, value in engines.ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    if rpc_fails:
        return engines.engine_kit_factory(model_dir or str(engines.tiny_model_dir()))(spec, stage, replica, True)
    return engines.engine_factory(spec, stage, replica, model_dir or str(engines.tiny_model_dir()))


def vllm_scheduler(spec: Any, stage: int, replica: int, rpc_fails: bool = False) -> Any:
    """Return a replica on vLLM's own v1 scheduler and KV-cache manager with a stand-in model (the conformance kit's
    vLLM runtime, ``omni_runtime.runtimes.vllm:scheduler_factory``), in this process."""
    from omni_runtime.runtimes import vllm as engines

    for key, value in engines.ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    return engines.scheduler_factory(spec, stage, replica, rpc_fails)


def diffusers(spec: Any, stage: int, replica: int, rpc_fails: bool = False, model: str | None = None) -> Any:
    """Return a replica on a diffusers pipeline in this process: ``model`` (a local pipeline directory) or, when
    ``None``, the tiny one; CUDA when the actor has a GPU (``num_gpus`` in the placement), else the CPU."""
    from omni_runtime.runtimes.diffusers import DiffusersOptions, diffusers_factory

    return diffusers_factory(DiffusersOptions(model=model))(spec, stage, replica, rpc_fails)
