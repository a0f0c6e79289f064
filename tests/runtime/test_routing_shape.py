"""A runtime cannot route: reports name no stage or destination, and runtimes never see the orchestrator."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs

from omni_fsm import StageKind
from omni_runtime import Orchestrator, Prompt, simple_pipeline
from omni_runtime import protocol as rp

SIM = Path(__file__).parents[2] / "omni_runtime" / "sim"


def test_reports_carry_no_routing_field():
    for cls in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed, rp.AbortResult, rp.RpcResult):
        names = {f.name for f in attrs.fields(cls)}
        assert not names & {"stage", "replica", "dst", "target", "next_stage"}, cls


def test_runtimes_import_no_orchestrator_or_driver():
    for path in SIM.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[-1] not in ("orchestrator", "host", "driver", "sync"), path


def test_a_report_claiming_another_stage_is_not_acted_on():
    orch = Orchestrator(simple_pipeline([StageKind.AR, StageKind.AR]))
    rid, _ = orch.submit(Prompt())
    orch.report(0, 0, rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
    assert orch.report(1, 0, rp.Finished(rid, 0)) == []  # stage 1's runtime knows nothing of it
    assert orch.lifecycle.counters.dropped_stale == 1
