"""The trace format (``omni_fsm.trace``): every class round-trips; every malformed line is named.

The format is derived from the attrs classes of ``omni_fsm.spec.events`` and ``omni_fsm.spec.observations``;
these tests pin its vocabulary (a change of it is a change of the format) and check that the
reader refuses each kind of bad input with ``MalformedInput`` at the right line.
"""

from __future__ import annotations

import enum
import io
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_fsm import ConfigError, ControlMethod, EngineState, Lifecycle, MalformedInput, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.trace import (
    FORMAT_VERSION,
    INPUTS,
    OUTPUTS,
    Step,
    TraceHeader,
    TraceWriter,
    dump_trace,
    dumps,
    encode,
    read_trace,
    snake_name,
    write_trace,
)

KINDS = (StageKind.AR, StageKind.AR, StageKind.DIFFUSION)
FINAL = (True, False, True)
HEADER = json.dumps({"omni_fsm_trace": 1, "stages": [{"kind": "ar", "final": True}, {"kind": "ar", "final": False},
                                                     {"kind": "diffusion", "final": True}], "capacity": 2})  # fmt: skip
ROUND_TRIP = settings(max_examples=25)
DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"

# -- the vocabulary ------------------------------------------------------------------------------

BASES = (ev.Event, ev.RequestEvent, ev.StageEvent)


def _classes(module: types.ModuleType, base: type) -> set[type]:
    return {c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base}


def test_every_client_and_runtime_event_has_a_trace_name() -> None:
    sent = {c for c in _classes(ev, ev.Event) if c not in BASES and c.ORIGIN != ev.INTERNAL}
    assert set(INPUTS.values()) == sent


def test_every_observation_has_a_trace_name() -> None:
    assert set(OUTPUTS.values()) == _classes(ob, ob.Observation)


def test_the_format_document_lists_every_name() -> None:
    # the names come from the classes; a new kind is a change of the format and of its document
    text = DOC.read_text()
    assert [name for name in sorted([*INPUTS, *OUTPUTS]) if f"`{name}`" not in text] == []


SNAKE_CASES = [(ev.StageOutput, "stage_output"), (ob.AbortCommitted, "abort_committed"),
               (ev.AwaitRemoteKVs, "await_remote_kvs"), (ev.RpcDone, "rpc_done")]  # fmt: skip


@pytest.mark.parametrize(("cls", "name"), SNAKE_CASES)
def test_names_are_the_class_names_in_snake_case(cls: type, name: str) -> None:
    assert snake_name(cls) == name


@pytest.mark.parametrize("cls", sorted(_classes(ev, ev.Event) - set(INPUTS.values()) - set(BASES),
                                       key=lambda c: c.__name__))  # fmt: skip
def test_internal_events_are_never_written(cls: type) -> None:
    item = cls(**{name: _example(name) for name in cls.field_names()})
    with pytest.raises(ValueError, match="no place in a trace"):
        encode(item)


def _example(name: str) -> Any:
    return {"outcome": next(iter(ev.ReqState)), "ok": True}.get(name, 1)


# -- round trips ---------------------------------------------------------------------------------

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "rid": st.integers(0, 2**40), "parent": st.integers(-1, 2**40), "sample": st.integers(-1, 8),
    "stage": st.integers(0, 2), "src": st.integers(0, 2), "dst": st.integers(0, 2), "n": st.integers(1, 8),
    "companions": st.integers(0, 4), "tokens": st.integers(0, 10**6), "cumulative": st.integers(0, 10**6),
    "level": st.integers(0, 3), "call_id": st.integers(0, 2**40), "replica": st.integers(0, 8),
}  # fmt: skip
#: Optional id fields (version 2's): ``null`` for none, never -1.
OPTIONAL_IDS: dict[str, st.SearchStrategy[Any]] = {
    "parent": st.none() | st.integers(0, 2**40), "call_id": st.none() | st.integers(0, 2**40),
}


def _values_of(tp: Any) -> st.SearchStrategy[Any]:
    if tp is bool:
        return st.booleans()
    if tp is str:
        return st.text(max_size=12)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(tp)
    if typing.get_origin(tp) is frozenset:
        return st.frozensets(st.text(max_size=6), max_size=3)
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    return st.none() | _values_of(inner[0])


def instances(cls: type) -> st.SearchStrategy[Any]:
    """Every field drawn from its annotation, ids and stages within what a trace allows."""
    hints = typing.get_type_hints(cls)
    def values(name: str) -> st.SearchStrategy[Any]:
        if name in OPTIONAL_IDS and type(None) in typing.get_args(hints[name]):
            return OPTIONAL_IDS[name]
        return FIELD_VALUES[name] if name in FIELD_VALUES else _values_of(hints[name])

    fields = {name: values(name) for name in cls.field_names()}
    return st.builds(cls, **fields)


ALL_CLASSES = sorted([*INPUTS.values(), *OUTPUTS.values()], key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=snake_name)
@ROUND_TRIP
@given(data=st.data())
def test_every_class_round_trips(cls: type, data: st.DataObject) -> None:
    item = data.draw(instances(cls))
    steps = [(item, [])] if isinstance(item, ev.Event) else [(None, [item])]
    reader = read_trace(io.StringIO(dump_trace(KINDS, FINAL, 2, steps)))
    (step,) = list(reader)
    assert [step.event, *step.outputs] == [item] if isinstance(item, ev.Event) else [None, item]
    assert reader.complete


def test_engine_wide_drop_round_trips() -> None:
    steps = [(ev.RpcDone(7), [ob.Dropped(-1, "RpcDone", "unknown")])]
    (step,) = read_trace(io.StringIO(dump_trace(KINDS, FINAL, 2, steps)))
    assert step.outputs == (ob.Dropped(-1, "RpcDone", "unknown"),)


def test_a_recorded_history_round_trips_step_by_step() -> None:
    lc = Lifecycle(KINDS, FINAL, 2)
    inputs = [ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.StageOutput(2, 0, 3), ev.Abort(1),
              ev.Control(5, ControlMethod.SLEEP, 2, frozenset({"kv_cache", "weights"})), ev.RpcFailed(5, "oom"),
              ev.Shutdown()]  # fmt: skip
    steps = [(e, lc.handle(e)) for e in inputs]
    reader = read_trace(io.StringIO(dump_trace(KINDS, FINAL, 2, steps)))
    assert reader.header == TraceHeader(KINDS, FINAL, 2, FORMAT_VERSION)
    assert [(s.event, list(s.outputs)) for s in reader] == steps
    assert reader.complete


def test_observations_before_any_input_form_a_step_without_event() -> None:
    text = dump_trace(KINDS, FINAL, 2, [(None, [ob.EngineChanged(EngineState.PAUSED)]), (ev.Submit(1), [])])
    assert list(read_trace(io.StringIO(text))) == [
        Step(2, None, (ob.EngineChanged(EngineState.PAUSED),)), Step(3, ev.Submit(1), ()),
    ]  # fmt: skip


def test_a_trace_without_end_marker_is_incomplete() -> None:
    reader = read_trace(io.StringIO(dump_trace(KINDS, FINAL, 2, [(ev.Submit(1), [])], complete=False)))
    assert [s.line for s in reader] == [2]
    assert not reader.complete


def test_writer_to_a_path_closes_and_reads_back(tmp_path: Any) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        writer.header(KINDS, FINAL, 2)
        writer.step(ev.Submit(1), [ob.Submitted(1)])
        writer.end()
    lines = path.read_text().splitlines()
    assert lines[1:] == [dumps(ev.Submit(1)), dumps(ob.Submitted(1)), '{"end":true}']
    write_trace(path, KINDS, FINAL, 2, [(ev.Submit(1), [ob.Submitted(1)])])
    assert path.read_text().splitlines() == lines


def test_writer_refuses_what_the_reader_could_not_group() -> None:
    writer = TraceWriter(io.StringIO())
    with pytest.raises(ValueError):
        writer.step(ev.Submit(1), [])  # before the header
    writer.header(KINDS, FINAL, 2)
    writer.step(ev.Submit(1), [])
    with pytest.raises(ValueError):
        writer.step(None, [ob.Released(1)])  # would join the previous step when read back
    with pytest.raises(ValueError):
        writer.step(ev.Admit(1), [])  # internal
    writer.end()
    with pytest.raises(ValueError):
        writer.step(ev.Abort(1), [])


def test_writer_refuses_a_header_the_reader_would_refuse() -> None:
    with pytest.raises(ValueError, match="last stage"):
        TraceWriter(io.StringIO()).header((StageKind.AR,), (False,), 1)


# -- malformed input --------------------------------------------------------------------------------

SUBMIT = '{"in":"submit","rid":1,"n":1,"companions":0}'
STAGE_OUT = '{"in":"stage_output","rid":1,"stage":0,"tokens":1}'


def _header(**change: Any) -> str:
    head = json.loads(HEADER)
    head.update(change)
    return json.dumps(head)


MALFORMED: list[tuple[str, str, int, str]] = [
    ("not an object", "[1]", 1, "line 1 must be the header"),
    ("no version", json.dumps({"stages": [], "capacity": 1}), 1, "must be the header"),
    ("unknown version", _header(omni_fsm_trace=4), 1, "unsupported trace version 4"),
    ("boolean version", _header(omni_fsm_trace=True), 1, "unsupported trace version true"),
    ("extra header key", _header(extra=1), 1, "exactly the keys"),
    ("zero capacity", _header(capacity=0), 1, "capacity"),
    ("no stages", _header(stages=[]), 1, "non-empty"),
    ("bad stage kind", _header(stages=[{"kind": "gpu", "final": True}]), 1, "kind"),
    ("stage flag not boolean", _header(stages=[{"kind": "ar", "final": 1}]), 1, "stage 0"),
    ("last stage not final", _header(stages=[{"kind": "ar", "final": False}]), 1, "last stage"),
    ("bad JSON", f"{HEADER}\n{SUBMIT}\n{{oops", 3, "bad JSON"),
    ("array line", f"{HEADER}\n[1, 2]", 2, "expected a JSON object, got an array"),
    ("number line", f"{HEADER}\n{SUBMIT}\n7", 3, "expected a JSON object, got an integer"),
    ("blank line", f"{HEADER}\n\n{SUBMIT}", 2, "blank line"),
    ("second header", f"{HEADER}\n{HEADER}", 2, '"in"'),
    ("unknown event", f'{HEADER}\n{{"in":"reboot"}}', 2, "unknown input event \"reboot\""),
    ("internal event", f'{HEADER}\n{{"in":"admit","rid":1}}', 2, "unknown input event \"admit\""),
    ("unknown observation", f'{HEADER}\n{{"out":"teleported","rid":1}}', 2, "unknown observation"),
    ("name not a string", f'{HEADER}\n{{"in":3}}', 2, "unknown input event 3"),
    ("missing field", f'{HEADER}\n{{"in":"scheduled","rid":1}}', 2, "scheduled: missing field 'stage'"),
    ("extra field", f'{HEADER}\n{{"in":"abort","rid":1,"why":"x"}}', 2, "abort: unexpected field 'why'"),
    ("both in and out", f'{HEADER}\n{{"in":"abort","rid":1,"out":"released"}}', 2, "unexpected field 'out'"),
    ("string for int", f'{HEADER}\n{{"in":"abort","rid":"1"}}', 2, "abort.rid: expected an integer, got a string"),
    ("boolean for int", f'{HEADER}\n{{"in":"abort","rid":true}}', 2, "expected an integer, got a boolean"),
    ("float for int", f'{HEADER}\n{{"in":"abort","rid":1.0}}', 2, "expected an integer, got a number"),
    ("NaN for int", f'{HEADER}\n{{"in":"abort","rid":NaN}}', 2, "expected an integer"),
    ("int for bool", f'{HEADER}\n{{"out":"abort_answered","rid":1,"ok":1}}', 2, "expected a boolean"),
    ("bad enum", f'{HEADER}\n{{"in":"stage_finished","rid":1,"stage":0,"stop":"halt"}}', 2, "stop: expected one of"),
    ("enum by name", f'{HEADER}\n{{"in":"stage_finished","rid":1,"stage":0,"stop":"STOP"}}', 2, "expected one of"),
    ("tags not a list", f'{HEADER}\n{{"in":"control","call_id":1,"method":"sleep","level":1,"tags":"kv"}}', 2,
     "tags: expected an array of strings"),
    ("tags repeated", f'{HEADER}\n{{"in":"control","call_id":1,"method":"sleep","level":1,"tags":["a","a"]}}', 2,
     "distinct"),
    ("negative stage", f'{HEADER}\n{{"in":"scheduled","rid":1,"stage":-1}}', 2, "-1 is not a stage"),
    ("stage beyond pipeline", f'{HEADER}\n{SUBMIT}\n{{"in":"scheduled","rid":1,"stage":3}}', 3, "3 is not a stage"),
    ("forward beyond pipeline", f'{HEADER}\n{{"out":"forwarded","rid":1,"src":2,"dst":3}}', 2, "dst: 3"),
    ("negative rid", f'{HEADER}\n{{"in":"abort","rid":-1}}', 2, "abort.rid: -1 is below 0"),
    ("zero samples", f'{HEADER}\n{{"in":"submit","rid":1,"n":0,"companions":0}}', 2, "submit.n: 0 is below 1"),
    ("negative tokens", f'{HEADER}\n{{"in":"stage_output","rid":1,"stage":0,"tokens":-2}}', 2, "below 0"),
    ("duplicate key", f'{HEADER}\n{{"in":"abort","rid":1,"rid":2}}', 2, "duplicate key 'rid'"),
    ("end marker not true", f'{HEADER}\n{{"end":false}}', 2, "end marker"),
    ("end marker with more", f'{HEADER}\n{{"end":true,"rid":1}}', 2, "end marker"),
    ("line after end", f'{HEADER}\n{SUBMIT}\n{{"end":true}}\n{STAGE_OUT}', 4, "after the end marker"),
    ("blank line after end", f'{HEADER}\n{{"end":true}}\n\n', 3, "after the end marker"),
    ("too many digits", f'{HEADER}\n{{"in":"abort","rid":{"9" * 5000}}}', 2, "bad JSON"),
    ("deep nesting", f"{HEADER}\n{'[' * 100_000}", 2, "bad JSON"),
    ("byte order mark", f"\ufeff{HEADER}", 1, "bad JSON"),
]


@pytest.mark.parametrize(("text", "line", "reason"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_reader_rejects_malformed_input_at_its_line(text: str, line: int, reason: str) -> None:
    with pytest.raises(MalformedInput) as caught:
        list(read_trace(io.BytesIO(text.encode()), name="t.jsonl"))
    assert (caught.value.path, caught.value.line) == ("t.jsonl", line)
    assert reason in caught.value.reason
    assert str(caught.value) == f"t.jsonl:{line}: {caught.value.reason}"


def test_empty_file_is_malformed_at_line_1() -> None:
    with pytest.raises(MalformedInput, match=r"^t:1: empty file"):
        read_trace(io.BytesIO(b""), name="t")


def test_bad_utf8_is_malformed_at_its_line() -> None:
    data = f"{HEADER}\n{SUBMIT}\n".encode() + b'{"in":"abort","rid":1}\xff\n'
    with pytest.raises(MalformedInput, match=r"^t:3: not valid UTF-8"):
        list(read_trace(io.BytesIO(data), name="t"))


def test_bad_utf8_in_a_text_stream_is_malformed() -> None:
    # a text stream decodes ahead, in chunks: the line is exact only for paths and binary streams
    stream = io.TextIOWrapper(io.BytesIO(f"{HEADER}\n".encode() + b"\xc3\x28\n"), encoding="utf-8")
    with pytest.raises(MalformedInput, match=r"^t:\d+: not valid UTF-8"):
        list(read_trace(stream, name="t"))


def test_unopenable_paths_are_malformed_at_line_0(tmp_path: Any) -> None:
    for path in (tmp_path / "missing.jsonl", tmp_path):
        with pytest.raises(MalformedInput) as caught:
            read_trace(path)
        assert (caught.value.path, caught.value.line) == (str(path), 0)


def test_reader_streams_steps_before_reading_the_rest() -> None:
    lines = [HEADER, SUBMIT, '{"out":"submitted","rid":1,"role":"client","parent":-1,"n":1,"companions":0}',
             STAGE_OUT, "not json"]  # fmt: skip
    read: list[int] = []

    class Lines(io.RawIOBase):
        def __iter__(self) -> Any:
            for number, line in enumerate(lines, 1):
                read.append(number)
                yield (line + "\n").encode()

    steps = iter(read_trace(Lines(), name="t"))
    assert next(steps).event == ev.Submit(1)
    assert read == [1, 2, 3, 4]  # the next input closed the step; the bad line is not read yet
    with pytest.raises(MalformedInput, match=r"^t:5: bad JSON"):
        next(steps)


def test_the_header_names_the_loop_when_given_and_refuses_an_unknown_one(tmp_path) -> None:
    path = tmp_path / "looped.jsonl"
    with TraceWriter(path) as writer:
        writer.header([StageKind.AR], [True], 2, loop="poll")
        writer.end()
    assert json.loads(path.read_text().splitlines()[0])["loop"] == "poll"
    assert read_trace(path).header.loop == "poll"
    unnamed = tmp_path / "unnamed.jsonl"
    with TraceWriter(unnamed) as writer:
        writer.header([StageKind.AR], [True], 2)
        writer.end()
    assert "loop" not in json.loads(unnamed.read_text().splitlines()[0]) and read_trace(unnamed).header.loop is None
    with pytest.raises(ConfigError, match=r'header: loop must be one of "event", "poll", not "threads"'):
        TraceWriter(tmp_path / "bad.jsonl").header([StageKind.AR], [True], 2, loop="threads")


def test_a_last_line_cut_short_is_a_line_still_being_written() -> None:
    """A trace copied while it is written may stop inside a line: that line is not read (the trace is incomplete);
    the same line with its newline is malformed, and so is an unterminated last line no ending could mend."""
    text = f'{HEADER}\n{SUBMIT}\n{{"out":"submitted","rid":1,"ro'
    reader = read_trace(io.BytesIO(text.encode()), name="t")
    assert [step.outputs for step in reader] == [()]
    assert (reader.complete, reader.partial_line, reader.last_line) == (False, 3, 3)
    for bad in (text + "\n", f"{HEADER}\n{SUBMIT}\n{{oops"):
        with pytest.raises(MalformedInput, match=r"^t:3: bad JSON"):
            list(read_trace(io.BytesIO(bad.encode()), name="t"))
