"""A clean trace cut anywhere is no violation: ``omni-fsm check --allow-incomplete`` on a copy of a trace still
being written (it may stop between an input line and its observations, or inside a line) answers 0.

The traces are real: a run of the demo pipeline on the simulator (``omni-run``: aborts, faults, samples,
companions, a replica's death) and the checked-in version-1 trace of such a run.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from omni_fsm.cli import main as cli_main

from .view_traces import demo_trace

V1_TRACE = Path(__file__).parent / "data" / "v1-pipeline.jsonl"


class Traces(list[bytes]):
    """Whole clean traces, named in a failing example by what they are (not by their bytes)."""

    def __repr__(self) -> str:
        return "Traces(a run of the demo pipeline, tests/fsm/data/v1-pipeline.jsonl)"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Traces:
    """Return whole clean traces (each checks clean as it is)."""
    run = demo_trace(tmp_path_factory.mktemp("run"), requests=12)
    return Traces([run.read_bytes(), V1_TRACE.read_bytes()])


@pytest.fixture(scope="module")
def copy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("copy") / "growing.trace.jsonl"


def check(path: Path, data: bytes) -> tuple[int, str, str]:
    """Write ``data`` to ``path``; return ``omni-fsm check --allow-incomplete``'s exit code, stdout and stderr."""
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["check", str(path), "--allow-incomplete"])
    return code, out.getvalue(), err.getvalue()


def test_the_whole_traces_check_clean(traces: Traces, copy_path: Path) -> None:
    for whole in traces:
        code, out, err = check(copy_path, whole)
        assert (code, err) == (0, "") and " 0 violations" in out and "no end marker" not in out


@st.composite
def cut_points(draw: st.DrawFn, sizes: list[tuple[int, list[int]]]) -> tuple[int, int]:
    """Draw (trace, where to cut it): at the end of a line (after an input line, say), or at any byte."""
    which = draw(st.integers(0, len(sizes) - 1))
    size, line_ends = sizes[which]
    return which, draw(st.sampled_from(line_ends) | st.integers(line_ends[0], size))


def _sizes(traces: list[bytes]) -> list[tuple[int, list[int]]]:
    """Return per trace its size and the offset after each line (from the header's end)."""
    return [(len(t), [i + 1 for i, byte in enumerate(t) if byte == ord("\n")]) for t in traces]


@given(data=st.data())
def test_a_clean_trace_cut_anywhere_checks_clean(traces: Traces, copy_path: Path, data: st.DataObject) -> None:
    which, cut = data.draw(cut_points(_sizes(traces)))
    prefix = traces[which][:cut]
    note(f"trace {which} cut at byte {cut}; its last lines: {prefix[-300:]!r}")
    code, out, err = check(copy_path, prefix)
    assert (code, err) == (0, ""), out + err
    assert " 0 violations" in out
