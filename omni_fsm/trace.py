"""The trace format, version 1: an observed lifecycle history as JSON lines.

Line 1 is the header ``{"omni_fsm_trace": 1, "stages": [{"kind": "ar", "final": true}, ...],
"capacity": 2}``. Every later line is one object: an input event ``{"in": "stage_output", ...}``
(what a client or a runtime did; internal events never appear), an observation
``{"out": "emitted", ...}`` (what the engine produced), or the last line ``{"end": true}`` (the
history is complete: the engine was drained; without it the trace is incomplete, cut off or
still being written). An input line opens a step;
the observations after it belong to it (observations before any input form a step with no
event). States of the core never appear: a trace records only what can be observed.

Names and fields come from the attrs classes of ``omni_fsm.events`` and
``omni_fsm.observations`` (``StageOutput`` is ``stage_output``); the reader validates every line
against those classes' fields, so the format follows them. See ``docs/trace-format.md``.
This module is the I/O shell around the pure core, which never imports it.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import io
import json
import os
import re
import secrets
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, NamedTuple

import attrs

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm._vocab import StageKind
from omni_fsm.errors import ConfigError, MalformedInput

FORMAT_VERSION = 1
VERSION_KEY = "omni_fsm_trace"
END_KEY = "end"
Item = ev.Event | ob.Observation


def snake_name(cls: type) -> str:
    """Return the trace name of an event or observation class (``AwaitRemoteKVs`` -> ``await_remote_kvs``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()


def _by_name(classes: Iterable[type]) -> dict[str, Any]:
    unique = set(classes)
    table = {snake_name(cls): cls for cls in sorted(unique, key=lambda cls: cls.__name__)}
    if len(table) != len(unique):  # pragma: no cover - guards against a future class name clash
        raise TypeError("two classes map to one trace name")
    return table


#: Trace name -> input event class: everything a client or a runtime sends.
INPUTS: dict[str, type[ev.Event]] = _by_name(
    cls for cls in (*ev.REQUEST_EVENTS, *ev.ENGINE_EVENTS) if cls.ORIGIN != ev.INTERNAL
)
#: Trace name -> observation class: everything the core can output.
OUTPUTS: dict[str, type[ob.Observation]] = _by_name(
    cls for cls in vars(ob).values()
    if isinstance(cls, type) and issubclass(cls, ob.Observation) and cls is not ob.Observation
)
#: Class -> (line key, trace name), for writing.
NAMES: dict[type, tuple[str, str]] = {
    **{cls: ("in", name) for name, cls in INPUTS.items()},
    **{cls: ("out", name) for name, cls in OUTPUTS.items()},
}

# -- field codecs, built from the classes' annotations ------------------------------------------


class _Bad(Exception):
    """A value does not fit its field (the reason, without file and line)."""


Decode = Callable[[Any], Any]
#: Least value of integer fields, by field name (ids and counts; -1 stands for "none").
_AT_LEAST: dict[str, int] = {"rid": 0, "parent": -1, "sample": -1, "n": 1, "companions": 0, "tokens": 0,
                              "cumulative": 0, "level": 0, "call_id": 0}
_AT_LEAST_FOR: dict[tuple[type, str], int | None] = {(ob.Dropped, "rid"): -1}  # an engine-wide drop names no request
#: Integer fields that name a stage of the pipeline.
_STAGE_FIELDS = frozenset({"stage", "src", "dst"})


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _expect(kind: type, what: str) -> Decode:
    def decode(value: Any) -> Any:
        if type(value) is not kind:  # exact: JSON true is not the integer 1
            raise _Bad(f"expected {what}, got {_json_type(value)}")
        return value

    return decode


def _enum(cls: type[enum.Enum]) -> Decode:
    values = {member.value: member for member in cls}

    def decode(value: Any) -> Any:
        if type(value) is not str or value not in values:
            raise _Bad(f"expected one of {sorted(values)}, got {json.dumps(value)[:40]}")
        return values[value]

    return decode


def _optional(inner: Decode) -> Decode:
    return lambda value: None if value is None else inner(value)


def _string_set(value: Any) -> frozenset[str]:
    if type(value) is not list or any(type(v) is not str for v in value):
        raise _Bad("expected an array of strings")
    if len(set(value)) != len(value):
        raise _Bad("expected an array of distinct strings")
    return frozenset(value)


def _decoder(tp: Any) -> Decode:
    """Return the decoder of one annotated field type; unknown types fail at import."""
    simple = {bool: "a boolean", int: "an integer", str: "a string"}
    if tp in simple:
        return _expect(tp, simple[tp])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        return _optional(_decoder(next(a for a in args if a is not type(None))))
    if typing.get_origin(tp) is frozenset and args == (str,):
        return _string_set
    raise TypeError(f"the trace format has no codec for field type {tp!r}")  # pragma: no cover


@attrs.frozen
class _Field:
    name: str
    decode: Decode
    least: int | None
    is_stage: bool


def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    fields: list[_Field] = []
    for f in attrs.fields(cls):
        least = _AT_LEAST_FOR.get((cls, f.name), _AT_LEAST.get(f.name))
        fields.append(_Field(f.name, _decoder(hints[f.name]), least, f.name in _STAGE_FIELDS))
    return tuple(fields)


_FIELDS: dict[type, tuple[_Field, ...]] = {cls: _fields(cls) for cls in NAMES}

# -- encoding -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset):
        return sorted(value)
    return value


def encode(item: Item) -> dict[str, Any]:
    """Return the trace object of an input event or observation (``ValueError`` if it has none)."""
    try:
        key, name = NAMES[type(item)]
    except KeyError:
        raise ConfigError(f"{type(item).__name__} has no place in a trace (internal or unknown)") from None
    return {key: name, **{f.name: _plain(getattr(item, f.name)) for f in _FIELDS[type(item)]}}


def dumps(item: Item) -> str:
    """Return the compact JSON line (no newline) of an input event or observation."""
    return json.dumps(encode(item), separators=(",", ":"))


# -- decoding ------------------------------------------------------------------------------------


def decode(obj: dict[str, Any], stages: int) -> Item:
    """Return the event or observation of one trace object; raise ``ValueError`` naming what is wrong.

    ``stages`` is the pipeline's length (stage indexes must name one of its stages).
    """
    try:
        return _decode(obj, stages)
    except _Bad as bad:
        raise ValueError(str(bad)) from None


def _impossible(field: _Field, value: Any, stages: int) -> str | None:
    """Return why a well-typed value cannot occur (a negative id, a stage beyond the pipeline), or None."""
    if type(value) is not int:
        return None
    if field.least is not None and value < field.least:
        return f"{value} is below {field.least}"
    if field.is_stage and not 0 <= value < stages:
        return f"{value} is not a stage of the {stages}-stage pipeline"
    return None


def _decode(obj: dict[str, Any], stages: int) -> Item:
    key = "in" if "in" in obj else "out"
    table: dict[str, type] = INPUTS if key == "in" else OUTPUTS
    name = obj[key]
    cls = table.get(name) if type(name) is str else None
    if cls is None:
        kind = "input event" if key == "in" else "observation"
        raise _Bad(f"unknown {kind} {json.dumps(name)[:40]}")
    fields = _FIELDS[cls]
    extra = sorted(set(obj) - {key} - {f.name for f in fields})
    if extra:
        raise _Bad(f"{name}: unexpected field {extra[0]!r}")
    values: dict[str, Any] = {}
    for field in fields:
        if field.name not in obj:
            raise _Bad(f"{name}: missing field {field.name!r}")
        try:
            value = field.decode(obj[field.name])
        except _Bad as bad:
            raise _Bad(f"{name}.{field.name}: {bad}") from None
        problem = _impossible(field, value, stages)
        if problem:
            raise _Bad(f"{name}.{field.name}: {problem}")
        values[field.name] = value
    item: Item = cls(**values)
    return item


@attrs.frozen
class TraceHeader:
    """The pipeline a trace was recorded on: what ``Monitor`` and ``Lifecycle`` are built from."""

    kinds: tuple[StageKind, ...]
    final: tuple[bool, ...]
    capacity: int
    version: int = FORMAT_VERSION

    def encode(self) -> dict[str, Any]:
        """Return the header line's object."""
        stages = [{"kind": k.value, "final": f} for k, f in zip(self.kinds, self.final, strict=True)]
        return {VERSION_KEY: self.version, "stages": stages, "capacity": self.capacity}


_STAGE_KIND = _enum(StageKind)
_HEADER_SHAPE = f'the header {{"{VERSION_KEY}": {FORMAT_VERSION}, "stages": [...], "capacity": N}}'


def parse_header(obj: Any) -> TraceHeader:
    """Return the header of a trace's first object; raise ``ValueError`` naming what is wrong."""
    if type(obj) is not dict or VERSION_KEY not in obj:
        raise ValueError(f"line 1 must be {_HEADER_SHAPE}")
    version = obj[VERSION_KEY]
    if type(version) is not int or version != FORMAT_VERSION:
        raise ValueError(f"unsupported trace version {json.dumps(version)[:40]} (this reader reads {FORMAT_VERSION})")
    if set(obj) != {VERSION_KEY, "stages", "capacity"}:
        raise ValueError(f"expected exactly the keys of {_HEADER_SHAPE}")
    stages, capacity = obj["stages"], obj["capacity"]
    if type(capacity) is not int or capacity < 1:
        raise ValueError("header: capacity must be an integer of at least 1")
    if type(stages) is not list or not stages:
        raise ValueError("header: stages must be a non-empty array")
    kinds, final = [], []
    for i, stage in enumerate(stages):
        if type(stage) is not dict or set(stage) != {"kind", "final"} or type(stage["final"]) is not bool:
            raise ValueError(f'header: stage {i} must be {{"kind": "ar"|"diffusion", "final": true|false}}')
        try:
            kinds.append(_STAGE_KIND(stage["kind"]))
        except _Bad as bad:
            raise ValueError(f"header: stage {i} kind: {bad}") from None
        final.append(stage["final"])
    if not final[-1]:
        raise ValueError("header: the last stage must be a final-output stage")
    return TraceHeader(tuple(kinds), tuple(final), capacity)


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
        raise _Bad(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return obj


Source = str | os.PathLike[str] | IO[bytes] | IO[str]


class TraceReader:
    """The steps of one trace, read line by line; ``header`` is read on construction.

    Iterate it once. ``complete`` becomes true when the end marker is read (``end_line`` is its
    line); ``last_line`` is the number of the last line read. Any malformed line raises
    ``MalformedInput(name, line, reason)``; a file that cannot be opened does too, with line 0.
    """

    def __init__(self, source: Source, name: str | None = None) -> None:
        self.complete = False
        self.end_line = 0
        self.last_line = 1
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
        except _Bad as bad:
            raise self._bad(number, str(bad)) from None
        except json.JSONDecodeError as err:
            raise self._bad(number, f"bad JSON: {err.msg} (column {err.colno})") from None
        except (ValueError, RecursionError) as err:  # e.g. an integer of too many digits, deep nesting
            raise self._bad(number, f"bad JSON: {str(err)[:80] or type(err).__name__}") from None

    def _header(self) -> TraceHeader:
        first = next(self._lines, None)
        if first is None:
            raise self._bad(1, f"empty file: expected {_HEADER_SHAPE}")
        try:
            return parse_header(self._parse(1, first[1]))
        except ValueError as err:
            raise self._bad(1, str(err)) from None

    def __iter__(self) -> Iterator[Step]:
        return self._steps()

    def _steps(self) -> Iterator[Step]:
        stages = len(self.header.kinds)
        line, event = 0, None  # the step being gathered
        outputs: list[ob.Observation] = []
        try:
            for number, raw in self._lines:
                self.last_line = number
                if self.complete:
                    raise self._bad(number, "a line after the end marker")
                item = self._item(number, self._parse(number, raw), stages)
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

    def _item(self, number: int, obj: Any, stages: int) -> Item | None:
        """Return the line's event or observation, or ``None`` for the end marker."""
        if type(obj) is not dict:
            raise self._bad(number, f"expected a JSON object, got {_json_type(obj)}")
        if END_KEY in obj and "in" not in obj and "out" not in obj:
            if obj != {END_KEY: True}:
                raise self._bad(number, 'the end marker must be exactly {"end": true}')
            return None
        if "in" not in obj and "out" not in obj:
            raise self._bad(number, 'expected an object with "in" (an event) or "out" (an observation)')
        try:
            return decode(obj, stages)
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


def _open_beside(path: str) -> tuple[str, IO[str]]:
    """Return (name, stream) of a new temporary file in ``path``'s directory (created if missing)."""
    folder, base = os.path.split(path)
    os.makedirs(folder or ".", exist_ok=True)
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
    removed and the path is left as it was.
    """

    def __init__(self, target: IO[str] | str | os.PathLike[str]) -> None:
        self._path: str | None = None
        self._temp = ""
        if isinstance(target, (str, os.PathLike)):
            self._path = os.fspath(target)
            self._temp, self._stream = _open_beside(self._path)
        else:
            self._stream = target
        self._header_written = self._any_input = self._ended = self._closed = False

    def _line(self, obj: dict[str, Any]) -> None:
        self._stream.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def header(self, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int) -> None:
        """Write the header line (once, first)."""
        if self._header_written:
            raise ConfigError("the header is already written")
        head = TraceHeader(tuple(kinds), tuple(final), capacity)
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
        """Close the file and move it onto its path, whatever it holds (flush a stream)."""
        if self._path is None:
            self._stream.flush()
            return
        if self._closed:
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

    def close(self) -> None:
        """Flush a stream; for a path, remove the temporary file unless ``end`` already put it in place."""
        if self._path is None:
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
    """Write a whole history to ``path`` at once (a temporary file moved into place); return nothing.

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
