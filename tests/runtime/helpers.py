"""Workload helpers shared by the runtime tests."""

from __future__ import annotations

from collections.abc import Sequence

from omni_fsm import Outcome, StageKind
from omni_fsm.invariants import Monitor
from omni_runtime import ClientMessage, Engine, Pipeline, Prompt, simple_pipeline
from omni_runtime.sim import SimConfig, sim_runtimes


def demo_pipeline(replicas: int = 2) -> Pipeline:
    """Return AR -> AR (final) -> diffusion, like examples/pipeline.toml."""
    return simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION], final=[False, True, True],
                           replicas=replicas, max_running=3)  # fmt: skip


def monitor_for(pipeline: Pipeline) -> Monitor:
    """Return a monitor for ``pipeline`` (pass ``monitor.step`` as ``on_step``)."""
    return Monitor(pipeline.kinds, pipeline.final, pipeline.slots)


def run_sync(pipeline: Pipeline, specs: Sequence[tuple[int, int, int]], seed: int, config: SimConfig,
             on_step=None) -> dict[int, list[ClientMessage]]:  # fmt: skip
    """Submit ``(n, companions, abort_at)`` requests, consume them (aborting at message ``abort_at``)."""
    engine = Engine(pipeline, sim_runtimes(pipeline, seed, config), on_step=on_step)
    rids = [(engine.submit(Prompt((1, 2, seed % 7)), n, c), abort_at) for n, c, abort_at in specs]
    seen: dict[int, list[ClientMessage]] = {}
    for rid, abort_at in rids:
        seen[rid] = []
        for message in engine.outputs(rid):
            seen[rid].append(message)
            if len(seen[rid]) == abort_at and not message.finished:
                engine.abort(rid)
    engine.run_until_idle()
    engine.shutdown()
    assert engine.orchestrator.held_state() == dict.fromkeys(engine.orchestrator.held_state(), 0)
    return seen


def assert_stage_ordered(messages: Sequence[ClientMessage]) -> None:
    """Exactly one terminal, last; each stream (the request's, each sample's) in stage order."""
    assert [m.finished for m in messages].count(True) == 1
    assert messages[-1].finished and messages[-1].reason is not None
    last: dict[int, int] = {}
    for m in messages:
        assert m.stage >= last.get(m.sample, -1), messages
        last[m.sample] = m.stage
    if messages[-1].outcome is Outcome.FINISHED and messages[-1].reason != "length":
        assert messages[-1].stage == max(m.stage for m in messages)
