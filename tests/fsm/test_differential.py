"""``same_client_streams``: two histories of one workload compared stream by stream (ORCH-INV-303)."""

from __future__ import annotations

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import DIFFERENTIAL_CHECKS, same_client_streams
from omni_fsm.invariants.differential import client_streams

PARTIAL = ob.Emitted(0, 1, 1, 1)
SECOND = ob.Emitted(0, 1, 1, 2)
TERMINAL = ob.Emitted(0, 1, 0, 2, finished=True)


def history(*emitted: ob.Emitted) -> list:
    return [(ev.StageOutput(e.rid, e.stage, e.tokens), [ob.SlotTaken(e.rid, e.stage), e]) for e in emitted]


def test_the_same_messages_are_the_same_streams():
    assert same_client_streams(history(PARTIAL, SECOND, TERMINAL), history(PARTIAL, SECOND, TERMINAL)) == []


def test_a_different_message_is_reported_with_its_request_and_position():
    other = ob.Emitted(0, 1, 1, 3)
    problems = same_client_streams(history(PARTIAL, SECOND, TERMINAL), history(PARTIAL, other, TERMINAL))
    assert len(problems) == 1 and problems[0].startswith("ORCH-INV-303: request 0, message 1: ")


def test_a_missing_message_is_reported():
    problems = same_client_streams(history(PARTIAL, SECOND), history(PARTIAL))
    assert problems == [f"ORCH-INV-303: request 0, message 1: {SECOND} on one loop, nothing on the other"]


def test_samples_interleave_freely_but_each_sample_stream_must_match():
    a0, b0 = ob.Emitted(4, 1, 1, 1, sample=0), ob.Emitted(4, 1, 1, 1, sample=1)
    end = ob.Emitted(4, 1, 0, 1, finished=True)
    assert same_client_streams(history(a0, b0, end), history(b0, a0, end)) == []
    assert client_streams(history(a0, b0, end)) == {(4, 0): [a0], (4, 1): [b0], (4, -1): [end]}


def test_the_check_is_registered_for_orch_inv_303():
    assert DIFFERENTIAL_CHECKS["same_client_streams"].invariant == "ORCH-INV-303"


def test_abort_answers_are_compared_per_request():
    yes, no = ob.AbortAnswered(0, True), ob.AbortAnswered(0, False)
    first = [(ev.Abort(0), [ob.AbortRequested(0), yes])]
    second = [(ev.Abort(0), [ob.AbortRequested(0), no])]
    assert same_client_streams(first, first) == []
    assert same_client_streams(first, second) == [
        f"ORCH-INV-303: request 0 abort answers, message 0: {yes} on one loop, {no} on the other"]


def test_abort_calls_numbered_apart_across_requests_are_the_same_calls():
    """Two runs that abort requests 0 and 5 in the other order number the calls apart (1, 2 against 2, 1): the same
    answers to each request's own calls are the same stream."""
    one = [(ev.Abort(0, call_id=1), [ob.AbortAnswered(0, True, call_id=1)]),
           (ev.Abort(5, call_id=2), [ob.AbortAnswered(5, True, call_id=2)])]  # fmt: skip
    other = [(ev.Abort(5, call_id=1), [ob.AbortAnswered(5, True, call_id=1)]),
             (ev.Abort(0, call_id=2), [ob.AbortAnswered(0, True, call_id=2)])]  # fmt: skip
    assert same_client_streams(one, other) == []


def test_an_answer_to_another_call_of_the_same_request_is_a_difference():
    """Request 0 has two abort calls: answering the second first (or one of them twice) is not the same stream."""
    first, second = ob.AbortAnswered(0, True, call_id=1), ob.AbortAnswered(0, True, call_id=2)
    in_order = [(ev.Abort(0, call_id=1), []), (ev.Abort(0, call_id=2), [first, second])]
    twice = [(ev.Abort(0, call_id=1), []), (ev.Abort(0, call_id=2), [first, first])]
    problems = same_client_streams(in_order, twice)
    assert len(problems) == 1 and problems[0].startswith("ORCH-INV-303: request 0 abort answers, message 1: ")


# -- a request's identity across runs: the client's own request id (trace version 3) -----------------------------


def _run(order: list[tuple[str | None, int]], last: int = 2) -> list:
    """A history that submits each ``(request_id, tokens)`` in ``order`` (engine ids 0, 4, ... in that order) and
    ends each with a terminal carrying its tokens."""
    steps: list = []
    for k, (name, tokens) in enumerate(order):
        rid = 4 * k
        steps.append((ev.Submit(rid, request_id=name), [ob.Submitted(rid)]))
        steps.append((ev.StageFinished(rid, 0), [ob.Emitted(rid, 0, 0, tokens, finished=True)]))
    return steps


def test_named_requests_pair_across_runs_that_submit_them_in_another_order():
    """ORCH-INV-303 over concurrent clients: the run that submitted "b" first gave it the engine id 0; paired by the
    client's own ids, the two runs show every request the same messages."""
    one, other = _run([("a", 1), ("b", 2)]), _run([("b", 2), ("a", 1)])
    assert same_client_streams(one, other) == []
    assert set(client_streams(one)) == {("a", -1), ("b", -1)}


def test_without_the_client_s_ids_the_same_runs_pair_by_engine_id_and_differ():
    """What the fact buys: paired by the engine's ids (all a trace carried before version 3), the same two runs
    compare request "a" with request "b"."""
    one, other = _run([(None, 1), (None, 2)]), _run([(None, 2), (None, 1)])
    problems = same_client_streams(one, other)
    assert len(problems) == 2 and problems[0].startswith("ORCH-INV-303: request 0, message 0: ")


def test_a_named_request_that_saw_other_messages_is_reported_by_its_name():
    one, other = _run([("a", 1), ("b", 2)]), _run([("b", 2), ("a", 3)])
    problems = same_client_streams(one, other)
    assert len(problems) == 1 and problems[0].startswith("ORCH-INV-303: request 'a', message 0: ")


def test_a_parent_s_answer_for_its_dependent_reaches_no_client_stream():
    """Answers owed to a parent (its abort of a child) are internal: runs that number the child apart still agree."""
    one = [(ev.Abort(0, call_id=1), [ob.AbortAnswered(1, True, parent=0), ob.AbortAnswered(0, True, call_id=1)])]
    other = [(ev.Abort(0, call_id=1), [ob.AbortAnswered(0, True, call_id=1)])]
    assert same_client_streams(one, other) == []
