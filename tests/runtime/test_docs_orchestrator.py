"""docs/orchestrator.md's Python examples run as written, and it names the commands it documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "orchestrator.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"orchestrator-md-block-{i}" for i in range(len(BLOCKS))])
def test_orchestrator_doc_example_runs(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/orchestrator.md", "exec"), {})


def test_orchestrator_doc_has_an_example() -> None:
    assert BLOCKS


@pytest.mark.parametrize("command", ["pytest -p omni_runtime.testing --omni-runtime=",
                                     "omni-run examples/pipeline.toml --trace out/demo.trace.jsonl",
                                     "omni-fsm check out/demo.trace.jsonl"])  # fmt: skip
def test_orchestrator_doc_names_the_commands(command: str) -> None:
    assert command in DOC
