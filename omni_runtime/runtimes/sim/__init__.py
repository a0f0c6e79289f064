"""The simulator: deterministic (seeded) AR and diffusion stage runtimes, with fault injection."""

from __future__ import annotations

import attrs

from omni_fsm import StageKind
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.protocol import RuntimeFactory, build_runtimes
from omni_runtime.runtimes.sim._base import SimReplica
from omni_runtime.runtimes.sim.ar import SimAR
from omni_runtime.runtimes.sim.config import SimConfig
from omni_runtime.runtimes.sim.diffusion import SimDiffusion
from omni_runtime.runtimes.sim.instant import InstantReplica


def sim_replica(spec: StageSpec, stage: int, replica: int, seed: int = 0,
                config: SimConfig | None = None) -> SimReplica:  # fmt: skip
    """Return one simulated replica of ``spec``'s kind."""
    cls = SimAR if spec.kind is StageKind.AR else SimDiffusion
    return cls(spec, stage, replica, seed, config)


def kit_replica(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> SimReplica:
    """Return a simulated replica with every contract-legal behaviour on (the conformance kit's reference runtime;
    ``rpc_fails``: its workers raise in every control RPC)."""
    return sim_replica(spec, stage, replica, 7, attrs.evolve(SimConfig.legal(0.3), rpc_error=1.0 if rpc_fails else 0))


def sim_factory(seed: int = 0, config: SimConfig | None = None) -> RuntimeFactory[SimReplica]:
    """Return the runtime factory of simulated replicas seeded ``seed`` with ``config``'s faults (``rpc_fails``:
    every control RPC fails in a worker)."""

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> SimReplica:
        faults = attrs.evolve(config or SimConfig(), rpc_error=1.0) if rpc_fails else config
        return sim_replica(spec, stage, replica, seed, faults)

    return factory


def sim_runtimes(pipeline: Pipeline, seed: int = 0, config: SimConfig | None = None) -> list[list[SimReplica]]:
    """Return the simulated replicas of every stage: ``result[stage][replica]``."""
    return build_runtimes(pipeline, sim_factory(seed, config))


def demo_config(fault_rate: float, replica_deaths: tuple[tuple[int, int, int], ...] = ()) -> SimConfig:
    """Return the demo's faults: every fault, report-stream faults included, at ``fault_rate``; the replicas that
    die, (stage, replica, at step)."""
    return attrs.evolve(SimConfig.faulty(fault_rate), replica_deaths=replica_deaths)


def instant_runtimes(pipeline: Pipeline, hold: bool = False) -> list[list[InstantReplica]]:
    """Return zero-cost replicas (every request finishes within one step; with ``hold``, stays after its
    output until aborted): for benchmarks."""
    return [[InstantReplica(spec, hold) for _ in range(spec.replicas)] for spec in pipeline.stages]


__all__ = ["InstantReplica", "SimAR", "SimConfig", "SimDiffusion", "SimReplica", "demo_config", "instant_runtimes",
           "kit_replica", "sim_factory", "sim_replica", "sim_runtimes"]  # fmt: skip
