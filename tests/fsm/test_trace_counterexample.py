"""The explorer's counterexamples as traces: complete (end marker written), replayed on the table
the explorer ran, every event or an error naming the one that cannot be replayed; a LIVENESS
counterexample is rejected by ``omni-fsm check`` through the end-of-history rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import omni_fsm.cli.explore as explore_cli
from omni_fsm import events as ev
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.explore import replay, write_counterexample
from omni_fsm.errors import InternalError
from omni_fsm.explore.explorer import Bound, Counterexample, Report, explore

from . import faults
from .faults import B4_BOUND

#: Not a path the core can take: the second submit of a tracked id is refused.
UNREPLAYABLE = Counterexample("ORCH-INV-100", "made up", (ev.Submit(1), ev.Scheduled(1, 0), ev.Submit(1)))


def test_liveness_counterexample_is_a_complete_trace_check_rejects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    spec = faults.b4_parked_needs_a_second_slot()
    stuck = explore(B4_BOUND, spec=spec).stuck
    assert stuck is not None and stuck.invariant == "LIVENESS"
    path = tmp_path / "counterexample-LIVENESS.trace.jsonl"
    write_counterexample(path, B4_BOUND, stuck, spec)
    lines = path.read_text().splitlines()
    assert lines[-1] == '{"end":true}'
    assert sum(line.startswith('{"in":') for line in lines) == len(stuck.events)  # every event replayed
    capsys.readouterr()
    assert cli_main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    end = f"{path}:{len(lines)}:"  # the stuck request never ends: the end-of-history rules say so at the end marker
    assert f"{end} ORCH-INV-101 (one_terminal_per_request) request 0: 0 terminals at the end" in out
    assert f"{end} ORCH-INV-208 (no_state_after_terminal) request 0: state still kept at the end" in out


def test_replay_names_the_event_the_core_refuses() -> None:
    with pytest.raises(InternalError, match=r"^cannot replay event 3 of 3, Submit\(rid=1.*id already tracked"):
        replay(Bound(requests=1, stages=1), UNREPLAYABLE.events)


def test_unreplayable_counterexample_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cx.trace.jsonl"
    with pytest.raises(InternalError, match=r"^counterexample ORCH-INV-100: cannot replay event 3 of 3"):
        write_counterexample(path, Bound(requests=1, stages=1), UNREPLAYABLE)
    assert list(tmp_path.iterdir()) == []


def _found(cx: Counterexample) -> Callable[..., Report]:
    def fake_explore(bound: Bound, *_: object, **__: object) -> Report:
        return Report(1, 1, 0.0, ("ORCH-INV-100",), False, None, (cx,), False)

    return fake_explore


def test_explore_cli_says_in_one_line_when_a_counterexample_cannot_be_replayed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(explore_cli, "explore", _found(UNREPLAYABLE))
    code = cli_main(["explore", "--requests", "1", "--stages", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3
    assert err.splitlines()[-1].startswith("omni-fsm explore: internal error: counterexample ORCH-INV-100: "
                                           "cannot replay event 3 of 3, Submit(rid=1")
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_explore_cli_says_in_one_line_when_out_is_unwritable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    searched: list[int] = []
    monkeypatch.setattr(explore_cli, "explore", lambda *a, **k: searched.append(1))
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = cli_main(["explore", "--requests", "1", "--stages", "1", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert code == 2 and searched == []  # refused before the search, not after it
    assert err.splitlines()[-1] == f"omni-fsm explore: --out {blocker / 'sub'}: Not a directory"


def test_main_writes_a_complete_counterexample_that_check_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    cx = Counterexample("ORCH-INV-100", "made up", (ev.Submit(1), ev.Scheduled(1, 0)))
    monkeypatch.setattr(explore_cli, "explore", _found(cx))
    code = cli_main(["explore", "--requests", "1", "--stages", "1", "--final-stages", "1", "--n", "1",
                     "--companions", "0", "--capacity", "1", "--max-tokens", "1", "--families", "submit",
                     "--no-liveness", "--out", str(tmp_path)])  # fmt: skip
    assert code == 1
    path = tmp_path / "counterexample-ORCH-INV-100.trace.jsonl"
    assert f"trace written: {path}" in capsys.readouterr().out
    assert path.read_text().splitlines()[-1] == '{"end":true}'
    assert cli_main(["check", str(path)]) == 1  # the request is left open at the end: ORCH-INV-101
