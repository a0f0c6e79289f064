"""The simulator: deterministic (seeded) AR and diffusion stage runtimes, with fault injection."""

from __future__ import annotations

from typing import Any

import attrs

from omni_fsm import StageKind
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.protocol import RuntimeFactory, build_runtimes
from omni_runtime.runtimes.sim._base import SimReplica
from omni_runtime.runtimes.sim.ar import SimAR
from omni_runtime.runtimes.sim.config import SimConfig
from omni_runtime.runtimes.sim.diffusion import SimDiffusion
from omni_runtime.runtimes.sim.instant import InstantReplica
from omni_runtime.runtimes.sim.paced import Paced


def sim_replica(spec: StageSpec, stage: int, replica: int, seed: int = 0,
                config: SimConfig | None = None) -> SimReplica:  # fmt: skip
    """Return one simulated replica of ``spec``'s kind."""
    cls = SimAR if spec.kind is StageKind.AR else SimDiffusion
    return cls(spec, stage, replica, seed, config)


def kit_replica(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> SimReplica:
    """Return a simulated replica with every contract-legal behaviour on (the conformance kit's reference runtime;
    ``rpc_fails``: its workers raise in every control RPC)."""
    return sim_replica(spec, stage, replica, 7, attrs.evolve(SimConfig.legal(0.3), rpc_error=1.0 if rpc_fails else 0))


def kit_factory() -> RuntimeFactory[SimReplica]:
    """Return ``kit_replica``: the registry's ``sim-kit``."""
    return kit_replica


def sim_factory(seed: int = 0, config: SimConfig | None = None, *, fault_rate: float = 0.0,
                replica_deaths: tuple[tuple[int, int, int], ...] = (), step_s: float = 0.0) -> RuntimeFactory[Any]:
    """Return the runtime factory of simulated replicas seeded ``seed`` with ``config``'s faults (``rpc_fails``:
    every control RPC fails in a worker); the registry's ``sim``. Without ``config``: every fault, report-stream
    faults included, at ``fault_rate`` (none by default), and the replicas ``replica_deaths`` names die
    (stage, replica, at step). ``step_s``: each busy step takes that many seconds more, as a real engine's does."""
    if config is None and (fault_rate or replica_deaths):
        config = attrs.evolve(SimConfig.faulty(fault_rate), replica_deaths=tuple(replica_deaths))

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> Any:
        faults = attrs.evolve(config or SimConfig(), rpc_error=1.0) if rpc_fails else config
        made = sim_replica(spec, stage, replica, seed, faults)
        return Paced(made, step_s) if step_s > 0 else made

    return factory


def sim_runtimes(pipeline: Pipeline, seed: int = 0, config: SimConfig | None = None) -> list[list[SimReplica]]:
    """Return the simulated replicas of every stage: ``result[stage][replica]``."""
    return build_runtimes(pipeline, sim_factory(seed, config))


def instant_runtimes(pipeline: Pipeline, hold: bool = False) -> list[list[InstantReplica]]:
    """Return zero-cost replicas (every request finishes within one step; with ``hold``, stays after its
    output until aborted): for benchmarks."""
    return [[InstantReplica(spec, hold) for _ in range(spec.replicas)] for spec in pipeline.stages]


__all__ = ["InstantReplica", "Paced", "SimAR", "SimConfig", "SimDiffusion", "SimReplica", "instant_runtimes",
           "kit_factory", "kit_replica", "sim_factory", "sim_replica", "sim_runtimes"]  # fmt: skip
