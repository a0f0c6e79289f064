"""The demo runs clean, its trace passes ``omni-fsm check``, and the example pipeline loads.

Malformed pipeline files: ``test_pipeline_file.py``; bad options: ``test_cli_arguments.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import omni_fsm.cli
from omni_fsm.trace import read_trace
from omni_runtime import load_pipeline
from omni_runtime.apps.cli import main

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_demo_trace_passes_omni_fsm_check(tmp_path, capsys, loop):
    trace = tmp_path / "run.jsonl"
    rc = main([EXAMPLE, "--requests", "80", "--seed", "3", "--trace", str(trace), "--no-progress", "--loop", loop])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "invariants: all" in out and "outcomes by finish reason" in out
    assert omni_fsm.cli.main(["check", str(trace)]) == 0
    assert read_trace(trace).header.loop == loop  # the run's loop, named for ORCH-INV-303's pairing


def test_example_pipeline_loads():
    p = load_pipeline(EXAMPLE)
    assert [s.name for s in p.stages] == ["thinker", "talker", "image"]
    assert p.final == (False, True, True)
