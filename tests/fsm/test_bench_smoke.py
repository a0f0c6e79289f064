"""bench/fsm_step.py runs at a tiny size and prints its summary line; no timing is asserted."""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fsm_step.py"
LINE = re.compile(r"fsm_step: handle_us=\d+\.\d{3} transitions_us=\d+\.\d{2} ratio=\d+\.\d bytes_per_request=\d+")
SAME_WORK = re.compile(r"  same work: all 2 paths made the same [\d,]+ observations, event by event")


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fsm_step_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_prints_the_summary_line_last_after_the_paths_agreed() -> None:
    out = io.StringIO()
    line = load_bench().run(mix_requests=10, repeats=2, requests=1_000, out=out)
    assert LINE.fullmatch(line), line
    lines = out.getvalue().splitlines()
    assert lines[-1] == line
    assert any(SAME_WORK.fullmatch(printed) for printed in lines), lines


def test_bench_quick_run_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, check=False,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert LINE.fullmatch(done.stdout.splitlines()[-1]), done.stdout


def test_both_paths_observe_the_same_for_every_event_of_the_mix() -> None:
    bench = load_bench()
    mix = bench.record_mix(10)
    fast, slow = bench.observe(mix), bench.observe(mix, reference=True)
    assert len(fast) == len(mix) and any(fast)
    assert slow == fast
    assert bench.check_same_work(mix) == sum(map(len, fast))


def test_the_reference_core_asks_the_transitions_tables() -> None:
    """The agreement above compares the two paths only if the reference core really runs the reference tables."""
    bench = load_bench()
    core = bench.fresh_core(reference=True)
    assert (core.table, core.engine_table) == (bench.REFERENCE.request, bench.REFERENCE.engine)
    assert type(bench.fresh_core().table) is not type(core.table)


def test_a_disagreement_is_raised_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench()
    mix = bench.record_mix(10)
    honest = bench.observe

    def skewed(events: list[object], reference: bool = False) -> list[list[object]]:
        seen = honest(events, reference)
        return [*seen[:-1], [*seen[-1], "extra"]] if reference else seen

    monkeypatch.setattr(bench, "observe", skewed)
    with pytest.raises(AssertionError, match="reference observed"):
        bench.check_same_work(mix)


def test_the_two_paths_run_what_they_are_named_for() -> None:
    """Plain: the core's own candidate rows of each (event type, state), looked up and run; reference: every row
    asked of the ``transitions`` tables."""
    bench = load_bench()
    plain, reference = bench.fresh_core(), bench.fresh_core("reference")
    assert plain._asked is None and plain.table is plain._own_table
    assert reference._asked is bench.REFERENCE.request is reference.table
