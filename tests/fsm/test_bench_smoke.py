"""bench/fsm_step.py runs at a tiny size and prints its summary line; no timing is asserted."""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path
from types import ModuleType

from omni_fsm import SPEC
from omni_fsm.engine.compiled import CompiledTable

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fsm_step.py"
LINE = re.compile(r"fsm_step: fast_us=\d+\.\d{3} transitions_us=\d+\.\d{2} ratio=\d+\.\d bytes_per_request=\d+")


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fsm_step_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_prints_the_summary_line_last() -> None:
    out = io.StringIO()
    line = load_bench().run(events=1_000, batches=3, requests=1_000, out=out)
    assert LINE.fullmatch(line), line
    assert out.getvalue().splitlines()[-1] == line


def test_bench_workload_finds_a_row_for_every_event() -> None:
    bench = load_bench()
    recs, engine, pairs = bench.build_workload(1_000)
    bench.check_workload(CompiledTable(SPEC.rows).fire, recs, engine, pairs)  # raises on a miss
    assert all(rec.state is bench.START for rec in recs)
