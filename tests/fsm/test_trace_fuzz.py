"""The trace checker under fuzzing: whatever the bytes, ``omni-fsm check`` answers 0, 1, 2 or 4,
never 3 and never a traceback; and a history recorded from the ``Lifecycle`` core is never
malformed and never breaks an invariant (the core is meant to be correct: a 1 is a finding).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from omni_fsm import ControlMethod, Lifecycle, LifecycleError, StageKind, StopKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.cli import main as cli_main
from omni_fsm.trace import INPUTS, OUTPUTS, TraceHeader, dump_trace, read_trace

KINDS = (StageKind.AR, StageKind.AR, StageKind.DIFFUSION)
FINAL = (True, False, True)
CAPACITY = 2
HEADER = json.dumps(TraceHeader(KINDS, FINAL, CAPACITY).encode())
FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
HISTORIES = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "trace.jsonl"


def check(path: Path, data: bytes, *options: str) -> tuple[int, str, str]:
    """Write ``data`` to ``path``; return ``omni-fsm check``'s exit code, stdout and stderr."""
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["check", str(path), *options])
    return code, out.getvalue(), err.getvalue()


def assert_answered(path: Path, data: bytes) -> None:
    """The checker answers 0, 1, 2 or 4 (never 3, never a traceback); 2 and 4 as one ``FILE:LINE: reason``."""
    code, out, err = check(path, data)
    assert code in (0, 1, 2, 4), err
    assert "Traceback" not in out + err
    if code == 2:
        assert re.fullmatch(rf"{re.escape(str(path))}:\d+: [^\n]+\n", err), err
        assert out == ""
    if code == 4:
        assert re.fullmatch(rf"{re.escape(str(path))}:\d+: incomplete trace: no end marker [^\n]+\n", err), err
        assert "0 violations (no end marker" in out


# -- arbitrary input -------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELD_NAMES = sorted({name for cls in (*INPUTS.values(), *OUTPUTS.values()) for name in cls.field_names()})
SMALL_JSON = st.none() | st.booleans() | st.integers(-2, 4) | st.sampled_from(["stop", "ar", "client", "sleep", ""])


@st.composite
def near_lines(draw: st.DrawFn) -> dict[str, Any]:
    """An object that looks like a trace line: a known name, known field names, random values."""
    key, names = draw(st.sampled_from([("in", sorted(INPUTS)), ("out", sorted(OUTPUTS))]))
    fields = draw(st.dictionaries(st.sampled_from(FIELD_NAMES), SMALL_JSON | JSON, max_size=6))
    return {key: draw(st.sampled_from(names)), **fields}


@FUZZ
@given(data=st.binary(max_size=400), with_header=st.booleans())
def test_arbitrary_bytes_never_crash_the_checker(trace_path: Path, data: bytes, with_header: bool) -> None:
    assert_answered(trace_path, (HEADER.encode() + b"\n" if with_header else b"") + data)


@FUZZ
@given(lines=st.lists(JSON | near_lines() | st.just({"end": True}), max_size=8), with_header=st.booleans())
def test_arbitrary_json_lines_never_crash_the_checker(trace_path: Path, lines: list[Any], with_header: bool) -> None:
    text = "".join(json.dumps(line) + "\n" for line in ([json.loads(HEADER)] if with_header else []) + lines)
    assert_answered(trace_path, text.encode())


# -- histories recorded from the core ------------------------------------------------------------

REPORTS = (ev.Scheduled, ev.Preempted, ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq, ev.AwaitChunk,
           ev.InputReady, ev.StageOutput, ev.StageFinished, ev.StageFailed, ev.ReplicaLost, ev.AbortDone,
           ev.AbortFailed)  # fmt: skip
#: Actions, repeated for weight: mostly runtime reports, sometimes a client call, rarely the end.
ACTIONS = ("submit",) * 3 + ("report",) * 12 + ("abort",) * 2 + ("control", "rpc_done", "rpc_failed") + (
    "engine_died", "shutdown")  # fmt: skip
TAGS = st.frozensets(st.sampled_from(["weights", "kv_cache", "*"]), max_size=2)


def _event(draw: st.DrawFn, action: str, lc: Lifecycle, next_rid: int) -> ev.Event:
    """Draw one event of ``action``, aimed mostly at requests the core tracks, at their stage."""
    tracked = sorted(lc.records)
    rid = draw(st.sampled_from(tracked) if tracked and draw(st.integers(0, 5)) else st.integers(1, max(1, next_rid)))
    if action == "submit":
        n = draw(st.sampled_from([1, 1, 2, 3]))
        return ev.Submit(next_rid, n=n, companions=0 if n > 1 else draw(st.sampled_from([0, 0, 1, 2])))
    if action == "abort":
        return ev.Abort(rid)
    if action == "report":
        rec = lc.records.get(rid)
        stage = rec.stage if rec is not None and draw(st.integers(0, 7)) else draw(st.integers(0, len(KINDS) - 1))
        report = draw(st.sampled_from(REPORTS))
        if report is ev.StageOutput:
            return ev.StageOutput(rid, stage, draw(st.integers(1, 3)))
        if report is ev.StageFinished:
            return ev.StageFinished(rid, stage, draw(st.sampled_from(StopKind)))
        return report(rid, stage)
    call_id = draw(st.integers(0, 2))
    if action == "control":
        return ev.Control(call_id, draw(st.sampled_from(ControlMethod)), draw(st.integers(0, 2)), draw(TAGS))
    if action == "rpc_done":
        return ev.RpcDone(call_id)
    if action == "rpc_failed":
        return ev.RpcFailed(call_id, "worker raised")
    return ev.EngineDied() if action == "engine_died" else ev.Shutdown()


Steps = list[tuple[ev.Event, list[ob.Observation]]]


@st.composite
def recorded_histories(draw: st.DrawFn) -> tuple[Steps, bool]:
    """A history recorded from a ``Lifecycle``: events the core refuses are skipped.

    With ``complete`` the engine is drained by a last shutdown and the trace ends with the marker.
    """
    lc = Lifecycle(KINDS, FINAL, CAPACITY)
    steps: Steps = []
    next_rid = 1
    for _ in range(draw(st.integers(0, 40))):
        event = _event(draw, draw(st.sampled_from(ACTIONS)), lc, next_rid)
        try:
            steps.append((event, lc.handle(event)))
        except LifecycleError:
            continue
        if isinstance(event, ev.Submit):
            next_rid += 1 + max(event.n if event.n > 1 else 0, event.companions)
    complete = draw(st.booleans())
    if complete:
        steps.append((ev.Shutdown(), lc.handle(ev.Shutdown())))
        assert not lc.records
    return steps, complete


@HISTORIES
@given(history=recorded_histories())
def test_recorded_histories_are_well_formed_and_clean(trace_path: Path, history: tuple[Steps, bool]) -> None:
    steps, complete = history
    text = dump_trace(KINDS, FINAL, CAPACITY, steps, complete)
    note("inputs: " + repr([event for event, _ in steps]))
    reader = read_trace(io.StringIO(text))
    assert [(step.event, list(step.outputs)) for step in reader] == steps
    assert reader.complete == complete
    code, out, err = check(trace_path, text.encode(), *([] if complete else ["--allow-incomplete"]))
    assert code != 2, f"a trace written from the core was called malformed: {err}"
    assert (code, err) == (0, ""), f"the monitor flags a history of the core:\n{out}"


@FUZZ
@given(history=recorded_histories(), data=st.data())
def test_edited_recorded_histories_never_crash_the_checker(trace_path: Path, history: tuple[Steps, bool],
                                                           data: st.DataObject) -> None:  # fmt: skip
    """Well-formed lines in an impossible order (dropped, repeated, swapped) are judged, never a crash."""
    steps, complete = history
    head, *lines = dump_trace(KINDS, FINAL, CAPACITY, steps, complete=False).splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        if not lines:
            break
        i, j = data.draw(st.integers(0, len(lines) - 1)), data.draw(st.integers(0, len(lines) - 1))
        edit = data.draw(st.sampled_from(["drop", "repeat", "swap"]))
        if edit == "drop":
            del lines[i]
        elif edit == "repeat":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
    text = "\n".join([head, *lines, *(['{"end":true}'] if complete else [])]) + "\n"
    assert_answered(trace_path, text.encode())
