"""Historic bugs coming from a runtime: the orchestrator tolerates them and flags them (counted, kit)."""

from __future__ import annotations

from collections import Counter

import attrs
import pytest
from faulty_runtimes import DoubleFinish, OutputAfterAbort
from helpers import demo_pipeline, monitored_engine

from omni_fsm import SPEC, Outcome, StageKind
from omni_fsm import observations as ob
from omni_runtime import Engine, Orchestrator, Prompt, simple_pipeline
from omni_runtime import orchestrator as orchestrator_module
from omni_runtime import protocol as rp
from omni_runtime.sim import SimConfig, sim_runtimes
from omni_runtime.testing import ConformanceError, check_runtime
from tests.fsm import faults


def _wrapped(pipeline, cls):
    return [[cls(spec, s, r, False) for r in range(spec.replicas)] for s, spec in enumerate(pipeline.stages)]


def test_b3_report_for_a_request_that_just_ended_is_dropped():
    """B3 (vllm#42157): a report arrives for a request that finished mid-step: dropped, counted, never fatal."""
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    rid, _ = orch.submit(Prompt())
    for report in (rp.StatusChanged(rid, 0, rp.Status.SCHEDULED), rp.Finished(rid, 1)):
        orch.report(0, 0, report)
    assert orch.report(0, 0, rp.Output(rid, 2, 1, (5,))) == []
    assert orch.lifecycle.counters.dropped_unknown == 1 and orch.idle()


def test_b6_zombie_outputs_after_abort_are_dropped_and_flagged():
    """B6 (vllm-omni#3736): outputs of an aborted (freed) request: tolerated here, flagged by the kit."""
    pipeline = demo_pipeline()
    engine, monitor = monitored_engine(pipeline, _wrapped(pipeline, OutputAfterAbort))
    rids = [engine.submit(Prompt(max_tokens=8)) for _ in range(3)]
    engine.host.pump()
    for rid in rids:
        engine.abort(rid)
    engine.run_until_idle()
    assert all([m.finished for m in engine.outputs(r)].count(True) == 1 for r in rids)
    assert engine.orchestrator.counters()["dropped_unknown"] > 0
    assert monitor.finish() == [] and monitor.violations == []
    with pytest.raises(ConformanceError, match="ORCH-INV-209"):
        check_runtime(OutputAfterAbort, shrink=False)


B10_SEED, B10_CONFIG = 3, SimConfig.legal(0.2)  #: the seed makes the simulator duplicate some reports


class _RecordedDoubleFinish(DoubleFinish):
    """B10's runtime over a simulator that also duplicates reports (``SimConfig.duplicate``); keeps what it sent."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, attrs.evolve(B10_CONFIG, duplicate=0.3), B10_SEED)
        self.sent: list[rp.Report] = []

    def bind(self, sink):
        def recording(report):
            self.sent.append(report)
            sink(report)

        super().bind(recording)


def test_b10_duplicate_completion_is_tolerated_and_flagged():
    """B10 (vllm-omni#5983): a late duplicate completion never breaks delivery for others.

    Every completion is sent twice and, with a fixed seed, the simulator duplicates some other
    reports too: each copy is dropped and counted, and the client sees exactly what it sees
    without any duplicate.
    """
    pipeline = demo_pipeline()
    clean = Engine(pipeline, sim_runtimes(pipeline, B10_SEED, B10_CONFIG))
    expected = [clean.generate(Prompt()) for _ in range(4)]
    runtimes = _wrapped(pipeline, _RecordedDoubleFinish)
    engine, monitor = monitored_engine(pipeline, runtimes)
    messages = [engine.generate(Prompt()) for _ in range(4)]
    assert messages == expected
    assert all(ms[-1].finished and [m.finished for m in ms].count(True) == 1 for ms in messages)
    extra = Counter({kind: 0 for kind in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed)})
    for runtime in (runtime for replicas in runtimes for runtime in replicas):
        copies = Counter((type(r), r.req_id, r.seq) for r in runtime.sent if isinstance(r, rp.RequestReport))
        for (kind, _, _), count in copies.items():
            extra[kind] += count - 1
    assert extra[rp.Finished] >= sum(ms[-1].outcome is Outcome.FINISHED for ms in messages) > 0
    assert extra[rp.StatusChanged] + extra[rp.Output] > 0
    counters = engine.orchestrator.counters()
    assert counters["duplicates"] == extra[rp.StatusChanged] + extra[rp.Output]
    assert counters["dropped_stale"] + counters["dropped_unknown"] == extra[rp.Finished] + extra[rp.Failed]
    assert monitor.finish() == [] and monitor.violations == []
    with pytest.raises(ConformanceError, match="ORCH-INV-101"):
        check_runtime(DoubleFinish, shrink=False)


def _check_b4_every_request_finishes(spec, capacity):
    """Run six requests that all park (``capacity`` lifecycle slots per stage, 0: derived); assert each finishes."""
    pipeline = attrs.evolve(simple_pipeline([StageKind.AR, StageKind.AR], replicas=1, max_running=1),
                            capacity=capacity)  # fmt: skip
    runtimes = sim_runtimes(pipeline, 4, SimConfig(park=1.0, chunk_wait=1.0, preempt=1.0))
    engine, monitor = monitored_engine(pipeline, runtimes, spec)
    results = [engine.generate(Prompt(max_tokens=4)) for _ in range(6)]
    outcomes = [ms[-1].outcome for ms in results]
    assert outcomes == [Outcome.FINISHED] * 6, f"B4: a parked request did not finish: {outcomes}"
    assert monitor.finish() == [] and monitor.violations == []


@pytest.mark.parametrize("capacity", [0, 1], ids=["derived-capacity", "capacity-1"])
def test_b4_parked_requests_never_deadlock_admission(capacity):
    """B4 (vllm#53130): parked requests hold slots; every admitted request still reaches a terminal."""
    _check_b4_every_request_finishes(SPEC, capacity)


def test_b4_check_catches_a_parked_request_needing_a_second_slot():
    """B4 switched in (``faults.b4_parked_needs_a_second_slot``): with the one slot its own, no parked request
    can resume; the runtime's next report for it is illegal, so it fails instead of finishing."""
    with pytest.raises(AssertionError, match="B4: a parked request did not finish"):
        _check_b4_every_request_finishes(faults.b4_parked_needs_a_second_slot(), capacity=1)


def _check_b8_abort_carries_the_prefix():
    """Abort request 0 after its second message; assert its terminal carries the prefix the client saw.

    Seed 1 makes request 0 generate 8 tokens in 5 streamed messages; the abort lands after the
    second one (4 tokens), so it certainly cuts the request short.
    """
    pipeline = simple_pipeline([StageKind.AR], max_tokens=8)
    full = Engine(pipeline, sim_runtimes(pipeline, 1)).generate(Prompt(max_tokens=8))
    assert full[-1].outcome is Outcome.FINISHED and len(full) > 3  # the seed still gives a long request
    engine, monitor = monitored_engine(pipeline, sim_runtimes(pipeline, 1))
    rid = engine.submit(Prompt(max_tokens=8))
    seen = []
    for message in engine.outputs(rid):
        seen.append(message)
        if len(seen) == 2:
            assert not message.finished
            assert engine.abort(rid)
    streamed = tuple(t for m in seen[:-1] for t in m.data)
    assert [m.finished for m in seen] == [False, False, True]
    assert seen[-1].outcome is Outcome.ABORTED
    assert streamed == tuple(t for m in full[:2] for t in m.data) and len(streamed) < len(full[-1].data)
    assert seen[-1].data == streamed and seen[-1].cumulative == len(streamed), "B8: the abort lost the prefix"
    assert monitor.finish() == [] and monitor.violations == []


def test_b8_ar_abort_delivers_the_generated_prefix():
    """B8 (vllm-omni#6367): an AR abort at a final-output stage carries the prefix the client already saw."""
    _check_b8_abort_carries_the_prefix()


def test_b8_check_catches_an_abort_without_its_prefix(monkeypatch: pytest.MonkeyPatch):
    """B8 switched in: the orchestrator renders no data for an aborted terminal, and the check says so."""
    real = orchestrator_module._OBSERVATIONS[ob.Emitted]

    def prefix_dropped(orch, o, out):
        real(orch, o, out)
        if o.finished and o.outcome is Outcome.ABORTED:  # as if the `o.cumulative` clause were missing
            out[-1] = attrs.evolve(out[-1], message=attrs.evolve(out[-1].message, data=None))

    monkeypatch.setitem(orchestrator_module._OBSERVATIONS, ob.Emitted, prefix_dropped)
    with pytest.raises(AssertionError, match="B8: the abort lost the prefix"):
        _check_b8_abort_carries_the_prefix()
