"""``bench/diffusion.py --quick`` runs end to end in a few seconds: the four cases, the random arrivals, and the
orchestrated images equal to the bare pipeline's (the benchmark asserts it), its last line in the agreed form."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "diffusion.py"


def test_the_diffusion_benchmark_runs_quick(capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(BENCH))["main"]
    figures = main(["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"diffusion: device=cpu bare_ips=[\d.]+ orchestrated_ips=[\d.]+ overhead_ratio=[\d.]+ "
                        r"batch=4", last), last  # fmt: skip
    assert figures["max_abs"] <= 1e-4 and figures["bare_ips"] > 0 and figures["orchestrated_ips"] > 0
    assert figures["overhead_ratio"] == pytest.approx(figures["bare_ips"] / figures["orchestrated_ips"])


def test_the_arrival_replay_runs_a_trace_through_both_batching_policies():
    bench = runpy.run_path(str(BENCH))
    trace = bench["poisson_trace"](4, 400.0)
    for batching in ("step", "request"):
        ips, latencies = bench["replay"](trace, 2, "cpu", 16, 2, batching)
        assert ips > 0 and len(latencies) == 4 and min(latencies) > 0
