"""An orchestrated run's trace carries the facts version 2 added (issue 12): each dispatch names the replica the
orchestrator bound the request to, each runtime report the replica that sent it, each abort its call id; and the
monitor, judging them, finds the run clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.trace import read_trace
from omni_fsm.trace.check import check_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.covers("AR-INV-003", "ORCH-INV-106")
def test_an_orchestrated_trace_names_replicas_and_abort_calls_and_checks_clean(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, "-m", "omni_runtime.apps.cli", str(ROOT / "examples" / "pipeline.toml"),
                    "--requests", "60", "--trace", str(trace)], check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    with read_trace(trace) as reader:
        assert reader.header.version == 3
        steps = list(reader)
    named = {s.event.rid: s.event.request_id for s in steps if isinstance(s.event, ev.Submit)}
    assert len(named) == 60 and set(named.values()) == {f"request-{i}" for i in range(60)}  # the workload's names
    bound: dict[int, int] = {}
    replicas, calls, answered = set(), set(), set()
    for step in steps:
        if isinstance(step.event, ev.StageEvent) and not any(isinstance(o, ob.Dropped) for o in step.outputs):
            assert step.event.replica == bound[step.event.rid], step  # a report acted on: from the bound replica
        for o in step.outputs:
            if isinstance(o, ob.Dispatched):
                bound[o.rid] = o.replica
                replicas.add(o.replica)
            elif isinstance(o, ob.AbortAnswered) and o.parent is None:
                answered.add((o.rid, o.call_id))
        if isinstance(step.event, ev.Abort) and not any(isinstance(o, ob.Dropped) for o in step.outputs):
            calls.add((step.event.rid, step.event.call_id))
    assert replicas == {0, 1}  # the example pipeline runs two replicas per stage
    assert calls and calls == answered  # every client abort call answered under its own id
    report = check_trace(str(trace))
    assert report.complete and report.findings == [] and report.not_observable == ()
