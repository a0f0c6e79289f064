"""Progress on stderr: ``omni-fsm explore`` writes a plain line every few seconds when stderr is
not a terminal (a log, CI), also while liveness is checked; ``omni-fsm check`` writes one now
and then on a long trace."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

import omni_fsm.explore as explore_cli
import omni_fsm.tracecheck as tracecheck
from omni_fsm import Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm.cli import main as cli_main
from omni_fsm.explore import ProgressLine
from omni_fsm.trace import write_trace

PLAIN = re.compile(r"(exploring|checking liveness): [\d,]+ states, [\d,]+ edges, \d+ s")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def wait_for_lines(stream: io.StringIO, count: int) -> None:
    deadline = time.monotonic() + 10
    while stream.getvalue().count("exploring:") < count and time.monotonic() < deadline:
        time.sleep(0.005)


def test_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressLine(stream, every=0.01) as progress:
        progress.update(1234, 56789, 0.5)
        wait_for_lines(stream, 2)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and "\r" not in stream.getvalue()
    assert all(PLAIN.fullmatch(line) for line in lines), lines
    assert lines[-1].startswith("exploring: 1,234 states, 56,789 edges, ")


def test_lines_keep_coming_without_updates_as_in_the_liveness_phase() -> None:
    stream = io.StringIO()
    with ProgressLine(stream, every=0.01) as progress:
        progress.update(10, 20, 0.1)  # the search's last report; liveness then reports nothing
        wait_for_lines(stream, 3)
    assert stream.getvalue().count("exploring: 10 states, 20 edges, ") >= 3


def test_the_line_names_the_liveness_phase_once_the_search_is_over() -> None:
    stream = io.StringIO()
    with ProgressLine(stream, every=0.01) as progress:
        progress.update(10, 20, 0.1)
        progress.set_phase("checking liveness")
        deadline = time.monotonic() + 10
        while "checking liveness:" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.005)
    assert "checking liveness: 10 states, 20 edges, " in stream.getvalue()


def test_the_explorer_reports_its_final_counts_then_the_liveness_phase() -> None:
    from omni_fsm._explorer import Bound, explore

    seen: list[object] = []
    report = explore(Bound(requests=1), progress=lambda s, e, t: seen.append((s, e)), on_phase=seen.append)
    assert seen[-2:] == [(report.states, report.edges), "checking liveness"]


def test_one_line_rewritten_in_place_on_a_terminal() -> None:
    stream = Terminal()
    with ProgressLine(stream, every=0.01) as progress:
        progress.update(3, 4, 0.1)
        wait_for_lines(stream, 2)
    text = stream.getvalue()
    assert text.startswith("\rexploring: ") and text.endswith("\n") and text.count("\n") == 1


def test_no_line_for_a_quick_run() -> None:
    stream = Terminal()
    with ProgressLine(stream, every=60):
        pass
    assert stream.getvalue() == ""


def test_explore_cli_writes_plain_progress_lines_to_a_non_terminal(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(explore_cli, "PROGRESS_EVERY", 0.02)
    assert cli_main(["explore", "--requests", "2", "--stages", "1"]) == 0
    out, err = capsys.readouterr()
    assert err and "\r" not in err
    assert all(PLAIN.fullmatch(line) for line in err.splitlines()), err
    assert out.rstrip().endswith("violations: 0")


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
