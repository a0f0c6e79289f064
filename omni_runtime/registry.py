"""Stage runtimes by name: the one place a runtime is named; it is imported only when a pipeline runs on it.

Every name stands for a ``RuntimeProvider``: called with the runtime's own options (keywords), it returns the
``RuntimeFactory`` of its replicas, ``factory(spec, stage, replica, rpc_fails)``, the one signature the engines, the
conformance kit and ``omni-run --runtime`` call. The orchestrator core, the drivers, the kit and the applications
import no runtime package: they name one here (``factory``, ``runtimes``), and so do the hosting layers for the
runtime they run in a child process or a Ray actor. Adding a runtime adds one line here. A runtime outside the
package is named by its factory instead, ``package.module:factory`` (``load_factory``: ``omni-run --runtime``
and the kit's ``--omni-runtime``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from omni_fsm import StageKind
from omni_runtime.core.pipeline import Pipeline
from omni_runtime.core.protocol import RuntimeFactory, StageRuntime, build_runtimes, by_kind
from omni_runtime.errors import ConfigError


class RuntimeProvider(Protocol):
    """What a name stands for: ``provider(**options)`` returns the factory of the runtime's replicas (``ConfigError``
    for an option it refuses, such as a model directory that holds no model)."""

    def __call__(self, **options: Any) -> RuntimeFactory[StageRuntime]: ...


class Named(NamedTuple):
    """A runtime of the registry: its provider (``package.module:callable``), the stage kinds it serves and, for one
    that puts each replica in a process of its own, the name of the same runtime made in the caller's process (what a
    hosting layer that gives each replica a process or an actor runs: one process, not two)."""

    provider: str
    kinds: frozenset[StageKind]
    in_process: str | None = None


_AR, _DIFFUSION, _ANY = frozenset({StageKind.AR}), frozenset({StageKind.DIFFUSION}), frozenset(StageKind)
#: runtime name -> its provider and the stage kinds it serves
RUNTIMES: dict[str, Named] = {
    # the embedded default, the deterministic simulator (seed, config, fault_rate, replica_deaths, step_s)
    "sim": Named("omni_runtime.runtimes.sim:sim_factory", _ANY),
    "sim-kit": Named("omni_runtime.runtimes.sim:kit_factory", _ANY),  # the conformance kit's reference runtime
    "vllm": Named("omni_runtime.runtimes.vllm:vllm_factory", _AR, "vllm-engine"),  # real vLLM, a process per replica
    "vllm-engine": Named("omni_runtime.runtimes.vllm:vllm_engine_factory", _AR),  # the same, in the caller's process
    "vllm-scheduler": Named("omni_runtime.runtimes.vllm:vllm_scheduler_factory", _AR),  # vLLM's scheduler (the kit's)
    "diffusers": Named("omni_runtime.runtimes.diffusers:diffusers_factory", _DIFFUSION),  # a diffusers pipeline
    # each replica in a Ray actor, running the runtime its stage placement names (model_dir, resources)
    "ray": Named("omni_runtime.hosting.ray:actor_factory", _ANY),
}
#: the runtime a pipeline runs on when none is given
DEFAULT = "sim"


def provider(name: str = DEFAULT) -> RuntimeProvider:
    """Return the provider named ``name`` (imported now); ``ConfigError`` for an unknown name."""
    named = RUNTIMES.get(name)
    if named is None:
        raise ConfigError(f"unknown runtime {name!r} (known: {', '.join(sorted(RUNTIMES))})")
    module, _, attribute = named.provider.partition(":")
    made: RuntimeProvider = getattr(importlib.import_module(module), attribute)
    return made


def factory(name: str = DEFAULT, **options: Any) -> RuntimeFactory[StageRuntime]:
    """Return the factory of runtime ``name``'s replicas, made with ``options``."""
    return provider(name)(**options)


def runtimes(pipeline: Pipeline, name: str | Mapping[StageKind, str] = DEFAULT,
             **options: Any) -> list[list[StageRuntime]]:  # fmt: skip
    """Return the replicas of every stage of ``pipeline``, ``result[stage][replica]``: runtime ``name``'s made with
    ``options``, or, for a mapping ``{StageKind.AR: "sim", StageKind.DIFFUSION: "diffusers"}``, each stage's kind's
    runtime (made with none). ``ConfigError`` for a stage of a kind its runtime does not serve, before any replica is
    made."""
    names = name if isinstance(name, Mapping) else dict.fromkeys(StageKind, name)
    if options and len(set(names.values())) > 1:
        raise ConfigError("options go to one runtime: name one, not one per stage kind")
    for stage, spec in enumerate(pipeline.stages):
        chosen = names.get(spec.kind)
        if chosen is None:
            raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: no runtime is named for it")
        named = RUNTIMES.get(chosen)
        if named is not None and spec.kind not in named.kinds:
            served = " and ".join(k.value.upper() if k is StageKind.AR else k.value for k in StageKind
                                  if k in named.kinds)  # fmt: skip
            raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: the {chosen} runtime runs "
                              f"{served} stages only")  # fmt: skip
    used = {spec.kind for spec in pipeline.stages}
    made = {chosen: factory(chosen, **options) for kind, chosen in names.items() if kind in used}
    return build_runtimes(pipeline, by_kind({kind: made[chosen] for kind, chosen in names.items() if kind in used}))


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
    made = getattr(found, name, None)
    if not callable(made):
        what = "has no" if made is None else f"has a {type(made).__name__}, not a callable,"
        raise ConfigError(f"{option}={target}: module {module} {what} {name!r}")
    try:
        inspect.signature(made).bind(None, 0, 0, False)
    except TypeError as exc:  # the signature does not take the factory's four arguments
        raise ConfigError(f"{option}={target}: {name} is not a runtime factory: it cannot be called as "
                          f"{name}(spec, stage, replica, rpc_fails) ({exc})") from None  # fmt: skip
    except ValueError:  # no signature to read (a builtin): its first call says
        pass
    return made  # type: ignore[no-any-return]


def hosted(runtime: str, options: dict[str, Any] | None = None) -> Any:
    """Return what a hosting layer runs in the process or actor it gives a replica: the factory of runtime
    ``runtime`` (made in that process) with ``options`` when it is a name here, else the callable
    ``package.module:callable`` names (called with the layer's own arguments)."""
    named = RUNTIMES.get(runtime)
    if named is not None:
        return factory(named.in_process or runtime, **(options or {}))
    module, _, attribute = runtime.partition(":")
    if not module or not attribute:
        raise ConfigError(f"unknown runtime {runtime!r} (known: {', '.join(sorted(RUNTIMES))}, or "
                          f"package.module:factory)")  # fmt: skip
    return getattr(importlib.import_module(module), attribute)
