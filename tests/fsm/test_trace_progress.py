"""Progress on stderr: ``omni-fsm explore`` writes a plain line every few seconds when stderr is
not a terminal (a log, CI), also while liveness is checked; ``omni-fsm check`` writes one now
and then on a long trace."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

import omni_fsm.cli.explore_report as explore_report
import omni_fsm.trace.check as tracecheck
from omni_fsm import Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.explore import ProgressLine
from omni_fsm.trace import write_trace

PLAIN = re.compile(r"(exploring|checking liveness): [\d,]+ states \([\d,]+/s\), [\d,]+ edges, \d+ s, [\d,]+ MiB")
MIB_47 = 47 * 2**20


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_off_a_terminal_once_every_interval() -> None:
    stream, clock = io.StringIO(), Clock()
    with ProgressLine(stream, every=5.0, clock=clock, memory=lambda: MIB_47) as progress:
        for t, states in ((1.0, 10), (5.0, 1234), (6.0, 1300), (10.0, 2000)):
            clock.now = t
            progress.update(states, states * 2, t)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and all(PLAIN.fullmatch(line) for line in lines), lines
    assert lines == ["exploring: 1,234 states (247/s), 2,468 edges, 5 s, 47 MiB",
                     "exploring: 2,000 states (200/s), 4,000 edges, 10 s, 47 MiB"]


def test_the_line_names_the_liveness_phase_once_the_search_is_over() -> None:
    stream, clock = io.StringIO(), Clock()
    with ProgressLine(stream, every=1.0, clock=clock, memory=lambda: MIB_47) as progress:
        progress.set_phase("checking liveness")
        clock.now = 2.0
        progress.update(10, 20, 2.0)
    assert stream.getvalue() == "checking liveness: 10 states (5/s), 20 edges, 2 s, 47 MiB\n"


def test_the_explorer_keeps_reporting_through_the_liveness_check() -> None:
    from omni_fsm.explore.explorer import FAMILIES, Bound, explore

    seen: list[object] = []
    report = explore(Bound(requests=2, families=FAMILIES), progress=lambda s, e, t: seen.append((s, e)),
                     on_phase=seen.append)  # fmt: skip
    after = seen[seen.index("checking liveness") + 1 :]
    assert after and set(after) == {(report.states, report.edges)}  # the search's final counts, again and again
    assert seen[seen.index("checking liveness") - 1] == (report.states, report.edges)


def test_one_line_rewritten_in_place_on_a_terminal() -> None:
    stream, clock = Terminal(), Clock()
    with ProgressLine(stream, every=1.0, clock=clock, memory=lambda: MIB_47) as progress:
        for t in (1.0, 2.0):
            clock.now = t
            progress.update(3, 4, t)
    text = stream.getvalue()
    assert text == ("\rexploring: 3 states (3/s), 4 edges, 1 s, 47 MiB"
                    "\rexploring: 3 states (2/s), 4 edges, 2 s, 47 MiB\n")


def test_no_line_for_a_quick_run() -> None:
    stream = Terminal()
    with ProgressLine(stream, every=60) as progress:
        progress.update(1, 1, 0.0)
    assert stream.getvalue() == ""


def test_explore_cli_writes_plain_progress_lines_to_a_non_terminal(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(explore_report, "PROGRESS_EVERY", 0.02)
    assert cli_main(["explore", "--requests", "2", "--stages", "1"]) == 0
    out, err = capsys.readouterr()
    assert err and "\r" not in err
    first, *lines = err.splitlines()
    assert first.startswith("estimate: about ") and all(PLAIN.fullmatch(line) for line in lines), err
    assert "\nviolations: 0\n" in out and out.splitlines()[-1].startswith("explore: states=")


def test_check_writes_a_progress_line_on_a_long_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(tracecheck, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(tracecheck, "PROGRESS_EVERY", 0.0)
    kinds, final = (StageKind.AR,), (True,)
    lc = Lifecycle(kinds, final, 1)
    inputs = [e for rid in range(1, 401) for e in (ev.Submit(rid), ev.Abort(rid), ev.AbortDone(rid, 0))]
    path = tmp_path / "long.jsonl"
    write_trace(path, kinds, final, 1, [(e, lc.handle(e)) for e in inputs])
    assert cli_main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: 1200 steps, 400 requests, 0 violations\n"
    assert re.fullmatch(rf"{re.escape(str(path))}: checking: 1,024 steps, line [\d,]+, \d+ s\n", err), err


def test_check_writes_no_progress_line_on_a_short_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds, final = (StageKind.AR,), (True,)
    lc = Lifecycle(kinds, final, 1)
    path = tmp_path / "short.jsonl"
    write_trace(path, kinds, final, 1, [(e, lc.handle(e)) for e in (ev.Submit(1), ev.Abort(1), ev.AbortDone(1, 0))])
    assert cli_main(["check", str(path)]) == 0
    assert capsys.readouterr().err == ""
