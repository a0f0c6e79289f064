"""``omni-fsm`` at its edges: interrupts, broken pipes, odd trace paths, bad flags and bad arguments.

Each ends in one line and a defined exit status, never a traceback, and never leaves a half-written
file behind (or replaces a symlink, a FIFO or a device with one).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import omni_fsm
from omni_fsm import ConfigError, Lifecycle, StageKind
from omni_fsm import cli as fsm_cli
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.limits import Limits
from omni_fsm.invariants import Monitor
from omni_fsm.trace import TraceWriter, read_trace, write_trace

KINDS = (StageKind.AR,)
FINAL = (True,)
HEADER = '{"omni_fsm_trace":1,"stages":[{"kind":"ar","final":true}],"capacity":1}\n'
OMNI_FSM = [sys.executable, "-m", "omni_fsm.cli"]
Steps = list[tuple[ev.Event | None, list[ob.Observation]]]


def submits(count: int) -> Steps:
    """Return ``count`` requests submitted and never ended: a trace with one violation per request at its end."""
    lc = Lifecycle(KINDS, FINAL, 1)
    return [(ev.Submit(rid), lc.handle(ev.Submit(rid))) for rid in range(count)]


def wait_until(condition: object, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not callable(condition) or not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def ctrl_c_default() -> None:
    """Give the child the default Ctrl-C: a background job ('&', nohup) would hand it on ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def open_writer(fifo: Path, proc: subprocess.Popen[str], timeout: float = 30.0) -> Any:
    """Open ``fifo`` for writing once ``proc`` opened it for reading; fail (never block) if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if proc.poll() is not None:
                pytest.fail(f"the checker ended (exit {proc.returncode}) before opening its trace: "
                            f"{proc.communicate()[1][-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the checker never opened its trace")
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)
        return os.fdopen(fd, "w")


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "live.jsonl"
    os.mkfifo(path)
    yield path


# -- #2: Ctrl-C and SIGTERM: one line, exit 130 ---------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_check_interrupted_says_one_line_and_exits_130(fifo: Path, signum: signal.Signals) -> None:
    proc = subprocess.Popen([*OMNI_FSM, "check", str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=ctrl_c_default)  # fmt: skip
    with open_writer(fifo, proc) as feed:  # once the checker has opened the trace: it is running
        feed.write(HEADER)
        feed.flush()
        time.sleep(0.2)  # the checker reads the header and waits for the next line
        proc.send_signal(signum)
        assert finish(proc) == (130, "", "omni-fsm check: interrupted\n")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_explore_interrupted_ends_with_its_partial_report_and_exit_4(tmp_path: Path, signum: signal.Signals) -> None:
    """The first Ctrl-C or SIGTERM ends the search with the report so far, said partial (exit 4, no trace: no
    violation was found); the second one ends it at once (the other commands' exit 130)."""
    out = tmp_path / "out"
    proc = subprocess.Popen([*OMNI_FSM, "explore", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default)  # the default bound: ~20 s
    wait_until(out.is_dir, "--out to be created (the search starts right after)")
    time.sleep(0.3)
    proc.send_signal(signum)
    code, stdout, stderr = finish(proc)
    said = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}[signum]
    assert code == 4, stderr
    assert f"stopped early: interrupted by {said}; covered " in stdout and "\npartial: " in stdout, stdout
    assert stdout.splitlines()[-1].startswith("explore: states=") and stdout.endswith(" partial=yes\n")
    assert all(line.startswith(("estimate: ", "exploring: ")) for line in stderr.splitlines()), stderr
    assert list(out.iterdir()) == []


def test_a_second_signal_does_not_wait_for_the_search() -> None:
    limits = Limits()
    limits._signalled(signal.SIGINT, None)
    assert limits() == "interrupted by Ctrl-C (SIGINT)"
    with pytest.raises(KeyboardInterrupt):
        limits._signalled(signal.SIGTERM, None)


def test_trace_write_interrupted_leaves_the_path_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "cx.trace.jsonl"
    path.write_text("before\n")

    def steps() -> Iterator[tuple[ev.Event | None, list[ob.Observation]]]:
        yield from submits(3)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_trace(path, KINDS, FINAL, 1, steps())
    assert path.read_text() == "before\n"
    assert list(tmp_path.iterdir()) == [path]


# -- #3: symlinks are written through; FIFOs and devices are written into, never replaced -------------------


def test_trace_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    real, link = tmp_path / "real" / "run.jsonl", tmp_path / "link.jsonl"
    real.parent.mkdir()
    real.write_text("keep\n")
    link.symlink_to(real)
    write_trace(link, KINDS, FINAL, 1, submits(2))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert [s.event for s in read_trace(real)] == [ev.Submit(0), ev.Submit(1)]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["link.jsonl", "real", "run.jsonl"]


def test_trace_through_a_relative_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.jsonl"
    link.symlink_to("target.jsonl")
    write_trace(link, KINDS, FINAL, 1, submits(1))
    assert link.is_symlink() and os.readlink(link) == "target.jsonl"
    assert (tmp_path / "target.jsonl").read_text().splitlines()[-1] == '{"end":true}'


def test_trace_into_a_fifo_writes_into_it_and_keeps_the_fifo(fifo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    with open(copy, "w") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        try:
            write_trace(fifo, KINDS, FINAL, 1, submits(2))
            assert reader.wait(timeout=10) == 0
        finally:
            reader.kill()
            reader.wait()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [s.event for s in read_trace(copy)] == [ev.Submit(0), ev.Submit(1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.jsonl", "live.jsonl"]


def test_trace_into_dev_null_discards_it_and_keeps_the_device() -> None:
    before = os.lstat(os.devnull)
    assert stat.S_ISCHR(before.st_mode)
    write_trace(os.devnull, KINDS, FINAL, 1, submits(2))
    with TraceWriter(os.devnull) as writer:  # closed before the end marker: nothing to remove either
        writer.header(KINDS, FINAL, 1)
    after = os.lstat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert [p for p in os.listdir(os.path.dirname(os.devnull)) if p.startswith(".null.")] == []


# -- #5: the end marker is exactly {"end": true} -------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "1.0", '"true"', "false"])
def test_end_marker_other_than_true_is_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 value: str) -> None:
    path = tmp_path / "end.jsonl"
    path.write_text(HEADER + f'{{"end":{value}}}\n')
    assert cli_main(["check", str(path)]) == 2
    assert capsys.readouterr() == ("", f'{path}:2: the end marker must be exactly {{"end": true}}\n')


# -- #6: --context is an integer from 0 to a sane maximum --------------------------------------------------


@pytest.mark.parametrize(("value", "reason"), [
    ("x", "expected an integer, got 'x'"),
    ("1.5", "expected an integer, got '1.5'"),
    ("-1", "expected an integer from 0 to 10000, got '-1'"),
    ("10001", "expected an integer from 0 to 10000, got '10001'"),
    ("99999999999999999999", "expected an integer from 0 to 10000, got '99999999999999999999'"),
])  # fmt: skip
def test_bad_context_is_an_argument_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                          reason: str) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, KINDS, FINAL, 1, [])
    with pytest.raises(SystemExit) as exited:
        cli_main(["check", str(path), f"--context={value}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1] == f"omni-fsm check: error: argument --context: {reason}"


def test_largest_context_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, KINDS, FINAL, 1, submits(1))
    assert cli_main(["check", str(path), "--context", "10000"]) == 1
    assert "internal error" not in capsys.readouterr().err


# -- #7: a file where a directory should be is "Not a directory" -------------------------------------------


def test_trace_under_a_file_is_not_a_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "whole.jsonl"
    blocker.write_text("keep\n")
    with pytest.raises(NotADirectoryError) as raised:
        write_trace(blocker / "t.jsonl", KINDS, FINAL, 1, [])
    assert raised.value.strerror == "Not a directory"
    assert blocker.read_text() == "keep\n"


def test_explore_out_that_is_a_file_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "whole.jsonl"
    blocker.write_text("keep\n")
    assert cli_main(["explore", "--requests", "1", "--stages", "1", "--out", str(blocker)]) == 2
    assert capsys.readouterr() == ("", f"omni-fsm explore: --out {blocker}: Not a directory\n")


# -- #8: a reader that goes away ends the output quietly ----------------------------------------------------


def test_check_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    path = tmp_path / "open.jsonl"
    write_trace(path, KINDS, FINAL, 1, submits(2000))  # about 1.4 MB of violations: more than a pipe holds
    proc = subprocess.Popen([*OMNI_FSM, "check", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(f"{path}:6002: ORCH-INV-101 ")
    proc.stdout.close()  # what `| head -1` does
    err = [line for line in proc.stderr.read().splitlines() if ": checking: " not in line]  # progress on a slow box
    assert (proc.wait(timeout=30), err) == (141, [])


# -- #10: bad arguments to the library are named -------------------------------------------------------


@pytest.mark.parametrize("event", [None, "submit", ev.Submit], ids=["None", "str", "class"])
def test_handle_of_a_non_event_is_a_type_error_naming_it(event: object) -> None:
    lc = Lifecycle(KINDS, FINAL, 1)
    with pytest.raises(TypeError, match=r"^Lifecycle.handle takes an event of omni_fsm.events, got ") as raised:
        lc.handle(event)  # type: ignore[arg-type]
    assert repr(event) in str(raised.value)
    assert lc.records == {}


def test_write_trace_takes_stage_kinds_by_value(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, ("ar", "diffusion"), (False, True), 1, [])  # type: ignore[arg-type]
    assert read_trace(path).header.kinds == (StageKind.AR, StageKind.DIFFUSION)


def test_write_trace_names_a_bad_stage_kind(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with pytest.raises(ConfigError, match=r"^stage 1 kind: expected one of \['ar', 'diffusion'\], got 'gpu'$"):
        write_trace(path, ("ar", "gpu"), (False, True), 1, [])  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_write_trace_with_unequal_kinds_and_final_is_lifecycles_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as lifecycle:
        Lifecycle(KINDS, (True, True), 1)
    with pytest.raises(ConfigError) as writer:
        write_trace(tmp_path / "t.jsonl", KINDS, (True, True), 1, [])
    assert str(writer.value) == str(lifecycle.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("kinds", "final"), [(KINDS, (True, True)), ((StageKind.AR, StageKind.AR), FINAL), ((), ())])
def test_monitor_refuses_what_lifecycle_refuses(kinds: tuple[StageKind, ...], final: tuple[bool, ...]) -> None:
    with pytest.raises(ConfigError) as lifecycle:
        Lifecycle(kinds, final, 1)
    with pytest.raises(ConfigError) as monitor:
        Monitor(kinds, final, 1)
    assert str(monitor.value) == str(lifecycle.value)


def test_lifecycle_and_monitor_take_stage_kinds_by_value_and_name_a_bad_one() -> None:
    lc = Lifecycle(("ar",), (True,), 1)  # type: ignore[arg-type]
    assert lc.engine.kinds == (StageKind.AR,)
    lc.handle(ev.Submit(0))
    lc.handle(ev.Scheduled(0, 0))
    assert [type(o).__name__ for o in lc.handle(ev.StageOutput(0, 0))] == ["Emitted"]  # a final AR stage streams
    assert Monitor(("ar", "diffusion"), (False, True), 1).kinds == (StageKind.AR, StageKind.DIFFUSION)  # type: ignore[arg-type]
    for make in (Lifecycle, Monitor):
        with pytest.raises(ConfigError, match=r"^stage 0 kind: expected one of \['ar', 'diffusion'\], got 'gpu'$"):
            make(("gpu",), (True,), 1)  # type: ignore[arg-type]


# -- #12: names and messages -------------------------------------------------------------------------


def test_step_is_exported_beside_read_trace() -> None:
    from omni_fsm.trace import Step

    assert omni_fsm.Step is Step
    assert {"Step", "read_trace"} <= set(omni_fsm.__all__)


def test_explore_stages_0_blames_stages(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["explore", "--stages", "0"]) == 2
    assert capsys.readouterr() == ("", "omni-fsm explore: --stages must be at least 1\n")


def test_diagram_engine_with_markdown_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["diagram", "--engine", "--markdown"])
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert err.splitlines()[-1] == "omni-fsm diagram: error: argument --markdown: not allowed with argument --engine"


def test_cli_docstring_says_what_the_parser_imports() -> None:
    assert fsm_cli.__doc__ is not None and "lazily" not in fsm_cli.__doc__
    assert "imports every subcommand's module" in fsm_cli.__doc__


def test_trace_header_in_fixture_is_what_the_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, KINDS, FINAL, 1, [])
    written = HEADER.replace('"omni_fsm_trace":1', '"omni_fsm_trace":3')  # the fixture's lines are version 1's
    assert path.read_text() == written + json.dumps({"end": True}, separators=(",", ":")) + "\n"
