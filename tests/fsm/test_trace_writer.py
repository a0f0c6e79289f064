"""``TraceWriter`` given a path: the path only ever holds a whole trace.

It writes a temporary file beside the path and moves it into place when the end marker is
written; a run that fails, or a writer closed before the end, leaves the path as it was and no
temporary file behind.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from omni_fsm import ConfigError, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.trace import TraceWriter, dumps, read_trace, write_trace

KINDS = (StageKind.AR,)
FINAL = (True,)
END = '{"end":true}'


class RunFailed(Exception):
    """What a crashing run raises while the trace is being written."""


def started(path: Path) -> TraceWriter:
    writer = TraceWriter(path)
    writer.header(KINDS, FINAL, 1)
    writer.step(ev.Submit(1), [ob.Submitted(1)])
    return writer


def test_path_appears_only_when_the_end_marker_is_written(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = started(path)
    assert not path.exists()
    (temp,) = tmp_path.iterdir()  # written beside the path, under a name no trace glob matches
    assert temp.name.startswith(".run.jsonl.") and temp.name.endswith(".tmp")
    writer.end()
    assert path.read_text().splitlines()[-1] == END
    assert list(tmp_path.iterdir()) == [path]
    writer.close()
    assert list(tmp_path.iterdir()) == [path]


def test_failed_run_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with pytest.raises(RunFailed), started(path):
        raise RunFailed
    assert list(tmp_path.iterdir()) == []


def test_failed_run_keeps_the_previous_trace(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_trace(path, KINDS, FINAL, 1, [(ev.Submit(7), [ob.Submitted(7)])])
    before = path.read_text()
    with pytest.raises(RunFailed), started(path):
        raise RunFailed
    assert path.read_text() == before
    assert list(tmp_path.iterdir()) == [path]


def test_writer_closed_before_the_end_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with started(path):
        pass
    assert list(tmp_path.iterdir()) == []


def test_failing_replace_removes_the_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr(os, "replace", refuse)
    path = tmp_path / "run.jsonl"
    with pytest.raises(PermissionError), started(path) as writer:
        writer.end()
    assert list(tmp_path.iterdir()) == []


def test_directory_path_fails_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        TraceWriter(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_missing_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "run.jsonl"
    write_trace(path, KINDS, FINAL, 1, [])
    assert path.read_text().splitlines()[-1] == END
    assert list(path.parent.iterdir()) == [path]


def test_write_trace_without_end_writes_the_deliberate_prefix(tmp_path: Path) -> None:
    path = tmp_path / "prefix.jsonl"
    write_trace(path, KINDS, FINAL, 1, [(ev.Submit(1), [ob.Submitted(1)])], complete=False)
    assert path.read_text().splitlines()[1:] == [dumps(ev.Submit(1)), dumps(ob.Submitted(1))]
    assert list(tmp_path.iterdir()) == [path]


def test_writer_refuses_steps_once_ended(tmp_path: Path) -> None:
    writer = started(tmp_path / "run.jsonl")
    writer.end()
    with pytest.raises(ValueError):
        writer.step(ev.Abort(1), [])
    with pytest.raises(ValueError):
        writer.end()


def test_writer_on_a_stream_writes_straight_through() -> None:
    buffer = io.StringIO()
    with TraceWriter(buffer) as writer:
        writer.header(KINDS, FINAL, 1)
        writer.step(ev.Submit(1), [])
        assert buffer.getvalue().splitlines()[1:] == [dumps(ev.Submit(1))]
    assert not buffer.closed


def test_reader_names_the_last_line_read() -> None:
    text = io.StringIO()
    with TraceWriter(text) as writer:
        writer.header(KINDS, FINAL, 1)
        writer.step(ev.Submit(1), [ob.Submitted(1)])
    reader = read_trace(io.StringIO(text.getvalue()))
    assert reader.last_line == 1  # only the header so far
    list(reader)
    assert (reader.last_line, reader.complete) == (3, False)


def test_writer_misuse_is_a_config_error_of_the_package():
    writer = TraceWriter(io.StringIO())
    with pytest.raises(ConfigError, match="steps go after the header"):
        writer.step(ev.Submit(0), [])
    with pytest.raises(ConfigError, match="capacity"):
        writer.header((StageKind.AR,), (True,), 0)
