"""Stage runtimes by name: the drivers and the conformance kit name a runtime; this resolves it when first used.

The orchestrator core, its drivers and the kit import no runtime package: a runtime is named here (its package
and the callable that makes a pipeline's replicas, ``runtimes[stage][replica]``), and imported only when a
pipeline is run on it. Adding a runtime adds one line here. A runtime outside the package is named by its
factory instead, ``package.module:factory`` (``load_factory``: ``omni-run --runtime`` and the kit's
``--omni-runtime``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from omni_runtime.core.protocol import RuntimeFactory, StageRuntime
from omni_runtime.errors import ConfigError

#: runtime name -> ``package.module:callable`` making every stage's replicas (``callable(pipeline, **options)``)
RUNTIMES: dict[str, str] = {
    "sim": "omni_runtime.runtimes.sim:sim_runtimes",  # the embedded default: the deterministic simulator
    "sim-kit": "omni_runtime.runtimes.sim:kit_replica",  # the conformance kit's reference runtime
    "sim-config": "omni_runtime.runtimes.sim:demo_config",  # the simulator's faults for the demo
    "vllm": "omni_runtime.runtimes.vllm:vllm_runtimes",  # real vLLM engines, a process per replica (AR stages)
    "vllm-factory": "omni_runtime.runtimes.vllm:vllm_factory",  # the same, as a factory of AR replicas
    "diffusers": "omni_runtime.runtimes.diffusers:diffusers_runtimes",  # diffusion stages on diffusers, AR on sim
    "diffusers-demo": "omni_runtime.runtimes.diffusers:demo_kit",  # what the text-to-image demo uses besides
    "ray": "omni_runtime.hosting.ray:ray_runtimes",  # each replica in a Ray actor, placed by [stages.placement]
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


def load_factory(target: str, option: str = "--runtime") -> RuntimeFactory[StageRuntime]:
    """Return the runtime factory named ``package.module:factory`` (the current directory importable, as for
    ``omni-fsm explore --spec``). ``ConfigError``, one line naming ``option``, for a malformed name, a module that
    does not import, a name it lacks, or something that cannot be called as ``factory(spec, stage, replica,
    rpc_fails)``."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise ConfigError(f"{option} wants package.module:factory, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.import_module(module)
    except Exception as exc:  # an import error, or whatever the module raises as it loads
        raise ConfigError(f"{option}={target}: cannot import {module}: {type(exc).__name__}: {exc}") from None
    factory = getattr(found, name, None)
    if not callable(factory):
        what = "has no" if factory is None else f"has a {type(factory).__name__}, not a callable,"
        raise ConfigError(f"{option}={target}: module {module} {what} {name!r}")
    try:
        inspect.signature(factory).bind(None, 0, 0, False)
    except TypeError as exc:  # the signature does not take the factory's four arguments
        raise ConfigError(f"{option}={target}: {name} is not a runtime factory: it cannot be called as "
                          f"{name}(spec, stage, replica, rpc_fails) ({exc})") from None  # fmt: skip
    except ValueError:  # no signature to read (a builtin): its first call says
        pass
    return factory  # type: ignore[no-any-return]
