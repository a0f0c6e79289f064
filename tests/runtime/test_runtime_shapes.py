"""Runtimes enter an engine as ``runtimes[stage][replica]``, made by one factory signature (``build_runtimes``); any
other shape is a ``ConfigError`` naming the position and what was expected, before a runtime is bound."""

from __future__ import annotations

import pytest

import omni_runtime
from omni_fsm import StageKind
from omni_runtime import AsyncEngine, ConfigError, Engine, Host, build_runtimes, simple_pipeline
from omni_runtime.runtimes.sim import SimReplica, sim_factory, sim_replica

PIPELINE = simple_pipeline([StageKind.AR, StageKind.DIFFUSION], [False, True], replicas=2)  # two stages, 2 each


def _replicas():  # type: ignore[no-untyped-def]
    return [[sim_replica(spec, i, r) for r in range(spec.replicas)] for i, spec in enumerate(PIPELINE.stages)]


def _flat(rs):  # type: ignore[no-untyped-def]
    return [r for replicas in rs for r in replicas]


class NoStep:
    """Has every method of the protocol but ``step`` and ``shutdown``."""

    def bind(self, sink): ...
    def add_request(self, req_id, stage_input): ...
    def abort_requests(self, abort_id, req_ids): ...
    def control(self, call_id, method, level, tags): ...


#: case -> (make the runtimes from a good nested list, the message)
SHAPES = {
    "flat": (_flat, r"^runtimes\[0\]: expected the list of stage 0's replicas, got a SimAR \(a flat list of runtimes\? "
                    r"build_runtimes\(pipeline, factory\) makes the nested one\)$"),
    "one-runtime": (lambda rs: rs[0][0], r"^runtimes: expected a list of 2 lists of replicas \(runtimes\[stage\]"
                                         r"\[replica\]\), got a SimAR$"),
    "none-stage": (lambda rs: [rs[0], None], r"^runtimes\[1\]: expected the list of stage 1's replicas, got None$"),
    "too-few-stages": (lambda rs: rs[:1], r"^runtimes: expected 2 stages' lists of replicas \(pipeline 'pipeline'\), "
                                          r"got 1$"),
    "too-many-stages": (lambda rs: [*rs, rs[1]], r"^runtimes: expected 2 stages' lists of replicas .*got 3$"),
    "empty-replicas": (lambda rs: [rs[0], []], r"^runtimes\[1\]: expected 2 replica\(s\) of stage 1 \('s1'\), got 0$"),
    "one-replica-short": (lambda rs: [rs[0][:1], rs[1]], r"^runtimes\[0\]: expected 2 replica\(s\) of stage 0 "
                                                         r"\('s0'\), got 1$"),
    "not-a-runtime": (lambda rs: [rs[0], [rs[1][0], NoStep()]], r"^runtimes\[1\]\[1\] is a NoStep, not a StageRuntime "
                                                                r"\(it lacks step, shutdown\)$"),
    "a-string": (lambda rs: [rs[0], "ab"], r"^runtimes\[1\]: expected the list of stage 1's replicas, got a str$"),
}  # fmt: skip
ENGINES = {"Engine": Engine, "AsyncEngine": AsyncEngine, "Host": Host}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_wrongly_shaped_runtime_list_is_a_config_error_naming_the_position(engine, shape):
    good = _replicas()
    make, message = SHAPES[shape]
    with pytest.raises(ConfigError, match=message):
        ENGINES[engine](PIPELINE, make(good))
    assert all(r._sink is None for r in _flat(good))  # refused before any runtime was bound


@pytest.mark.parametrize("engine", ENGINES)
def test_the_nested_list_build_runtimes_makes_is_taken(engine):
    runtimes = build_runtimes(PIPELINE, sim_factory(seed=3))
    ENGINES[engine](PIPELINE, runtimes)
    assert all(r._sink is not None for r in _flat(runtimes))


def test_build_runtimes_calls_the_factory_once_per_replica_of_every_stage():
    calls = []

    def factory(spec, stage, replica, rpc_fails):
        calls.append((spec.name, stage, replica, rpc_fails))
        return sim_replica(spec, stage, replica)

    runtimes = build_runtimes(PIPELINE, factory)
    assert calls == [("s0", 0, 0, False), ("s0", 0, 1, False), ("s1", 1, 0, False), ("s1", 1, 1, False)]
    assert [[(r.stage, r.replica) for r in rs] for rs in runtimes] == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    assert all(isinstance(r, SimReplica) for r in _flat(runtimes))


def test_build_runtimes_names_the_call_that_made_something_else():
    with pytest.raises(ConfigError, match=r"^factory\(<stage 0 's0'>, 0, 0, False\) made a dict, not a StageRuntime "
                                          r"\(it lacks bind, add_request, abort_requests, control, step, shutdown\)$"):
        build_runtimes(PIPELINE, lambda spec, stage, replica, rpc_fails: {})


def test_the_sim_factory_makes_workers_raise_in_every_rpc_when_asked():
    spec = PIPELINE.stages[0]
    assert sim_factory()(spec, 0, 0, True).config.rpc_error == 1.0
    assert sim_factory()(spec, 0, 0, False).config.rpc_error == 0.0


def test_the_factory_signature_and_helper_are_exported_from_the_root():
    assert {"RuntimeFactory", "build_runtimes"} <= set(omni_runtime.__all__)
