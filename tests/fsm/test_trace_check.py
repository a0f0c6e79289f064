"""``omni-fsm check``: exit 0 clean, 1 violations (with invariant, request, line, context),
2 malformed input (``FILE:LINE: reason``), 3 internal error, 4 incomplete (no end marker, unless
``--allow-incomplete``); and the documented example runs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from omni_fsm import FinishReason, Lifecycle, Outcome, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.cli import main as cli_main
from omni_fsm.invariants import Monitor
from omni_fsm.trace import TraceHeader, write_trace
from omni_fsm.trace.check import Recent

KINDS = (StageKind.AR, StageKind.AR, StageKind.DIFFUSION)
FINAL = (True, False, True)
DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"
Steps = list[tuple[ev.Event | None, list[ob.Observation]]]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def drive(*inputs: ev.Event, kinds: tuple[StageKind, ...] = KINDS, final: tuple[bool, ...] = FINAL) -> Steps:
    lc = Lifecycle(kinds, final, 2)
    return [(e, lc.handle(e)) for e in inputs]


#: a step after the one a test judges, in a trace without its end marker (whose last step is not judged): a report
#: about a request never seen, dropped, as the core drops it
LATER = (ev.StageOutput(42, 0), [ob.Dropped(42, "StageOutput", "unknown")])


def one_request_to_the_end() -> Steps:
    return drive(ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
                 ev.Scheduled(1, 1), ev.StageFinished(1, 1), ev.Scheduled(1, 2), ev.StageFinished(1, 2))  # fmt: skip


def test_clean_trace_exits_0_with_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "clean.jsonl"
    write_trace(path, KINDS, FINAL, 2, one_request_to_the_end())
    assert run(capsys, str(path)) == (0, f"{path}: 8 steps, 1 requests, 0 violations\n", "")


def test_second_terminal_exits_1_naming_invariant_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = one_request_to_the_end()
    again = ob.Emitted(1, 2, finished=True, outcome=Outcome.FINISHED, reason=FinishReason.STOP)
    steps.append((ev.StageFinished(1, 2), [ob.Dropped(1, "StageFinished", "unknown"), again]))
    path = tmp_path / "twice.jsonl"
    write_trace(path, KINDS, FINAL, 2, steps)
    line = len(path.read_text().splitlines()) - 3  # the late stage_finished: before its 2 outputs and the end
    code, out, err = run(capsys, str(path))
    assert (code, err) == (1, "")
    assert f"{path}:{line}: ORCH-INV-101 (one_terminal_per_request) request 1: a second terminal" in out
    assert f"    {line}: " + '{"in":"stage_finished","rid":1,"stage":2,"replica":0,"stop":"stop"}' in out
    assert f"{path}:{line + 3}: ORCH-INV-101 (one_terminal_per_request) request 1: 2 terminals at the end" in out
    assert out.endswith(f"{path}: 9 steps, 1 requests, 3 violations\n")  # and ORCH-INV-208: no release


def test_violation_context_shows_the_requests_last_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = drive(ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0))
    steps.append((ev.StageOutput(1, 0, 1), [ob.Forwarded(1, 0, 2)]))  # routed before the stage finished, skipping
    path = tmp_path / "route.jsonl"
    write_trace(path, KINDS, FINAL, 2, [*steps, LATER], complete=False)
    code, out, _ = run(capsys, str(path), "--context", "2")
    assert code == 1
    assert "ORCH-INV-001 (routing_only_after_stage_finish) request 1" in out
    assert "ORCH-INV-002 (forward_to_next_logical_stage) request 1" in out
    block = out.split("\n  recent lines of the request 1:\n")[1].splitlines()[:2]
    assert [json.loads(line.split(": ", 1)[1])["in" if i == 0 else "out"] for i, line in enumerate(block)] == [
        "stage_output", "forwarded"]  # fmt: skip
    assert '"rid":5' not in out
    assert "end-of-history rules not applied" in out


def test_context_0_shows_no_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "route.jsonl"
    write_trace(path, KINDS, FINAL, 2, [(ev.Submit(1), [ob.Submitted(1), ob.Dispatched(1, 1)]), LATER], complete=False)
    code, out, _ = run(capsys, str(path), "--context", "0")
    assert code == 1
    assert "AR-INV-002" in out
    assert "recent lines" not in out


def test_end_marker_applies_end_of_history_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = drive(ev.Submit(1), ev.Scheduled(1, 0))
    path = tmp_path / "open.jsonl"
    write_trace(path, KINDS, FINAL, 2, steps, complete=False)
    assert run(capsys, str(path), "--allow-incomplete")[0] == 0
    write_trace(path, KINDS, FINAL, 2, steps, complete=True)
    code, out, _ = run(capsys, str(path))
    assert code == 1
    assert f"{path}:7: ORCH-INV-101 (one_terminal_per_request) request 1: 0 terminals at the end" in out
    assert f"{path}:7: ORCH-INV-208 (no_state_after_terminal) request 1: state still kept at the end" in out


# -- incomplete traces: no end marker ------------------------------------------------------------

MISSING_END = (': incomplete trace: no end marker {"end": true} after the last line '
               "(cut off, or still being written); --allow-incomplete checks the steps present\n")
NO_END = " (no end marker: end-of-history rules not applied)\n"


def not_judged(line: int) -> str:
    """Return the summary's tail for a trace without its end marker whose last step starts at ``line``."""
    return f" (no end marker: end-of-history rules not applied; its last step (from line {line}) not judged: it may " \
           "be partial)\n"  # fmt: skip


def test_cut_off_trace_exits_4_naming_the_missing_end_marker(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = tmp_path / "cut.jsonl"
    write_trace(path, KINDS, FINAL, 2, one_request_to_the_end()[:3], complete=False)
    last = len(path.read_text().splitlines())
    code, out, err = run(capsys, str(path))
    assert (code, err) == (4, f"{path}:{last}{MISSING_END}")
    assert out == f"{path}: 2 steps, 1 requests, 0 violations{not_judged(last - 1)}"  # stage_output, its emitted


def test_header_only_trace_exits_4_at_line_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "head.jsonl"
    path.write_text(json.dumps(TraceHeader(KINDS, FINAL, 2).encode()) + "\n")
    code, _, err = run(capsys, str(path))
    assert (code, err) == (4, f"{path}:1{MISSING_END}")


def test_header_and_end_marker_is_a_clean_empty_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.jsonl"
    write_trace(path, KINDS, FINAL, 2, [])
    assert run(capsys, str(path)) == (0, f"{path}: 0 steps, 0 requests, 0 violations\n", "")


def test_allow_incomplete_judges_the_steps_present(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "growing.jsonl"
    write_trace(path, KINDS, FINAL, 2, one_request_to_the_end()[:3], complete=False)
    code, out, err = run(capsys, str(path), "--allow-incomplete")
    assert (code, err) == (0, "")
    assert out.endswith(f"0 violations{not_judged(len(path.read_text().splitlines()) - 1)}")
    path.write_text(json.dumps(TraceHeader(KINDS, FINAL, 2).encode()) + "\n")  # header only
    assert run(capsys, str(path), "--allow-incomplete") == (0, f"{path}: 0 steps, 0 requests, 0 violations{NO_END}", "")


@pytest.mark.parametrize("allow", [False, True])
def test_violations_in_a_cut_off_trace_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], allow: bool) -> None:
    path = tmp_path / "cut.jsonl"
    write_trace(path, KINDS, FINAL, 2, [(ev.Submit(1), [ob.Submitted(1), ob.Dispatched(1, 1)]), LATER], complete=False)
    code, out, err = run(capsys, str(path), *(["--allow-incomplete"] if allow else []))
    assert code == 1
    assert "AR-INV-002" in out
    assert err == ("" if allow else f"{path}:6{MISSING_END}")


def test_allow_incomplete_changes_nothing_for_a_complete_trace(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = tmp_path / "open.jsonl"
    write_trace(path, KINDS, FINAL, 2, drive(ev.Submit(1), ev.Scheduled(1, 0)))
    code, out, _ = run(capsys, str(path), "--allow-incomplete")
    assert code == 1
    assert "ORCH-INV-101 (one_terminal_per_request) request 1: 0 terminals at the end" in out


@pytest.mark.parametrize(("body", "line", "reason"), [
    ('{"in":"submit","rid":1,"n":1,"companions":0,"request_id":null}\n{"in":"warp","rid":1}\n', 3,
     'unknown input event "warp"'),
    ('{"in":"scheduled","rid":1,"stage":7}\n', 2, "scheduled.stage: 7 is not a stage of the 3-stage pipeline"),
    ('{"end":true}\n{"in":"shutdown"}\n', 3, "a line after the end marker"),
])  # fmt: skip
def test_malformed_input_exits_2_with_file_line_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       body: str, line: int, reason: str) -> None:  # fmt: skip
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(TraceHeader(KINDS, FINAL, 2).encode()) + "\n" + body)
    assert run(capsys, str(path)) == (2, "", f"{path}:{line}: {reason}\n")


def test_unsupported_version_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v4.jsonl"
    path.write_text('{"omni_fsm_trace": 4, "stages": [], "capacity": 1, "new": true}\n')
    assert run(capsys, str(path)) == (2, "", f"{path}:1: unsupported trace version 4 (this reader reads 1, 2 and 3)\n")


def test_missing_file_and_directory_exit_2_at_line_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(tmp_path / "nope.jsonl"))
    assert (code, out) == (2, "")
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'nope.jsonl'))}:0: cannot open: .+\n", err)
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2
    assert err.startswith(f"{tmp_path}:0: cannot open: ")


def test_internal_error_exits_3_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    def broken(self: Monitor, event: Any, outputs: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(Monitor, "step", broken)
    path = tmp_path / "clean.jsonl"
    write_trace(path, KINDS, FINAL, 2, one_request_to_the_end())
    code, out, err = run(capsys, str(path))
    assert (code, out) == (3, "")
    assert err == f"{path}: internal error: KeyError: 'boom'\n"


def test_released_requests_lines_are_forgotten() -> None:
    recent = Recent(3)
    for number, item in enumerate([ev.Submit(1), ob.Submitted(1), ev.Submit(2), ob.Released(1)], 1):
        recent.note((number, item))
    recent.forget(1)
    recent.note((5, ev.StageOutput(1, 0)))  # a late report about the released request
    assert set(recent.by_rid) == {2}
    recent.note((6, ev.Control(1, ev.ControlMethod.SLEEP)))
    assert [n for n, _ in recent.engine] == [6]


def test_documented_example_writes_a_clean_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    text = DOC.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    console = re.search(r"```console\n\$ omni-fsm (check .*?)\n(.*?)```", text, re.S)
    assert code is not None and console is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), str(DOC), "exec"), {})
    assert run(capsys, *console.group(1).split()[1:]) == (0, console.group(2), "")


def test_documented_trace_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    block = re.search(r"```jsonl\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    path = tmp_path / "doc.jsonl"
    path.write_text(block.group(1))
    assert run(capsys, str(path))[0] == 0
