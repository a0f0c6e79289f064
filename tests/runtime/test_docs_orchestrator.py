"""docs/orchestrator.md names the commands it documents (its examples run in tests/test_docs_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "orchestrator.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["pytest -p omni_runtime.testing --omni-runtime=",
                                     "omni-run --trace out/demo.trace.jsonl",
                                     "omni-fsm check out/demo.trace.jsonl"])  # fmt: skip
def test_orchestrator_doc_names_the_commands(command: str) -> None:
    assert command in DOC
