"""The explorer computes what it says: successors on the whole state (the reduction checked against that),
every core and monitor call counted, a cross-request fault seen, a clean stop at a limit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import omni_fsm.explore.explorer as explorer_module
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.limits import MEMORY_EVERY, Limits
from omni_fsm.engine.core import Lifecycle
from omni_fsm.explore.explorer import Bound, Explorer, UnsoundReduction, explore
from omni_fsm.explore.search import ASK_EVERY, search
from omni_fsm.invariants import Monitor

from . import faults
from .faults import SMALL

ROOT = Path(__file__).resolve().parents[2]
#: every bound the explorer tests use, small enough to run without the reduction too
BOUNDS = [
    Bound(requests=2, stages=1, families=SMALL | {"failure", "control"}),
    Bound(requests=2, stages=2, families=SMALL | {"failure", "death", "shutdown"}),
    Bound(requests=1, stages=1, n=2, families=SMALL | {"failure", "death", "late"}),
    Bound(requests=1, companions=1, families=SMALL | {"failure", "abort_race"}),
    Bound(requests=2, stages=1, capacity=1, families=SMALL | {"park", "control"}),
    Bound(requests=1, families=frozenset(explorer_module.FAMILIES)),
]


def _summary(report: Any) -> tuple[Any, ...]:
    return (report.states, report.edges, tuple((c.invariant, len(c.events)) for c in report.violations),
            report.stuck is None)


#: (bound, spec) pairs: every bound on the project's table and on B1; the cross-request fault on the bounds without
#: dependents (with them, the fault fails a parent before its dependent's notice reaches it: the core stops)
CASES = [pytest.param(b, s, id=f"{name}-r{b.requests}s{b.stages}n{b.n}c{b.companions}")
         for name, s in (("spec", None), ("cross-failure", faults.CROSS_FAILURE),
                         ("b1", faults.b1_parent_abort_misses_children()))
         for b in BOUNDS if not (name == "cross-failure" and b.block > 1)]  # fmt: skip


@pytest.mark.parametrize(("bound", "spec"), CASES)
def test_reduced_and_whole_state_runs_agree(bound: Bound, spec: Any) -> None:
    kw = {} if spec is None else {"spec": spec}
    reduced, whole = explore(bound, reduction=True, **kw), explore(bound, reduction=False, **kw)
    assert _summary(reduced) == _summary(whole)
    assert reduced.verified >= 1 and whole.verified == 0 and not whole.reduction


@pytest.mark.covers("ORCH-INV-206")
def test_a_failure_that_reaches_another_request_is_found_with_and_without_the_reduction() -> None:
    bound = Bound(requests=2, stages=1, families=SMALL | {"failure"})
    for reduction in (True, False):
        report = explore(bound, faults.CROSS_FAILURE, reduction=reduction)
        assert [c.invariant for c in report.violations] == ["ORCH-INV-206"]
        assert [type(e).__name__ for e in report.violations[0].events] == ["Submit", "Submit", "StageFailed"]
    assert explore(bound).ok  # the project's table keeps a failure to its request


def test_the_cli_names_orch_inv_206_for_the_cross_failure_spec(tmp_path: Path) -> None:
    """The command of the issue, through the installed console script (the current directory is not on its path)."""
    script = Path(sys.executable).with_name("omni-fsm")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "omni_fsm.cli"]
    run = subprocess.run([*command, "explore", "--requests", "2", "--spec",
                          "tests.fsm.faults:CROSS_FAILURE", "--out", str(tmp_path), "--no-liveness"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "\nORCH-INV-206: ended by a failure of request " in run.stdout
    assert run.stderr.startswith("estimate: about ")
    assert (tmp_path / "counterexample-ORCH-INV-206.trace.jsonl").exists()
    assert re.fullmatch(r"explore: states=\d+ edges=\d+ evaluations=\d+ seconds=[\d.]+ edges_per_s=\d+ "
                        r"reachable_invariants=21/29", run.stdout.splitlines()[-1])


def test_a_reduction_that_disagrees_with_the_whole_state_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """An abstraction that forgets the engine part entirely reuses steps where they do not hold: the sample
    check sees it and raises, rather than the run reporting what it did not compute."""
    monkeypatch.setattr(Explorer, "_abstract", lambda self, gid: 0)
    with pytest.raises(UnsoundReduction, match=r"^the reduction disagrees with the whole-state computation at state"
                       ) as err:  # fmt: skip
        explore(Bound(requests=2, stages=1, capacity=1, families=SMALL | {"control"}), liveness=False)
    said = str(err.value).splitlines()
    # the successor states that differ are shown: each side's, as the core's and the monitor's facts
    assert said[0].endswith("engine.slots_used=(1,), engine.sleep_level=0, engine.sleep_tags=frozenset(), "
                            "engine.pending_rpcs=(), monitor.engine=RUNNING, monitor.slots=(1,), monitor.rpcs=(), "
                            "monitor.stopped=0, request 0.state=PREEMPTED, view 0.stage=0, view 0.status=PREEMPTED, "
                            "request 1.state=RUNNING, view 1.stage=0, view 1.status=RUNNING, view 1.slot=0"), said[0]
    assert re.fullmatch(r"  reduced: \(\d+, \d+, \d+\): engine.state=RUNNING, engine.slots_used=\(2,\), .*"
                        r"request 0.state=RUNNING, .*", said[1]), said[1]
    assert said[2:] == ["  whole: none (the core refused the step)", "  explore with --no-reduction"]


def test_an_unsound_reduction_shows_what_differs_between_the_successors() -> None:
    xp = Explorer(Bound(requests=2, stages=1, capacity=1, families=SMALL))
    state = xp.initial()
    (family, step, nxt, violations, _), *_ = xp.full_successors(state)
    other = next(n for _, _, n, _, _ in xp.full_successors(nxt) if n != nxt)
    with pytest.raises(UnsoundReduction) as err:
        xp._unsound(state, {(family, step, other): frozenset()}, {(family, step, nxt): frozenset(violations)})
    said = str(err.value)
    assert f"\n  reduced: {other}: " in said and f"\n  whole: {nxt}: " in said
    assert "\n  they differ in " in said and "request 0.state: reduced " in said, said


def test_every_core_and_monitor_call_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"core": 0, "monitor": 0, "finish": 0}

    class CountingCore(Lifecycle):
        def handle(self, event: Any) -> Any:
            calls["core"] += 1
            return super().handle(event)

    class CountingMonitor(Monitor):
        def step(self, event: Any, outputs: Any) -> Any:
            calls["monitor"] += 1
            return super().step(event, outputs)

        def finish(self) -> Any:
            calls["finish"] += 1
            return super().finish()

    monkeypatch.setattr(explorer_module, "Lifecycle", CountingCore)
    monkeypatch.setattr(explorer_module, "Monitor", CountingMonitor)
    for reduction in (True, False):
        calls.update(core=0, monitor=0, finish=0)
        report = explore(Bound(requests=2, stages=1, families=SMALL | {"failure"}), reduction=reduction)
        assert report.evaluations == {"core": calls["core"], "monitor": calls["monitor"] + calls["finish"]}
        assert calls["finish"] == report.ended_states > 1
    assert report.evaluations["core"] >= report.edges  # without the reduction: one call per edge at least


def test_end_of_history_rules_run_where_a_request_was_never_submitted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finish rule broken in the empty engine (one request never submitted) is reported: the end-of-history
    rules run on every state where nothing is live, not only where every request was submitted."""
    monkeypatch.setattr(Monitor, "finish", lambda self: [_violation()])
    report = explore(Bound(requests=2, stages=1, families=SMALL), liveness=False)
    cx = next(c for c in report.violations if c.invariant == "ORCH-INV-208")
    assert cx.events == ()


def _violation() -> Any:
    from omni_fsm.invariants import Violation

    return Violation("ORCH-INV-208", "request_ends", -1, 0, "a request never ended")


def test_max_states_stops_cleanly_and_says_what_it_covered(capsys: Any, tmp_path: Path) -> None:
    code = cli_main(["explore", "--requests", "2", "--max-states", "500", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 4  # partial: a code of its own
    assert re.search(r"stopped early: --max-states 500 reached; covered 5\d\d states, every history of up to \d+ "
                     r"steps; liveness not checked", out), out
    assert re.search(r"\npartial: 5\d\d states, [\d,]+ edges, [\d,]+ evaluations, 0 violations found so far, about "
                     r"\d+% of the estimated [\d,]+ states\n", out), out
    assert out.splitlines()[-1].startswith("explore: states=5") and out.splitlines()[-1].endswith(" partial=yes")


def test_max_memory_stops_cleanly(capsys: Any, tmp_path: Path) -> None:
    code = cli_main(["explore", "--requests", "2", "--max-memory", "1M", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 4 and "stopped early: --max-memory 1 MiB reached" in out, out
    assert "liveness not checked" in out


@pytest.mark.parametrize(("spec", "says"), [
    ("tests.fsm.faults", "expected PKG.MOD:NAME"),
    ("tests.fsm.nothing_here:X", "cannot import tests.fsm.nothing_here: ModuleNotFoundError"),
    ("tests.fsm.faults:SMALL", "tests.fsm.faults has no Spec named SMALL (found frozenset)"),
])
def test_a_spec_that_is_not_one_is_refused(capsys: Any, spec: str, says: str) -> None:
    assert cli_main(["explore", "--spec", spec]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("size", ["0", "x", "-5M", "5Q"])
def test_a_memory_limit_that_is_not_one_is_refused(capsys: Any, size: str) -> None:
    assert cli_main(["explore", f"--max-memory={size}"]) == 2
    assert "--max-memory wants a size such as 500M or 4G" in capsys.readouterr().err


def test_search_stops_at_a_reason_the_caller_gives() -> None:
    xp = Explorer(Bound(requests=2))
    report = search(xp, False, True, None, None, None, lambda: "enough")
    assert report.stopped == "enough" and not report.liveness_checked and report.states >= ASK_EVERY


def test_max_seconds_stops_with_the_report_so_far(capsys: Any, tmp_path: Path) -> None:
    code = cli_main(["explore", "--requests", "2", "--max-seconds", "0.2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 4 and "stopped early: --max-seconds 0.2 reached" in out and "\npartial: " in out, out


def test_a_limit_says_why_once_and_then_again() -> None:
    """The deadline counts from ``start()``; memory is read at most every ``MEMORY_EVERY`` seconds; once a reason was
    given it is given again (a sweep's next bound stops at once)."""
    now, reads = [0.0], [0]

    def memory() -> int:
        reads[0] += 1
        return 10 * 2**20

    limits = Limits(max_seconds=5, max_memory=2**30, clock=lambda: now[0], memory=memory).start()
    assert limits() is None and limits() is None and reads == [1]
    now[0] = MEMORY_EVERY
    assert limits() is None and reads == [2]
    now[0] = 5.0
    assert limits() == "--max-seconds 5 reached" and limits() == "--max-seconds 5 reached"
    small = Limits(max_memory=2**20, clock=lambda: 0.0, memory=memory).start()
    assert small() == "--max-memory 1 MiB reached (10 MiB used)"


def test_first_violation_stops_where_the_first_counterexample_is_found() -> None:
    bound = Bound(requests=2, stages=1, families=SMALL | {"failure"})
    whole, first = explore(bound, faults.CROSS_FAILURE), explore(bound, faults.CROSS_FAILURE, first_violation=True)
    assert first.stopped == "the first violation found" and not first.liveness_checked
    assert first.states < whole.states and [c.events for c in first.violations] == [c.events for c in whole.violations]
