"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"readme-block-{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2
