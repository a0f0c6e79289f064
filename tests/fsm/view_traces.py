"""Traces the ``omni-fsm view`` tests render, and what the tests read back from a trace file on their own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from omni_fsm.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
#: The smallest bound at which ``tests.fsm.faults:CROSS_FAILURE`` breaks ORCH-INV-206 (a fraction of a second).
CROSS_FAILURE_ARGS = ["explore", "--requests", "2", "--stages", "1", "--families",
                      "submit,schedule,output,finish,abort,failure", "--spec", "tests.fsm.faults:CROSS_FAILURE",
                      "--no-liveness"]  # fmt: skip


def request_ids(path: Path) -> set[int]:
    """Return the request ids a trace's lines name (``rid`` of at least 0), read straight from its JSON lines."""
    rids = set()
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        obj = json.loads(line)
        if isinstance(obj.get("rid"), int) and obj["rid"] >= 0:
            rids.add(obj["rid"])
    return rids


def cross_failure_counterexample(folder: Path) -> Path:
    """Return the counterexample trace ``omni-fsm explore --spec tests.fsm.faults:CROSS_FAILURE --out`` writes."""
    assert cli_main([*CROSS_FAILURE_ARGS, "--out", str(folder)]) == 1  # 1: a violation found, its trace written
    return folder / "counterexample-ORCH-INV-206.trace.jsonl"


def demo_trace(folder: Path, requests: int = 6) -> Path:
    """Return the trace of a short run of the demo pipeline (``omni-run examples/pipeline.toml --trace``)."""
    command = [sys.executable, "-m", "omni_runtime.apps.cli"]  # omni-run, whatever console scripts are installed
    path = folder / "demo.trace.jsonl"
    run = subprocess.run([*command, str(ROOT / "examples" / "pipeline.toml"), "--requests", str(requests),
                          "--concurrency", "4", "--no-progress", "--trace", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    return path
