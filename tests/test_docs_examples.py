"""The documents' Python examples run as written (from the repository root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: document -> the fewest Python examples it must show
DOCS = {"README.md": 2, "docs/orchestrator.md": 1}


def _blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(encoding="utf-8"), re.S)


EXAMPLES = [pytest.param(doc, code, id=f"{doc}-block-{i}") for doc in DOCS for i, code in enumerate(_blocks(doc))]


@pytest.mark.parametrize(("doc", "code"), EXAMPLES)
def test_doc_example_runs(doc: str, code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    exec(compile(code, doc, "exec"), {})


@pytest.mark.parametrize(("doc", "fewest"), DOCS.items())
def test_doc_has_examples(doc: str, fewest: int) -> None:
    assert len(_blocks(doc)) >= fewest
