"""The conformance kit: ``check_runtime(factory)`` runs the state machine against a runtime factory and raises
``ConformanceError`` naming the broken invariant; strategies ``stage_specs``, ``pipelines``, ``workloads``. Needs
Hypothesis (the ``dev`` extra). The package's docstring (``omni_runtime.testing``) says how to use it."""

from __future__ import annotations

from collections.abc import Collection

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import run_state_machine_as_test

from omni_fsm import ControlMethod, StageKind
from omni_runtime.core.pipeline import Pipeline, simple_pipeline
from omni_runtime.core.protocol import RuntimeFactory, StageRuntime
from omni_runtime.testing._checker import KitViolation, RawStreamChecker
from omni_runtime.testing._machine import ConformanceError, make_machine, stage_specs


def pipelines() -> st.SearchStrategy[Pipeline]:
    """Return a strategy for pipelines of 1-3 stages, the last a final-output stage.

    Only the last stage may be a diffusion stage: no input adapter reads a diffusion stage's output.
    """
    kinds = st.lists(st.just(StageKind.AR), max_size=2).flatmap(
        lambda ars: st.sampled_from(list(StageKind)).map(lambda last: [*ars, last]))
    return kinds.flatmap(lambda ks: st.builds(
        simple_pipeline, st.just(ks), st.tuples(*(st.booleans() for _ in ks[:-1]), st.just(True)),
        replicas=st.integers(1, 2), max_running=st.integers(1, 4)))  # fmt: skip


def workloads() -> st.SearchStrategy[list[tuple[int, int, int]]]:
    """Return a strategy for requests ``(n, companions, abort at message k or 0)``."""
    one = st.tuples(st.integers(1, 2), st.just(0), st.integers(0, 6))
    one |= st.tuples(st.just(1), st.just(1), st.integers(0, 6))
    return st.lists(one, min_size=1, max_size=8)


def check_runtime(factory: RuntimeFactory[StageRuntime], max_examples: int = 30, shrink: bool = True,
                  may_die: bool = False, derandomize: bool | None = None,
                  kinds: Collection[StageKind] = tuple(StageKind), refused: Collection[ControlMethod] = (),
                  draw_seed: int | None = None, database: ExampleDatabase | None = None,
                  may_fail: bool = True) -> None:  # fmt: skip
    """Run the conformance machine against ``factory`` (with and without worker RPC errors).

    Raises ``ConformanceError`` naming the first invariant the runtime breaks. A runtime that
    reports its own death fails unless ``may_die`` (a death excuses everything it still owes). ``may_fail=False``
    says the runtime fails no request the kit gives it: then a ``Failed`` end fails the kit, under ORCH-INV-206
    where a control RPC failed in the workers before it (that failure reached the request).
    ``derandomize=True`` runs the same examples every time (a test that must not depend on the
    seed); ``None`` leaves it to the active Hypothesis profile. ``kinds``: the stage kinds the runtime
    serves (the kit draws stages of those kinds only). ``refused``: control RPCs its engine does not support,
    each to be answered with an error (vLLM's CPU build refuses sleep). ``draw_seed``: draw the examples from
    this seed (random generation: it overrides ``derandomize``); ``database``: the example database, to save
    failing examples in and try them first (``None``: none).
    """
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])]
    # the failing steps are the report: a profile's quiet verbosity would leave only the violation's line
    shown = max(Verbosity.normal, settings().verbosity)
    run = settings(max_examples=max_examples, stateful_step_count=30, deadline=None, phases=phases,
                   suppress_health_check=list(HealthCheck), database=database, report_multiple_bugs=False,
                   verbosity=shown)  # fmt: skip
    if draw_seed is not None:
        derandomize = False
    if derandomize is not None:
        run = settings(run, derandomize=derandomize)
    for rpc_fails in (False, True):
        machine = make_machine(factory, rpc_fails, may_die, kinds, refused, may_fail)
        if draw_seed is not None:
            machine = seed(draw_seed)(machine)
        run_state_machine_as_test(machine, settings=run)


def load_factory(spec: str) -> RuntimeFactory[StageRuntime]:
    """Return the factory named ``package.module:name``; ``ValueError`` (a ``ConfigError``) says what is wrong with
    ``spec`` (``omni_runtime.registry.load_factory``, as ``omni-run --runtime`` loads it)."""
    from omni_runtime.registry import load_factory as load

    return load(spec, "--omni-runtime")


def sim_factory(spec, stage, replica, rpc_fails):  # type: ignore[no-untyped-def]
    """Return a simulated replica with every contract-legal behaviour on (the kit's reference runtime)."""
    from omni_runtime import registry

    return registry.factory("sim-kit")(spec, stage, replica, rpc_fails)


__all__ = ["ConformanceError", "KitViolation", "RawStreamChecker", "check_runtime", "load_factory", "make_machine",
           "pipelines", "sim_factory", "stage_specs", "workloads"]  # fmt: skip
