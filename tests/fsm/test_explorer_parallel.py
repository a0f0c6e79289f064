"""The explorer across worker processes finds what one process finds: the same states, edges, shortest
counterexamples and liveness verdict, the same stop at a limit; and it leaves no worker behind."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from omni_fsm.cli import main as cli_main
from omni_fsm.cli.limits import _children
from omni_fsm.errors import InternalError
from omni_fsm.explore.explorer import Bound, Explorer, Report, UnsoundReduction, explore
from omni_fsm.explore.parallel import parallel_search

from . import faults
from .faults import B4_BOUND, SMALL

#: small bounds: one searched without the reduction, one with it and liveness, one with a dependent (a companion)
WHOLE = Bound(requests=2, stages=1, families=SMALL | {"failure", "control"})
LIVE = Bound(requests=2)
DEPENDENT = Bound(requests=1, stages=1, companions=1, max_tokens=1, families=SMALL | {"failure", "death"})


def same(report: Report) -> tuple[Any, ...]:
    """What must not depend on the number of processes (all of the report but the time and the evaluations)."""
    return (report.states, report.edges, report.violations, report.stuck, report.liveness_checked, report.verified,
            report.ended_states, report.depth, report.stopped, report.symmetry, report.reduction)  # fmt: skip


@pytest.mark.parametrize(("bound", "kw"), [
    pytest.param(WHOLE, {"reduction": False}, id="whole-state"),
    pytest.param(LIVE, {}, id="reduction-liveness"),
    pytest.param(DEPENDENT, {}, id="companion"),
    pytest.param(WHOLE, {"symmetry": True}, id="symmetry"),
])  # fmt: skip
def test_two_workers_find_what_one_process_finds(bound: Bound, kw: dict[str, Any]) -> None:
    one, two = explore(bound, **kw), explore(bound, workers=2, **kw)
    assert same(two) == same(one)
    assert one.states > 100 and one.edges > one.states and (one.liveness_checked or kw.get("symmetry"))
    assert sum(two.evaluations.values()) > 0


@pytest.mark.parametrize("reduction", [True, False], ids=["reduction", "whole-state"])
def test_a_cross_request_fault_is_found_alike_with_workers(reduction: bool) -> None:
    bound = Bound(requests=2, stages=1, families=SMALL | {"failure", "control"})
    one = explore(bound, faults.CROSS_FAILURE, reduction=reduction)
    two = explore(bound, faults.CROSS_FAILURE, reduction=reduction, workers=2)
    assert [c.invariant for c in one.violations] == ["ORCH-INV-206"]
    assert same(two) == same(one)


def test_a_liveness_counterexample_is_the_same_with_workers() -> None:
    spec = faults.b4_parked_needs_a_second_slot()
    one, two = explore(B4_BOUND, spec), explore(B4_BOUND, spec, workers=3)
    assert one.stuck is not None and one.stuck.events
    assert same(two) == same(one)


@pytest.mark.parametrize("limit", [1, 700, 4000])
def test_max_states_stops_where_one_process_stops(limit: int) -> None:
    one, two = explore(LIVE, max_states=limit), explore(LIVE, max_states=limit, workers=2)
    assert one.stopped is not None and not one.liveness_checked
    assert same(two) == same(one)


def test_a_stop_is_asked_where_one_process_asks_it() -> None:
    one = explore(LIVE, stop=lambda: "enough")
    two = explore(LIVE, stop=lambda: "enough", workers=2)
    assert one.stopped == "enough" and one.states < 4978
    assert same(two) == same(one)


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def _search(bound: Bound, pids: list[int], **kw: Any) -> Report:
    return parallel_search(Explorer(bound), 2, False, True, None, None, on_start=pids.extend, **kw)


def test_an_interrupted_run_leaves_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged on what this run started itself (its worker processes, the threads started from this thread while it
    ran): other tests' threads and children may come and go meanwhile."""
    pids: list[int] = []
    children, started, me = set(_children()), [], threading.current_thread()
    start = threading.Thread.start

    def recorded_start(thread: threading.Thread) -> None:
        if threading.current_thread() is me:
            started.append(thread)
        start(thread)

    def interrupt() -> str | None:
        assert len(pids) == 2 and not _gone(pids)  # the workers were running
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", recorded_start)
    with pytest.raises(KeyboardInterrupt):
        _search(LIVE, pids, stop=interrupt)
    monkeypatch.undo()
    assert _gone(pids) and not set(_children()) - children
    assert started  # the run's task queues started their feeder threads from here
    deadline = time.monotonic() + 5  # the task queues' feeder threads end once their queue is closed
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t.name for t in started if t.is_alive()]


def test_an_unsound_reduction_stops_the_run_and_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers are forked: the patched abstraction is theirs too, and the sample check raises there."""
    monkeypatch.setattr(Explorer, "_abstract", lambda self, gid: 0)
    pids: list[int] = []
    with pytest.raises(UnsoundReduction, match=r"^the reduction disagrees with the whole-state computation at state"):
        parallel_search(Explorer(Bound(requests=2, stages=1, capacity=1, families=SMALL | {"control"})), 2, False,
                        False, None, None, on_start=pids.extend)  # fmt: skip
    assert len(pids) == 2 and _gone(pids)


def test_a_worker_that_dies_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(self: Any, state: Any, symmetry: bool) -> None:
        os._exit(7)  # only workers verify: the coordinator never calls it

    monkeypatch.setattr(Explorer, "verify", die)
    pids: list[int] = []
    with pytest.raises(InternalError, match=r"explorer worker omni-fsm-explore-\d \(pid \d+\) ended unexpectedly "
                                            r"\(exit code 7\)"):  # fmt: skip
        _search(LIVE, pids)
    assert _gone(pids)


def _as_one(out: str, folder: Path) -> str:
    """Return ``out`` without what may differ: the time, the evaluations (summed over workers), the folder."""
    out = re.sub(r"seconds: [\d.]+  edges/s: [\d,]+|evaluations: .*|evaluations=\d+ seconds=[\d.]+ edges_per_s=\d+",
                 "", out)
    return out.replace(str(folder), "OUT").removesuffix(" workers=2\n").removesuffix("\n")


def test_the_cli_runs_workers_and_reports_as_one(capsys: Any, tmp_path: Path) -> None:
    args = ["explore", "--requests", "2", "--stages", "1", "--spec", "tests.fsm.faults:CROSS_FAILURE",
            "--families", ",".join(sorted(SMALL | {"failure"}))]  # fmt: skip
    assert cli_main([*args, "--out", str(tmp_path / "one")]) == 1
    one = capsys.readouterr().out
    assert cli_main([*args, "--out", str(tmp_path / "two"), "--workers", "2"]) == 1
    two = capsys.readouterr().out
    assert two.splitlines()[-1].endswith(" workers=2") and not one.splitlines()[-1].endswith(" workers=2")
    assert _as_one(two, tmp_path / "two") == _as_one(one, tmp_path / "one")
    assert "ORCH-INV-206: ended by a failure of request 0" in two
    assert (tmp_path / "two" / "counterexample-ORCH-INV-206.trace.jsonl").read_text() == \
        (tmp_path / "one" / "counterexample-ORCH-INV-206.trace.jsonl").read_text()


def test_the_cli_refuses_a_negative_worker_count(capsys: Any) -> None:
    assert cli_main(["explore", "--workers", "-1"]) == 2
    assert "--workers must be 0 (one per core) or more" in capsys.readouterr().err


def test_max_memory_counts_the_workers_and_stops_cleanly(capsys: Any, tmp_path: Path) -> None:
    before = set(_children())
    assert cli_main(["explore", "--requests", "2", "--max-memory", "1M", "--workers", "2", "--out", str(tmp_path)]) == 4
    out = capsys.readouterr().out
    assert "stopped early: --max-memory 1 MiB reached" in out
    assert out.splitlines()[-1].endswith(" workers=2 partial=yes")
    assert set(_children()) == before


def test_first_violation_stops_where_one_process_stops() -> None:
    spec = faults.cross_failure()
    bound = Bound(requests=2, stages=1, families=SMALL | {"failure"})
    one, two = explore(bound, spec, first_violation=True), explore(bound, spec, first_violation=True, workers=2)
    assert one.stopped == "the first violation found" and same(two) == same(one)
