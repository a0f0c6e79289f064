"""The demo runs clean, its trace passes ``omni-fsm check``, and bad pipelines say FILE:LINE."""

from __future__ import annotations

from pathlib import Path

import pytest

import omni_fsm.cli
from omni_runtime import PipelineError, load_pipeline
from omni_runtime.cli import main

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_demo_trace_passes_omni_fsm_check(tmp_path, capsys, loop):
    trace = tmp_path / "run.jsonl"
    rc = main([EXAMPLE, "--requests", "80", "--seed", "3", "--trace", str(trace), "--no-progress", "--loop", loop])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "invariants: all" in out and "outcomes by finish reason" in out
    assert omni_fsm.cli.main(["check", str(trace)]) == 0


def test_example_pipeline_loads():
    p = load_pipeline(EXAMPLE)
    assert [s.name for s in p.stages] == ["thinker", "talker", "image"]
    assert p.final == (False, True, True)


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("[[stages]]\nkind = 'ar'\nfinal = true\nreplicas = 0\n", 4, "replicas must be at least 1"),
        ("[[stages]]\nkind = 'gpu'\nfinal = true\n", 2, "unknown kind"),
        ("[[stages]]\nkind = 'ar'\nfinal = false\n", 3, "last stage must have final = true"),
        ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[[stages]]\nkind = 'ar'\nfinal = true\nadapter = 'x'\n", 8,
         "unknown adapter"),
        ("[[stages]]\nkind = 'ar'\nfinal = true\ncolour = 1\n", 4, "unknown stage key"),
        ("[[stages]]\nkind = 'ar\n", 2, "invalid TOML"),
    ],
)
def test_malformed_pipeline_names_file_and_line(tmp_path, capsys, text, line, why):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PipelineError) as info:
        load_pipeline(str(path))
    assert str(info.value).startswith(f"{path}:{line}: ") and why in str(info.value)
    assert main([str(path), "--no-progress", "--trace", str(tmp_path / "t.jsonl")]) == 2
    assert f"{path}:{line}:" in capsys.readouterr().err
