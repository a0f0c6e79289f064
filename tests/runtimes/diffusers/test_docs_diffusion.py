"""docs/diffusion.md's example runs as written, and the figures it quotes are in the benchmark's own last-line
format."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "diffusion.md").read_text(encoding="utf-8")


def test_the_documented_example_runs(monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(ROOT)
    exec(compile(blocks[0], "docs/diffusion.md", "exec"), {})


def test_the_quoted_throughput_is_the_benchmarks_last_line():
    bench = (ROOT / "bench" / "diffusion_runtime.py").read_text(encoding="utf-8")
    assert 'print(f"diffusion_runtime: batch1_img_s=' in bench
    quoted = re.findall(r"^diffusion_runtime: batch1_img_s=([\d.]+) batched_img_s=([\d.]+) ratio=([\d.]+)$", DOC, re.M)
    assert len(quoted) == 1
    batch1, batched, ratio = map(float, quoted[0])
    assert abs(batched / batch1 - ratio) < 0.02
