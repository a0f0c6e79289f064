"""A runtime that reports about a request after its own ``Finished`` of it broke its protocol: the engine drops the
report, logs it (runtime, replica, request) and counts it (``counters()['after_finished']``, omni-run's summary). A
report for a request the engine ended for another reason (an abort, another stage) is only late (ORCH-INV-107)."""

from __future__ import annotations

import logging

from faulty_runtimes import OutputAfterAbort

from omni_fsm import StageKind
from omni_runtime import Engine, Prompt, simple_pipeline
from omni_runtime.apps.cli import render
from omni_runtime.apps.workload import DemoReport
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import sim_runtimes

PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR], [False, True], max_tokens=3)


class SpeaksAfterFinished:
    """A simulated replica that reports one more ``Output`` about each request after its own ``Finished``."""

    def __init__(self, runtime: rp.StageRuntime) -> None:
        self.runtime = runtime
        self.sink: rp.ReportSink | None = None

    def bind(self, sink: rp.ReportSink) -> None:
        self.sink = sink
        self.runtime.bind(self.relay)

    def relay(self, report: rp.Report) -> None:
        assert self.sink is not None
        self.sink(report)
        if isinstance(report, rp.Finished):
            self.sink(rp.Output(report.req_id, report.seq + 1, 1, (7,)))

    def __getattr__(self, name: str) -> object:
        return getattr(self.runtime, name)


def test_a_report_after_the_runtimes_own_finished_is_logged_and_counted(caplog) -> None:
    runtimes = sim_runtimes(PIPELINE, 1)
    runtimes[0] = [SpeaksAfterFinished(r) for r in runtimes[0]]
    with caplog.at_level(logging.WARNING, logger="omni_runtime"), Engine(PIPELINE, runtimes) as engine:
        messages = engine.generate(Prompt((1, 2)))
        counters = engine.orchestrator.counters()
    assert messages[-1].finished and counters["after_finished"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        "runtime 0/0 broke its protocol: Output about request 0 after its own Finished of it (dropped)"]
    summary = render(DemoReport("p", 1, dropped=counters), "t.jsonl")
    assert "runtime protocol broken: 1 report(s) after the runtime's own Finished of the request" in summary


def test_a_report_for_a_request_ended_otherwise_is_only_late(caplog) -> None:
    """A runtime that acknowledges an abort but runs on: its later reports cross the abort, and are only late."""
    pipeline = simple_pipeline([StageKind.AR], max_tokens=50)
    runtimes = [[OutputAfterAbort.around(r) for r in sim_runtimes(pipeline, 1)[0]]]
    with caplog.at_level(logging.WARNING, logger="omni_runtime"), Engine(pipeline, runtimes) as engine:
        rid = engine.submit(Prompt(max_tokens=50))
        assert next(engine.outputs(rid)).rid == rid  # running: its first output came
        assert engine.abort(rid) is True
        engine.run_until_idle()  # the zombie runs on, its reports late
        counters = engine.orchestrator.counters()
    assert counters["after_finished"] == 0 and counters["dropped_stale"] + counters["dropped_unknown"] >= 1
    assert not [r for r in caplog.records if "broke its protocol" in r.getMessage()]
