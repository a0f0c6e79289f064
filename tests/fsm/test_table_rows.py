"""The rows, written out by hand, keep the facts they used to be derived from: the finish mapping, and the
``ABORTING`` rows that let the scheduler move the interrupted state as the bound rows move it."""

from __future__ import annotations

import pytest

from omni_fsm import BOUND, SPEC, Effect, ReqState
from omni_fsm import events as ev
from omni_fsm.spec.guards import GUARDS, resumes
from omni_fsm.spec.vocabulary import STOP_STATE, StopKind

STOP_GUARD = {StopKind.STOP: "stopped", StopKind.LENGTH: "length_capped", StopKind.REPETITION: "repetition",
              StopKind.IGNORED: "prompt_ignored"}  # fmt: skip
#: the scheduler's reports that move a request within its stage
SCHEDULER = (ev.Scheduled, ev.Preempted, ev.InputReady, ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq,
             ev.AwaitChunk)  # fmt: skip


@pytest.mark.parametrize("stop", list(StopKind), ids=lambda s: s.name)
def test_a_finish_that_ends_the_request_reaches_the_state_of_the_finish_mapping(stop: StopKind) -> None:
    ending = [r for r in SPEC.rows if r.event is ev.StageFinished and STOP_GUARD[stop] in r.when
              and (r.target in STOP_STATE.values())]  # fmt: skip
    assert ending, f"no row ends a request on {stop.name}"
    assert {r.target for r in ending} == {STOP_STATE[stop]}


def test_the_guards_of_the_finish_mapping_test_what_they_are_named_for() -> None:
    for stop, name in STOP_GUARD.items():
        assert [s for s in StopKind if GUARDS[name](None, ev.StageFinished(0, 0, s), None)] == [stop]


def test_the_aborting_rows_follow_every_bound_scheduler_move() -> None:
    """A scheduler report that moves a bound state to a bound state moves the interrupted state while aborting."""
    expected = {(r.event, (resumes(r.source), *r.when), r.unless, r.target) for r in SPEC.rows
                if r.event in SCHEDULER and r.source in BOUND and r.target in BOUND}  # fmt: skip
    following = {(r.event, r.when, r.unless, r.resume_to) for r in SPEC.rows
                  if r.source is ReqState.ABORTING and Effect.FOLLOW_INTERRUPTED in r.effects}  # fmt: skip
    assert following == expected
    assert all(r.target is ReqState.ABORTING and r.effects == (Effect.FOLLOW_INTERRUPTED,) for r in SPEC.rows
               if r.source is ReqState.ABORTING and Effect.FOLLOW_INTERRUPTED in r.effects)  # fmt: skip


def test_rows_of_one_source_state_are_written_together() -> None:
    seen: list[object] = []
    for row in SPEC.rows:
        if not seen or seen[-1] is not row.source:
            assert row.source not in seen, f"{row.source!r}'s rows are split"
            seen.append(row.source)
