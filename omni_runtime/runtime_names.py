"""Stage runtimes by name: the drivers and the conformance kit name a runtime; this resolves it when first used.

The orchestrator core, its drivers and the kit import no runtime package: a runtime is named here (its package
and the callable that makes a pipeline's replicas, ``runtimes[stage][replica]``), and imported only when a
pipeline is run on it. Adding a runtime adds one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from omni_runtime.errors import ConfigError

#: runtime name -> ``package.module:callable`` making every stage's replicas (``callable(pipeline, **options)``)
RUNTIMES: dict[str, str] = {
    "sim": "omni_runtime.runtimes.sim:sim_runtimes",  # the embedded default: the deterministic simulator
    "sim-kit": "omni_runtime.runtimes.sim:kit_replica",  # the conformance kit's reference runtime
    "sim-config": "omni_runtime.runtimes.sim:demo_config",  # the simulator's faults for the demo
    "vllm": "omni_runtime.runtimes.vllm:vllm_runtimes",  # real vLLM engines, a process per replica (AR stages)
}
#: the runtime a pipeline runs on when none is given
DEFAULT = "sim"


def runtime(name: str = DEFAULT) -> Callable[..., Any]:
    """Return the callable named ``name`` in ``RUNTIMES`` (imported now); ``ConfigError`` for an unknown name."""
    target = RUNTIMES.get(name)
    if target is None:
        raise ConfigError(f"unknown runtime {name!r} (known: {', '.join(sorted(RUNTIMES))})")
    module, _, attribute = target.partition(":")
    made: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
    return made
