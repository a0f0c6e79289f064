"""The trace format, version 3 (versions 1 and 2 still read): an observed lifecycle history as JSON lines.

Line 1 is the header ``{"omni_fsm_trace": 3, "stages": [{"kind": "ar", "final": true}, ...],
"capacity": 2}``. Every later line is one object: an input event ``{"in": "stage_output", ...}``
(what a client or a runtime did; internal events never appear), an observation
``{"out": "emitted", ...}`` (what the engine produced), or the last line ``{"end": true}`` (the
history is complete: the engine was drained; without it the trace is incomplete, cut off or
still being written). An input line opens a step;
the observations after it belong to it (observations before any input form a step with no
event). States of the core never appear: a trace records only what can be observed.

Names and fields come from the attrs classes of ``omni_fsm.spec.events`` and
``omni_fsm.spec.observations`` (``StageOutput`` is ``stage_output``); the reader validates every line
against those classes' fields, so the format follows them. See ``docs/trace-format.md``.
This module is the I/O shell around the pure core, which never imports it. The codec of single
lines (names, field checks, the header) is ``omni_fsm.trace.codec``; its public names are
re-exported here.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, NamedTuple

from omni_fsm.errors import ConfigError, MalformedInput
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import StageKind, pipeline_shape

# END_KEY, VERSION_KEY, Decode and Item are outside ``__all__`` but were always importable from here: ``X as X``
# re-exports them for strict type checkers.
from omni_fsm.trace.codec import END_KEY as END_KEY
from omni_fsm.trace.codec import (
    FORMAT_VERSION,
    HEADER_SHAPE,
    INPUTS,
    NAMES,
    OUTPUTS,
    BadValue,
    TraceHeader,
    decode,
    dumps,
    encode,
    json_type,
    parse_header,
    snake_name,
)
from omni_fsm.trace.codec import VERSION_KEY as VERSION_KEY
from omni_fsm.trace.codec import Decode as Decode
from omni_fsm.trace.codec import Item as Item

# -- reading -----------------------------------------------------------------------------------


class Step(NamedTuple):
    """One step of a history: the input event (``None`` before any input) and what it produced.

    ``line`` is the event's line; the outputs are on the lines right after it (from ``line``
    itself when there is no event).
    """

    line: int
    event: ev.Event | None
    outputs: tuple[ob.Observation, ...]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        raise BadValue(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return obj


#: JSON literals, and the characters a number may go on with: a line may stop in the middle of one
_LITERALS = ("true", "false", "null")
_NUMBER_GOES_ON = frozenset("0123456789.eE+-")


def _cut_short(raw: bytes | str) -> bool:
    """Return whether ``raw`` (a last line without its newline) is a JSON object cut short: some ending makes it
    one. (A line still being written; anything else that is no JSON is malformed.)"""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:  # cut inside a character: judge what comes before it
            if err.reason != "unexpected end of data":
                return False
            text = raw[: err.start].decode("utf-8", errors="replace")
    else:
        text = raw
    if not text.lstrip().startswith("{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        rest = text[err.pos :]
        return (err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")
                or rest == "-" or any(literal.startswith(rest) for literal in _LITERALS)
                or (err.msg.startswith("Invalid \\uXXXX") and len(text) - err.pos <= 6)
                or (set(rest) <= _NUMBER_GOES_ON and text[: err.pos][-1:].isdigit()))
    except ValueError:  # e.g. too many digits: no ending mends that
        return False
    return False


Source = str | os.PathLike[str] | IO[bytes] | IO[str]


class TraceReader:
    """The steps of one trace, read line by line; ``header`` is read on construction.

    Iterate it once. ``complete`` becomes true when the end marker is read (``end_line`` is its
    line); ``last_line`` is the number of the last line read. Any malformed line raises
    ``MalformedInput(name, line, reason)``; a file that cannot be opened does too, with line 0. The
    one exception: a last line without its newline that is no JSON (yet) is a line still being
    written, not read: ``partial_line`` is its number (0: none), and the trace is incomplete.
    """

    def __init__(self, source: Source, name: str | None = None) -> None:
        self.complete = False
        self.end_line = 0
        self.last_line = 1
        self.partial_line = 0
        self._owned: IO[bytes] | None = None
        if isinstance(source, (str, os.PathLike)):
            self.name = name if name is not None else os.fspath(source)
            try:
                self._owned = open(source, "rb")  # noqa: SIM115 - closed when the steps are exhausted
            except OSError as err:
                raise MalformedInput(self.name, 0, f"cannot open: {err.strerror or err}") from None
            stream: IO[bytes] | IO[str] = self._owned
        else:
            self.name = name if name is not None else str(getattr(source, "name", "<stream>"))
            stream = source
        self._lines = self._numbered(stream)
        try:
            self.header = self._header()
        except BaseException:
            self.close()
            raise

    def _bad(self, line: int, reason: str) -> MalformedInput:
        return MalformedInput(self.name, line, reason)

    def _numbered(self, stream: IO[bytes] | IO[str]) -> Iterator[tuple[int, bytes | str]]:
        """Yield (line number, raw line) per line."""
        lines: Iterator[bytes | str] = iter(stream)
        number = 0
        while True:
            number += 1
            try:
                raw = next(lines)
            except StopIteration:
                return
            except UnicodeDecodeError as err:
                raise self._bad(number, f"not valid UTF-8 ({err.reason})") from None
            except OSError as err:
                raise self._bad(number, f"cannot read: {err.strerror or err}") from None
            yield number, raw

    def _parse(self, number: int, raw: bytes | str) -> Any:
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise self._bad(number, f"not valid UTF-8 ({err.reason} at byte {err.start})") from None
        if not raw.strip():
            raise self._bad(number, "blank line")
        try:
            return json.loads(raw, object_pairs_hook=_no_duplicate_keys)
        except BadValue as bad:
            raise self._bad(number, str(bad)) from None
        except json.JSONDecodeError as err:
            raise self._bad(number, f"bad JSON: {err.msg} (column {err.colno})") from None
        except (ValueError, RecursionError) as err:  # e.g. an integer of too many digits, deep nesting
            raise self._bad(number, f"bad JSON: {str(err)[:80] or type(err).__name__}") from None

    def _header(self) -> TraceHeader:
        first = next(self._lines, None)
        if first is None:
            raise self._bad(1, f"empty file: expected {HEADER_SHAPE}")
        try:
            return parse_header(self._parse(1, first[1]))
        except ValueError as err:
            raise self._bad(1, str(err)) from None

    def __iter__(self) -> Iterator[Step]:
        return self._steps()

    def _steps(self) -> Iterator[Step]:
        stages, version = len(self.header.kinds), self.header.version
        line, event = 0, None  # the step being gathered
        outputs: list[ob.Observation] = []
        try:
            for number, raw in self._lines:
                self.last_line = number
                if self.complete:
                    raise self._bad(number, "a line after the end marker")
                try:
                    obj = self._parse(number, raw)
                except MalformedInput:
                    whole = raw.endswith(b"\n") if isinstance(raw, bytes) else raw.endswith("\n")
                    if whole or not _cut_short(raw):
                        raise
                    self.partial_line = number  # the last line, still being written
                    break
                item = self._item(number, obj, stages, version)
                if item is None:
                    self.complete, self.end_line = True, number
                elif isinstance(item, ev.Event):
                    if line:
                        yield Step(line, event, tuple(outputs))
                    line, event, outputs = number, item, []
                else:
                    line = line or number
                    outputs.append(item)
            if line:
                yield Step(line, event, tuple(outputs))
        finally:
            self.close()

    def _item(self, number: int, obj: Any, stages: int, version: int) -> Item | None:
        """Return the line's event or observation, or ``None`` for the end marker."""
        if type(obj) is not dict:
            raise self._bad(number, f"expected a JSON object, got {json_type(obj)}")
        if END_KEY in obj and "in" not in obj and "out" not in obj:
            if set(obj) != {END_KEY} or obj[END_KEY] is not True:  # not ``!=``: 1 == 1.0 == True in Python
                raise self._bad(number, 'the end marker must be exactly {"end": true}')
            return None
        if "in" not in obj and "out" not in obj:
            raise self._bad(number, 'expected an object with "in" (an event) or "out" (an observation)')
        try:
            return decode(obj, stages, version)
        except ValueError as err:
            raise self._bad(number, str(err)) from None

    def close(self) -> None:
        """Close the file if this reader opened it."""
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace(source: Source, name: str | None = None) -> TraceReader:
    """Return a reader of the trace at ``source`` (a path or an open stream), its header already read.

    ``name`` is what errors call the file (default: the path, or the stream's name).
    """
    return TraceReader(source, name)


# -- writing -----------------------------------------------------------------------------------


def make_folder(folder: str | os.PathLike[str]) -> None:
    """Create ``folder`` and its missing parents; a file in its place is ``NotADirectoryError``, not "File exists"."""
    try:
        os.makedirs(folder, exist_ok=True)
    except FileExistsError:  # exist_ok forgives only a directory: something else holds the name
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(folder)) from None


def _target(path: str) -> str:
    """Return where a trace for ``path`` goes: a symlink's target (the link stays), else ``path`` itself."""
    return os.path.realpath(path) if os.path.islink(path) else path


def _is_special(path: str) -> bool:
    """Return whether ``path`` is a FIFO, a device or a socket: written into, never replaced by a file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (the common case), or a parent in the way: the temporary file says why
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _open_beside(path: str) -> tuple[str, IO[str]]:
    """Return (name, stream) of a new temporary file in ``path``'s directory (created if missing)."""
    folder, base = os.path.split(path)
    make_folder(folder or ".")
    if os.path.isdir(path):  # fail now, not after a whole run, when the path can never be replaced
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    while True:
        temp = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            return temp, open(temp, "x", encoding="utf-8")
        except FileExistsError:  # pragma: no cover - 32 random bits collided
            continue


def _discard(stream: IO[str], temp: str) -> None:
    """Close and remove a temporary file, best effort (it is being given up, maybe after a failure)."""
    with contextlib.suppress(OSError):
        stream.close()
    with contextlib.suppress(OSError):
        os.remove(temp)


class TraceWriter:
    """Writes one trace to a text stream, or to a path: header, steps, end.

    Given a path, it writes a temporary file beside it (``.NAME.XXXXXXXX.tmp``) and moves it onto
    the path (``os.replace``) when the end marker is written, so the path only ever holds a
    whole trace: if the run fails or the writer is closed before ``end``, the temporary file is
    removed and the path is left as it was. A symlink is written through: the temporary file
    goes beside its target, which it replaces. A FIFO or a device (``/dev/null``) is written
    straight into, as a stream is: there is nothing to replace.
    """

    def __init__(self, target: IO[str] | str | os.PathLike[str]) -> None:
        self._path: str | None = None
        self._temp = ""
        self._owned: IO[str] | None = None  #: a FIFO or device this writer opened (and closes)
        if isinstance(target, (str, os.PathLike)) and not _is_special(os.fspath(target)):
            self._path = _target(os.fspath(target))
            self._temp, self._stream = _open_beside(self._path)
        elif isinstance(target, (str, os.PathLike)):
            self._stream = self._owned = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        else:
            self._stream = target
        self._header_written = self._any_input = self._ended = self._closed = False

    def _line(self, obj: dict[str, Any]) -> None:
        self._stream.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def header(self, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int,
               loop: str | None = None) -> None:  # fmt: skip
        """Write the header line (once, first); ``loop``: the orchestration loop the run uses (``"event"`` or
        ``"poll"``), which tells two runs apart when ORCH-INV-303 compares them (``omni_fsm.same_client_streams``)."""
        if self._header_written:
            raise ConfigError("the header is already written")
        head = TraceHeader(*pipeline_shape(kinds, final), capacity, loop=loop)
        try:
            parse_header(head.encode())  # never write a header the reader would refuse
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self._line(head.encode())
        self._header_written = True

    def step(self, event: ev.Event | None, outputs: Iterable[ob.Observation]) -> None:
        """Write one step: the input event's line, then one line per observation."""
        if not self._header_written or self._ended or self._closed:
            raise ConfigError("steps go after the header and before the end marker")
        if event is None and self._any_input:
            raise ConfigError("observations without an input event can only open a trace")
        observed = list(outputs)
        if (event is not None and not isinstance(event, ev.Event)) or not all(
            isinstance(item, ob.Observation) for item in observed
        ):
            raise ConfigError("a step is one input event (or None) and observations")
        items: list[Item] = [*([] if event is None else [event]), *observed]
        for obj in [encode(item) for item in items]:  # encode all first: a bad item writes nothing
            self._line(obj)
        self._any_input = self._any_input or event is not None

    def end(self) -> None:
        """Write the end marker (the engine was drained); a writer given a path puts the file there now."""
        if not self._header_written or self._ended or self._closed:
            raise ConfigError("the end marker goes once, after the header")
        self._line({END_KEY: True})
        self._ended = True
        self._publish()

    def _publish(self) -> None:
        """Close the file and move it onto its path, whatever it holds (close a FIFO or device; flush a stream)."""
        if self._closed:
            return
        if self._owned is not None:
            self._closed = True
            self._owned.close()  # flushes: a failure (a FIFO's reader gone) is the caller's to see
            return
        if self._path is None:
            self._stream.flush()
            return
        self._closed = True
        try:
            self._stream.flush()
            os.fsync(self._stream.fileno())
            self._stream.close()
            os.replace(self._temp, self._path)
        except BaseException:
            _discard(self._stream, self._temp)
            raise

    def keep_incomplete(self) -> None:
        """Put what was written so far in place without the end marker (the run ended early): an incomplete trace,
        which ``omni-fsm check --allow-incomplete`` judges; nothing once ended or closed, or before the header."""
        if self._header_written and not (self._ended or self._closed):
            self._publish()

    def close(self) -> None:
        """Flush a stream; for a path, remove the temporary file unless ``end`` already put it in place."""
        if self._owned is not None:  # a FIFO or device: nothing to remove, just let go of it
            if not self._closed:
                self._closed = True
                with contextlib.suppress(OSError):
                    self._owned.close()
        elif self._path is None:
            self._stream.flush()
        elif not self._closed:
            self._closed = True
            _discard(self._stream, self._temp)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Steps = Iterable[tuple[ev.Event | None, Sequence[ob.Observation]]]


def _write_all(writer: TraceWriter, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int,
               steps: Steps, complete: bool) -> None:
    writer.header(kinds, final, capacity)
    for event, outputs in steps:
        writer.step(event, outputs)
    if complete:
        writer.end()


def write_trace(path: str | os.PathLike[str], kinds: Sequence[StageKind], final: Sequence[bool], capacity: int,
                steps: Steps, complete: bool = True) -> None:
    """Write a whole history to ``path`` at once, as ``TraceWriter`` writes a path; return nothing.

    With ``complete`` it ends with the end marker; without, it is a deliberately incomplete trace.
    """
    with TraceWriter(path) as writer:
        _write_all(writer, kinds, final, capacity, steps, complete)
        writer._publish()  # a no-op once ``end`` has put it in place


def dump_trace(kinds: Sequence[StageKind], final: Sequence[bool], capacity: int, steps: Steps,
               complete: bool = True) -> str:
    """Return a whole history as the text of a trace file."""
    buffer = io.StringIO()
    with TraceWriter(buffer) as writer:
        _write_all(writer, kinds, final, capacity, steps, complete)
    return buffer.getvalue()


__all__ = [
    "FORMAT_VERSION", "INPUTS", "NAMES", "OUTPUTS", "Step", "TraceHeader", "TraceReader", "TraceWriter",
    "decode", "dump_trace", "dumps", "encode", "parse_header", "read_trace", "snake_name", "write_trace",
]
