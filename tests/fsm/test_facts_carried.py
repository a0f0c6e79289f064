"""The facts version 2 of the trace carries (issue 12): each new rule flags its fixed-sequence fault at the moment
specs/facts.toml names, the real core's history passes it, and a version-1 trace still reads and checks.

- the abort call's identity (ORCH-INV-104, ORCH-INV-106): every client abort call is answered once, by its call
  id, also when a failure, the engine's death or a shutdown overtakes it; a parent's answer never reaches the client;
- the replica (ORCH-INV-206, AR-INV-003): a lost replica ends only requests bound to it; a report acted on comes
  from the replica the request is bound to.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from omni_fsm import Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.errors import MalformedInput
from omni_fsm.invariants import Monitor, Violation
from omni_fsm.trace import read_trace
from omni_fsm.trace.check import check_trace
from omni_fsm.trace.codec import NOT_CARRIED

from .histories import ONE_AR, ONE_DIFF, History, retouch, run

V1_TRACE = Path(__file__).parent / "data" / "v1-pipeline.jsonl"
Step = tuple[ev.Event | None, list[ob.Observation]]


def judged(history: History, complete: bool = True) -> list[Violation]:
    """Return the violations of ``history``, each with the step it was found at (the end marker's: one past)."""
    p = history.pipeline
    monitor = Monitor(p.kinds, p.final, p.capacity)
    for event, outputs in history.steps:
        monitor.step(event, outputs)
    if complete:
        monitor.finish()
    return monitor.violations


def flagged(history: History, complete: bool = True) -> set[tuple[str, int]]:
    """Return ``(invariant, step)`` of every violation (steps count from 1)."""
    return {(v.invariant, v.step) for v in judged(history, complete)}


def answers(history: History, rid: int = 1) -> list[ob.AbortAnswered]:
    return [o for _, outputs in history.steps for o in outputs if isinstance(o, ob.AbortAnswered) and o.rid == rid]


def without_answers(history: History, index: int, rid: int = 1) -> History:
    return history.without(index, lambda o: isinstance(o, ob.AbortAnswered) and o.rid == rid)


# -- ORCH-INV-106: each client abort call is answered, once, by its own call id -------------------------------------


@pytest.mark.covers("ORCH-INV-106")
@pytest.mark.parametrize("overtaken_by, ok", [
    pytest.param(ev.StageFailed(1, 0), False, id="a_failure"),
    pytest.param(ev.ReplicaLost(1, 0), False, id="the_replica_lost"),
    pytest.param(ev.EngineDied(), False, id="the_engine_death"),
    pytest.param(ev.Shutdown(), True, id="a_shutdown"),
])  # fmt: skip
def test_an_abort_overtaken_is_answered_and_flagged_at_the_end_marker_when_not(overtaken_by: ev.Event,
                                                                               ok: bool) -> None:
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Abort(1, call_id=5), overtaken_by)
    assert answers(base) == [ob.AbortAnswered(1, ok, 5, None)]  # in the step that ended it, after its terminal
    assert judged(base) == []
    silent = without_answers(base, base.at(overtaken_by))
    assert judged(silent, complete=False) == []  # no prefix proves it: an answer may still come
    assert flagged(silent) == {("ORCH-INV-106", len(base.steps))}  # the end marker does


@pytest.mark.covers("ORCH-INV-106")
def test_an_n_parent_abort_its_samples_end_otherwise_is_answered() -> None:
    base = run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(1, call_id=4),
               ev.StageFailed(2, 0), ev.StageFinished(3, 0))  # fmt: skip
    assert answers(base) == [ob.AbortAnswered(1, False, 4, None)]
    assert judged(base) == []
    assert flagged(without_answers(base, base.at(ev.StageFinished(3, 0)))) == {("ORCH-INV-106", len(base.steps))}


@pytest.mark.covers("ORCH-INV-106")
def test_a_second_abort_call_while_aborting_gets_its_own_answer() -> None:
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Abort(1, call_id=1), ev.Abort(1, call_id=2),
               ev.AbortDone(1, 0))  # fmt: skip
    assert answers(base) == [ob.AbortAnswered(1, True, 1, None), ob.AbortAnswered(1, True, 2, None)]
    assert judged(base) == []
    done = base.at(ev.AbortDone(1, 0))
    only_first = base.without(done, lambda o: o == ob.AbortAnswered(1, True, 2, None))
    assert flagged(only_first) == {("ORCH-INV-106", len(base.steps))}


@pytest.mark.covers("ORCH-INV-106")
def test_an_answer_under_another_call_id_is_flagged_at_the_answer() -> None:
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Abort(1, call_id=1), ev.AbortDone(1, 0))
    done = base.at(ev.AbortDone(1, 0))
    wrong = base.with_step(done, outputs=retouch(base.outputs(done), lambda o: isinstance(o, ob.AbortAnswered),
                                                 call_id=9))
    assert flagged(wrong, complete=False) == {("ORCH-INV-106", done + 1)}  # at the answer
    assert ("ORCH-INV-106", len(base.steps)) in flagged(wrong)  # and call 1 never got its own


@pytest.mark.covers("ORCH-INV-106")
def test_an_answer_to_a_parent_that_did_not_abort_is_flagged() -> None:
    base = run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(1), ev.AbortDone(2, 0))
    done = base.at(ev.AbortDone(2, 0))
    assert ob.AbortAnswered(2, True, None, 1) in base.outputs(done)
    wrong = base.with_step(done, outputs=retouch(base.outputs(done), lambda o: o == ob.AbortAnswered(2, True, None, 1),
                                                 parent=3))
    assert flagged(wrong, complete=False) == {("ORCH-INV-106", done + 1)}


@pytest.mark.covers("ORCH-INV-106")
def test_a_dropped_abort_call_is_owed_nothing() -> None:
    history = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.Abort(1, call_id=3))
    assert history.outputs(history.at(ev.Abort(1, call_id=3))) == [ob.Dropped(1, "Abort", "unknown")]
    assert judged(history) == []


# -- ORCH-INV-104: the answer to a parent's abort of its dependent never reaches the client ---------------------------


@pytest.mark.covers("ORCH-INV-104")
@pytest.mark.parametrize("submit, dependent", [
    pytest.param(ev.Submit(1, n=2), 2, id="a_sample"),
    pytest.param(ev.Submit(1, companions=1), 2, id="a_companion"),
])  # fmt: skip
def test_a_parents_answer_addressed_to_the_client_is_flagged_at_the_answer(submit: ev.Submit, dependent: int) -> None:
    base = run(ONE_DIFF, submit, ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Abort(1, call_id=8),
               ev.AbortDone(dependent, 0))  # fmt: skip
    done = base.at(ev.AbortDone(dependent, 0))
    owed = ob.AbortAnswered(dependent, True, None, 1)
    assert owed in base.outputs(done) and judged(base, complete=False) == []
    leaked = base.with_step(done, outputs=retouch(base.outputs(done), lambda o: o == owed, call_id=8, parent=None))
    assert flagged(leaked, complete=False) == {("ORCH-INV-104", done + 1)}


# -- ORCH-INV-206 and AR-INV-003: the replica a request is bound to ---------------------------------------------------


def bound_to(history: History, replica: int) -> History:
    """Return ``history`` with every dispatch bound to ``replica`` (as an orchestrator of several replicas names it)."""
    steps = tuple((e, retouch(outs, lambda o: isinstance(o, ob.Dispatched), replica=replica))
                  for e, outs in history.steps)  # fmt: skip
    return attrs.evolve(history, steps=steps)


@pytest.mark.covers("ORCH-INV-206")
def test_a_lost_replica_ends_only_requests_bound_to_it() -> None:
    lost = ev.ReplicaLost(1, 0, replica=1)
    base = bound_to(run(ONE_AR, ev.Submit(1), lost), 1)
    assert judged(base) == []
    elsewhere = bound_to(base, 0)  # the same history, the request bound to replica 0: replica 1's loss ended it
    assert flagged(elsewhere, complete=False) == {("ORCH-INV-206", base.at(lost) + 1)}


@pytest.mark.covers("AR-INV-003")
def test_a_report_from_a_replica_the_request_is_not_bound_to_is_flagged_at_its_step() -> None:
    output = ev.StageOutput(1, 0, 2, replica=1)
    base = bound_to(run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0, replica=1), output,
                        ev.StageFinished(1, 0, replica=1)), 1)  # fmt: skip
    assert judged(base) == []
    stray = base.with_step(base.at(output), ev.StageOutput(1, 0, 2, replica=0), keep_event=False)
    assert flagged(stray) == {("AR-INV-003", base.at(output) + 1)}


@pytest.mark.covers("AR-INV-003")
def test_a_dropped_report_from_another_replica_is_no_violation() -> None:
    history = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.StageOutput(1, 0, replica=1))
    assert judged(history) == []


# -- the trace: version 2 carries them; version 1 still reads, and says what it cannot show ---------------------------


def test_the_checked_in_version_1_trace_reads_and_checks_clean_naming_what_it_cannot_show() -> None:
    assert json.loads(V1_TRACE.read_text().splitlines()[0])["omni_fsm_trace"] == 1
    report = check_trace(str(V1_TRACE))
    assert report.complete and report.findings == [] and report.requests > 1
    assert "not observable in a version-1 trace" in report.summary()
    assert "abort_caller (ORCH-INV-104, ORCH-INV-106)" in report.summary()
    assert "replica (ORCH-INV-206, AR-INV-003)" in report.summary()


def test_a_version_1_trace_reads_with_the_new_fields_at_their_defaults() -> None:
    with read_trace(V1_TRACE) as reader:
        assert reader.header.version == 1 and NOT_CARRIED[1] == {"abort_caller", "replica"}
        steps = list(reader)
    items = [i for s in steps for i in (s.event, *s.outputs) if i is not None]
    assert any(isinstance(i, ev.Abort) and i.call_id == 0 and i.parent is None for i in items)
    assert all(i.call_id is None and i.parent is None for i in items if isinstance(i, ob.AbortAnswered))
    assert all(i.replica == 0 for i in items if isinstance(i, (ob.Dispatched, ev.StageEvent)))


def test_judging_a_version_1_trace_as_if_it_carried_the_callers_would_flag_false_violations() -> None:
    """Why the blind rules are not judged: the defaults are no answer's real call id."""
    with read_trace(V1_TRACE) as reader:
        head, steps = reader.header, list(reader)
    def violations(blind: frozenset[str]) -> set[str]:
        monitor = Monitor(head.kinds, head.final, head.capacity, blind)
        for step in steps:
            monitor.step(step.event, step.outputs)
        return {v.invariant for v in [*monitor.violations, *monitor.finish()]}

    assert violations(NOT_CARRIED[1]) == set()
    assert "ORCH-INV-106" in violations(frozenset())


@pytest.mark.parametrize("version, line, problem", [
    pytest.param(1, {"in": "abort", "rid": 1, "call_id": 3, "parent": None}, "unexpected field", id="v1_with_call_id"),
    pytest.param(1, {"out": "dispatched", "rid": 1, "stage": 0, "replica": 0}, "unexpected field", id="v1_replica"),
    pytest.param(2, {"out": "dispatched", "rid": 1, "stage": 0}, "missing field 'replica'", id="v2_without_replica"),
    pytest.param(2, {"in": "abort", "rid": 1, "call_id": 3, "parent": -1}, "below 0", id="v2_parent_minus_one"),
    pytest.param(2, {"in": "submit", "rid": 5, "n": 1, "companions": 0, "request_id": "a"}, "unexpected field",
                 id="v2_request_id"),
    pytest.param(3, {"in": "submit", "rid": 5, "n": 1, "companions": 0, "request_id": 7}, "expected a string",
                 id="v3_request_id_not_a_string"),
])  # fmt: skip
def test_each_version_reads_only_its_own_fields(tmp_path: Path, version: int, line: dict[str, object],
                                                 problem: str) -> None:
    header = {"omni_fsm_trace": version, "stages": [{"kind": "ar", "final": True}], "capacity": 1}
    submit = [{"in": "submit", "rid": 1, "n": 1, "companions": 0, **({"request_id": None} if version >= 3 else {})}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in (header, *submit, line)))
    with pytest.raises(MalformedInput, match=problem), read_trace(path) as reader:
        list(reader)


def test_a_trace_written_now_is_version_3_and_carries_the_new_fields(tmp_path: Path) -> None:
    from omni_fsm.trace import write_trace

    kinds, final = (StageKind.AR,), (True,)
    lc = Lifecycle(kinds, final)
    events = [ev.Submit(1, request_id="mine"), ev.Abort(1, call_id=7), ev.AbortDone(1, 0)]
    path = tmp_path / "t.jsonl"
    write_trace(path, kinds, final, 1, [(e, lc.handle(e)) for e in events])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["omni_fsm_trace"] == 3
    assert {"in": "submit", "rid": 1, "n": 1, "companions": 0, "request_id": "mine"} in lines
    assert {"in": "abort", "rid": 1, "call_id": 7, "parent": None} in lines
    assert {"out": "abort_answered", "rid": 1, "ok": True, "call_id": 7, "parent": None} in lines
    assert check_trace(str(path)).findings == []
