"""omni-run ended from outside: one line, no traceback, and the trace so far kept, marked incomplete.

Ctrl-C and SIGTERM exit 130 and keep the trace so far without its end marker; a trace that cannot be
written (here: a file size limit, as a full disk would) exits 2 naming the cause, and the trace path
keeps what it held before. In every case no temporary file is left beside the trace.
A long run in a log (stderr not a terminal) says how far it got every few seconds.
"""

from __future__ import annotations

import asyncio
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import omni_fsm.cli
from omni_runtime.apps import cli
from omni_runtime.apps.cli import _progress_bar, _until_terminated, main

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")
OMNI_RUN = [sys.executable, "-c", "import sys; from omni_runtime.apps.cli import main; sys.exit(main())"]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "run.jsonl")


def _ignore_ctrl_c() -> None:  # as a shell does for a job it starts with '&'
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _default_ctrl_c() -> None:  # set, not inherited: pytest itself may run as a job with Ctrl-C ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("sig", "started"), [(signal.SIGINT, _default_ctrl_c), (signal.SIGTERM, _default_ctrl_c),
                                              (signal.SIGTERM, _ignore_ctrl_c)],
                         ids=["ctrl-c", "sigterm", "sigterm-with-ctrl-c-ignored"])  # fmt: skip
def test_an_interrupted_run_says_so_in_one_line_and_keeps_its_trace_so_far_marked_incomplete(
        tmp_path: Path, sig: int, started: Any) -> None:  # fmt: skip
    trace = tmp_path / "run.jsonl"
    trace.write_text("prev\n")
    run = subprocess.Popen([*OMNI_RUN, EXAMPLE, "--requests", "100000", "--no-progress", "--trace", str(trace)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=started)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not leftovers(tmp_path) and time.monotonic() < deadline:  # the run is writing its temporary trace
            time.sleep(0.05)
        assert leftovers(tmp_path), "the run never started writing"
        time.sleep(0.3)
        run.send_signal(sig)
        out, err = run.communicate(timeout=60)
    finally:  # a run the signal did not end is not left behind
        run.kill()
        run.wait()
    assert run.returncode == 130, err
    assert err == (f"omni-run: interrupted (the trace so far is in {trace}, incomplete: check it with omni-fsm "
                   f"check --allow-incomplete {trace})\n")  # fmt: skip
    assert out == "" and leftovers(tmp_path) == []
    assert trace.read_text().startswith('{"omni_fsm_trace"')
    assert omni_fsm.cli.main(["check", str(trace)]) == 4  # incomplete: no end marker
    assert omni_fsm.cli.main(["check", "--allow-incomplete", str(trace)]) == 0


def test_a_trace_that_cannot_be_written_is_named_in_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text("prev\n")

    def small_files() -> None:  # a file may grow to 20 KB: writing past it fails with EFBIG, as a full disk would
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    done = subprocess.run([*OMNI_RUN, EXAMPLE, "--requests", "300", "--no-progress", "--trace", str(trace)],
                          capture_output=True, text=True, timeout=120, preexec_fn=small_files)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"omni-run: {trace}: File too large (no new trace written; {trace} keeps what it "
                           "held before)\n")  # fmt: skip
    assert trace.read_text() == "prev\n" and leftovers(tmp_path) == []


def test_progress_in_a_log_is_a_line_every_few_seconds_and_one_at_the_end(monkeypatch, capsys) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    show = _progress_bar(1000, every=5.0)
    for done, now in ((1, 101.0), (2, 104.9), (3, 105.0), (4, 106.0), (5, 110.5), (1000, 111.0)):
        clock[0] = now
        show(done)
    assert capsys.readouterr().err.splitlines() == ["progress: 3/1000 requests", "progress: 5/1000 requests",
                                                    "progress: 1000/1000 requests"]  # fmt: skip


def test_sigterm_cancels_the_run_once_and_leaves_the_callers_handler_in_place() -> None:
    """A second SIGTERM does not cut the run's clean-up short; after the run, SIGTERM is the caller's again."""
    steps: list[str] = []

    async def run() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(1)
        finally:
            steps.append("cleaning up")
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(0.01)
            steps.append("cleaned up")

    def callers(signum: int, frame: Any) -> None:
        steps.append("caller's handler")

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(_until_terminated(run()))  # type: ignore[arg-type]
        assert steps == ["cleaning up", "cleaned up"]
        assert signal.getsignal(signal.SIGTERM) is callers
        signal.raise_signal(signal.SIGTERM)
        assert steps[-1] == "caller's handler"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_omni_run_runs_outside_the_main_thread(tmp_path: Path) -> None:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main([EXAMPLE, "--requests", "5", "--no-progress",
                                                                 "--trace", str(tmp_path / "t.jsonl")])))  # fmt: skip
    thread.start()
    thread.join(60)
    assert codes == [0]


def test_an_interrupt_after_the_trace_was_written_does_not_say_it_was_not(tmp_path: Path, monkeypatch, capsys):
    trace = tmp_path / "run.jsonl"
    trace.write_text("prev\n")

    def interrupted_while_printing(report: Any, path: str) -> str:
        raise KeyboardInterrupt  # Ctrl-C once the run is over and its trace in place

    monkeypatch.setattr(cli, "render", interrupted_while_printing)
    assert main([EXAMPLE, "--requests", "5", "--no-progress", "--trace", str(trace)]) == 130
    assert capsys.readouterr().err == "omni-run: interrupted\n"
    assert trace.read_text().startswith('{"omni_fsm_trace"')
