"""The trace format's codec: one line's JSON object to and from an event, an observation or the header.

Names and fields come from the attrs classes of ``omni_fsm.spec.events`` and ``omni_fsm.spec.observations``
(``StageOutput`` is ``stage_output``); each field's decoder is built from its annotation at import,
so the format follows the classes. No I/O here: ``omni_fsm.trace`` reads and writes whole files
with it, and re-exports its public names.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from omni_fsm.errors import ConfigError
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import StageKind

FORMAT_VERSION = 3
#: Every version this reader reads (an older trace reads with the fields later versions added at their defaults).
READS_VERSIONS = (1, 2, 3)
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


class BadValue(Exception):
    """A value does not fit its field (the reason, without file and line).

    Raised inside the codec and by the trace reader's JSON hooks; ``decode`` and ``parse_header`` turn it into
    ``ValueError``, the reader into ``MalformedInput``.
    """


Decode = Callable[[Any], Any]
#: Least value of integer fields, by field name (ids and counts; -1 stands for "none" in the version-1 fields).
_AT_LEAST: dict[str, int] = {"rid": 0, "parent": -1, "sample": -1, "n": 1, "companions": 0, "tokens": 0,
                              "cumulative": 0, "level": 0, "call_id": 0, "replica": 0}
_AT_LEAST_FOR: dict[tuple[type, str], int | None] = {
    (ob.Dropped, "rid"): -1,  # an engine-wide drop names no request
    **{(cls, "parent"): 0 for cls in (ev.Abort, ob.AbortRequested, ob.AbortAnswered)},  # none is null, not -1
}
#: The fields version 2 added, by class: a version-1 line has none of them and reads as their defaults (the abort
#: call's identity, and the replica a request is bound to and a report comes from).
_REPLICA_ADDED: tuple[type, ...] = (*ev.STAGE_REPORTS, ob.Dispatched)
ADDED_IN_2: dict[type, frozenset[str]] = {
    **{cls: frozenset({"replica"}) for cls in _REPLICA_ADDED},
    **{cls: frozenset({"call_id", "parent"}) for cls in (ev.Abort, ob.AbortRequested, ob.AbortAnswered)},
}
#: The fields version 3 added: the client's own request id on ``Submit`` (what pairs two runs' requests).
ADDED_IN_3: dict[type, frozenset[str]] = {ev.Submit: frozenset({"request_id"})}
#: version -> the fields added in each later version, by class: an object of that version has none of them
_NOT_YET: dict[int, dict[type, frozenset[str]]] = {
    1: {cls: ADDED_IN_2.get(cls, frozenset()) | ADDED_IN_3.get(cls, frozenset()) for cls in {*ADDED_IN_2, *ADDED_IN_3}},
    2: ADDED_IN_3,
    3: {},
}
#: The identities (``omni_fsm.invariants.judge.JUDGED_LESS_WITHOUT``) each version's traces do not carry.
NOT_CARRIED: dict[int, frozenset[str]] = {1: frozenset({"abort_caller", "replica"}), 2: frozenset(),
                                          3: frozenset()}
#: Integer fields that name a stage of the pipeline.
_STAGE_FIELDS = frozenset({"stage", "src", "dst"})


#: JSON value type -> how messages name it
_JSON_NAMES: dict[type, str] = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
                                list: "an array", dict: "an object", type(None): "null"}  # fmt: skip


def json_type(value: Any) -> str:
    """Return how messages name the JSON type of ``value`` (``an integer``, ``null``, ...)."""
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _expect(kind: type, what: str) -> Decode:
    def decode(value: Any) -> Any:
        if type(value) is not kind:  # exact: JSON true is not the integer 1
            raise BadValue(f"expected {what}, got {json_type(value)}")
        return value

    return decode


def _enum(cls: type[enum.Enum]) -> Decode:
    values = {member.value: member for member in cls}

    def decode(value: Any) -> Any:
        if type(value) is not str or value not in values:
            raise BadValue(f"expected one of {sorted(values)}, got {json.dumps(value)[:40]}")
        return values[value]

    return decode


def _optional(inner: Decode) -> Decode:
    return lambda value: None if value is None else inner(value)


def _string_set(value: Any) -> frozenset[str]:
    if type(value) is not list or any(type(v) is not str for v in value):
        raise BadValue("expected an array of strings")
    if len(set(value)) != len(value):
        raise BadValue("expected an array of distinct strings")
    return frozenset(value)


def _decoder(tp: Any) -> Decode:
    """Return the decoder of one annotated field type; unknown types fail at import."""
    if tp in (bool, int, str):
        return _expect(tp, _JSON_NAMES[tp])
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


def _fields(cls: type[Item]) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    fields: list[_Field] = []
    for name in cls.field_names():
        least = _AT_LEAST_FOR.get((cls, name), _AT_LEAST.get(name))
        fields.append(_Field(name, _decoder(hints[name]), least, name in _STAGE_FIELDS))
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


def decode(obj: dict[str, Any], stages: int, version: int = FORMAT_VERSION) -> Item:
    """Return the event or observation of one trace object; raise ``ValueError`` naming what is wrong.

    ``stages`` is the pipeline's length (stage indexes must name one of its stages); ``version`` the trace's
    (an older object has none of the fields later versions added, ``ADDED_IN_2`` and ``ADDED_IN_3``: they take
    their defaults).
    """
    try:
        return _decode(obj, stages, version)
    except BadValue as bad:
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


def _decode(obj: dict[str, Any], stages: int, version: int) -> Item:
    key = "in" if "in" in obj else "out"
    table: dict[str, type] = INPUTS if key == "in" else OUTPUTS
    name = obj[key]
    cls = table.get(name) if type(name) is str else None
    if cls is None:
        kind = "input event" if key == "in" else "observation"
        raise BadValue(f"unknown {kind} {json.dumps(name)[:40]}")
    fields = _FIELDS[cls]
    later = _NOT_YET[version].get(cls)
    if later:
        fields = tuple(f for f in fields if f.name not in later)
    extra = sorted(set(obj) - {key} - {f.name for f in fields})
    if extra:
        raise BadValue(f"{name}: unexpected field {extra[0]!r}")
    values: dict[str, Any] = {}
    for field in fields:
        if field.name not in obj:
            raise BadValue(f"{name}: missing field {field.name!r}")
        try:
            value = field.decode(obj[field.name])
        except BadValue as bad:
            raise BadValue(f"{name}.{field.name}: {bad}") from None
        problem = _impossible(field, value, stages)
        if problem:
            raise BadValue(f"{name}.{field.name}: {problem}")
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
    #: the orchestration loop the run used (``LOOPS``; ``None``: not named), what pairs two runs for ORCH-INV-303
    loop: str | None = None

    def encode(self) -> dict[str, Any]:
        """Return the header line's object."""
        stages = [{"kind": k.value, "final": f} for k, f in zip(self.kinds, self.final, strict=True)]
        head: dict[str, Any] = {VERSION_KEY: self.version, "stages": stages, "capacity": self.capacity}
        if self.loop is not None:
            head["loop"] = self.loop
        return head


_STAGE_KIND = _enum(StageKind)

#: How messages describe a well-formed header line.
HEADER_SHAPE = (f'the header {{"{VERSION_KEY}": {FORMAT_VERSION}, "stages": [...], "capacity": N}} '
                '(and "loop", optional)')
#: the orchestration loops a header may name (the event-driven and the polling one, ORCH-INV-303)
LOOPS: tuple[str, ...] = ("event", "poll")


def parse_header(obj: Any) -> TraceHeader:
    """Return the header of a trace's first object; raise ``ValueError`` naming what is wrong."""
    if type(obj) is not dict or VERSION_KEY not in obj:
        raise ValueError(f"line 1 must be {HEADER_SHAPE}")
    version = obj[VERSION_KEY]
    if type(version) is not int or version not in READS_VERSIONS:
        reads = ", ".join(map(str, READS_VERSIONS[:-1])) + f" and {READS_VERSIONS[-1]}"
        raise ValueError(f"unsupported trace version {json.dumps(version)[:40]} (this reader reads {reads})")
    if set(obj) - {"loop"} != {VERSION_KEY, "stages", "capacity"}:
        raise ValueError(f"expected exactly the keys of {HEADER_SHAPE}")
    loop = obj.get("loop")
    if loop is not None and loop not in LOOPS:
        named = ", ".join(map(json.dumps, LOOPS))
        raise ValueError(f"header: loop must be one of {named}, not {json.dumps(loop)[:40]}")
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
        except BadValue as bad:
            raise ValueError(f"header: stage {i} kind: {bad}") from None
        final.append(stage["final"])
    if not final[-1]:
        raise ValueError("header: the last stage must be a final-output stage")
    return TraceHeader(tuple(kinds), tuple(final), capacity, version, loop)
