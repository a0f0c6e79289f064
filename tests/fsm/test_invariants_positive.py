"""Histories of the real core, for representative scenarios, pass every invariant.

Each test runs ``Lifecycle.handle`` on an event sequence and judges the whole history with
``check_history``: zero violations. It is marked with the invariants the scenario exercises,
and checks the scenario did what it is named for (so a clean verdict is not a vacuous one).
"""

from __future__ import annotations

import pytest

from omni_fsm import ControlMethod, Lifecycle, Outcome, ReqState, StageKind, StopKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import check_history

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
Pipeline = tuple[tuple[StageKind, ...], tuple[bool, ...]]
AR_AR_DIFF: Pipeline = ((AR, AR, DIFF), (False, True, True))  # an earlier final-output stage, then diffusion
ONE_AR: Pipeline = ((AR,), (True,))
ONE_DIFF: Pipeline = ((DIFF,), (True,))
AR_THEN_DIFF: Pipeline = ((AR, DIFF), (False, True))
PAUSE, RESUME = ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER
SLEEP, WAKE = ControlMethod.SLEEP, ControlMethod.WAKE_UP


def clean(pipeline: Pipeline, *events: ev.Event, capacity: int = 1 << 30) -> list[ob.Observation]:
    """Run the core on ``events``; assert its history breaks no invariant; return every observation."""
    kinds, final = pipeline
    lc = Lifecycle(kinds, final, capacity)
    steps = [(e, lc.handle(e)) for e in events]
    violations = check_history(kinds, final, steps, capacity)
    assert violations == [], "\n".join(map(str, violations))
    return [o for _, outputs in steps for o in outputs]


def terminals(observations: list[ob.Observation], rid: int = 1) -> list[ob.Emitted]:
    return [o for o in observations if isinstance(o, ob.Emitted) and o.rid == rid and o.finished]


def the_terminal(observations: list[ob.Observation], rid: int = 1) -> ob.Emitted:
    (only,) = terminals(observations, rid)
    return only


# -- success -----------------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-001", "ORCH-INV-002", "ORCH-INV-100", "ORCH-INV-102", "ORCH-INV-103", "ORCH-INV-109",
                    "ORCH-INV-207", "ORCH-INV-208", "AR-INV-001", "AR-INV-002", "AR-INV-003", "AR-INV-200")  # fmt: skip
def test_success_through_ar_ar_diffusion_with_an_earlier_final_stage() -> None:
    seen = clean(AR_AR_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
                 ev.Scheduled(1, 1), ev.StageOutput(1, 1, 3), ev.StageFinished(1, 1), ev.Scheduled(1, 2),
                 ev.StageOutput(1, 2), ev.StageFinished(1, 2))  # fmt: skip
    assert [o for o in seen if isinstance(o, ob.Forwarded)] == [ob.Forwarded(1, 0, 1), ob.Forwarded(1, 1, 2)]
    assert [o.stage for o in seen if isinstance(o, ob.Emitted) and o.stage_final] == [1]
    assert the_terminal(seen).stage == 2 and the_terminal(seen).outcome is Outcome.FINISHED


@pytest.mark.covers("ORCH-INV-103", "ORCH-INV-101")
def test_ignored_prompt_ends_with_finish_reason_length() -> None:  # B13
    seen = clean(ONE_AR, ev.Submit(1), ev.StageFinished(1, 0, StopKind.IGNORED))
    assert the_terminal(seen).reason == "length" and the_terminal(seen).cumulative == 0


# -- one terminal outcome per request, for each outcome class (the promotion gate) -----------------------------

OUTCOME_CLASSES = [
    pytest.param(Outcome.FINISHED, [ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0)], id="success",
                 marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(Outcome.ABORTED, [ev.StageOutput(1, 0, 2), ev.Abort(1), ev.AbortDone(1, 0)], id="abort",
                 marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-209")),
    pytest.param(Outcome.FAILED, [ev.StageOutput(1, 0, 2), ev.StageFailed(1, 0)], id="request_scoped_failure",
                 marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-206")),
    pytest.param(Outcome.FATAL, [ev.StageOutput(1, 0, 2), ev.EngineDied()], id="fatal_engine_failure",
                 marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-210")),
]  # fmt: skip


@pytest.mark.parametrize("outcome, events", OUTCOME_CLASSES)
def test_one_terminal_per_request_for_each_outcome_class(outcome: Outcome, events: list[ev.Event]) -> None:
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), *events, ev.StageOutput(1, 0), ev.StageFinished(1, 0))
    assert the_terminal(seen).outcome is outcome


def test_every_outcome_class_is_demonstrated() -> None:
    assert {param.values[0] for param in OUTCOME_CLASSES} == set(Outcome)


# -- abort from every sub-state ---------------------------------------------------------------------------

#: sub-state -> the events that put request 1 (of ONE_AR, or of its pipeline) there
SUB_STATES: dict[ReqState, tuple[Pipeline, list[ev.Event]]] = {
    ReqState.WAITING: (ONE_AR, [ev.Submit(1)]),
    ReqState.WAITING_FOR_GRAMMAR: (ONE_AR, [ev.Submit(1), ev.AwaitGrammar(1, 0)]),
    ReqState.WAITING_FOR_REMOTE_KVS: (ONE_AR, [ev.Submit(1), ev.AwaitRemoteKVs(1, 0)]),
    ReqState.RUNNING: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2)]),
    ReqState.WAITING_FOR_STREAMING_REQ: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2),
                                                  ev.AwaitStreamingReq(1, 0)]),
    ReqState.WAITING_FOR_CHUNK: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2),
                                          ev.AwaitChunk(1, 0)]),
    ReqState.PREEMPTED: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Preempted(1, 0)]),
    ReqState.PENDING: (ONE_AR, [ev.Control(1, PAUSE), ev.RpcDone(1), ev.Submit(1)]),
    ReqState.STAGE_DONE: (AR_THEN_DIFF, [ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0),
                                         ev.StageFinished(1, 0)]),
    ReqState.AWAITING_CHILDREN: (ONE_AR, [ev.Submit(1, n=2), ev.Scheduled(2, 0)]),
    ReqState.ABORTING: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.Abort(1)]),
}  # fmt: skip
#: what lands every physical abort the abort asked for, by sub-state
LANDING: dict[ReqState, list[ev.Event]] = {
    ReqState.PENDING: [],
    ReqState.STAGE_DONE: [ev.AbortDone(2, 0)],
    ReqState.AWAITING_CHILDREN: [ev.AbortDone(2, 0), ev.AbortDone(3, 0)],
}


@pytest.mark.covers("ORCH-INV-209", "ORCH-INV-202", "ORCH-INV-200", "ORCH-INV-101", "ORCH-INV-208", "AR-INV-200")
@pytest.mark.parametrize("sub_state", list(SUB_STATES), ids=lambda s: s.name.lower())
def test_abort_ends_the_request_from_every_sub_state(sub_state: ReqState) -> None:  # B5
    pipeline, reach = SUB_STATES[sub_state]
    kinds, final = pipeline
    lc = Lifecycle(kinds, final)
    for event in reach:
        lc.handle(event)
    assert lc.state_of(1) is sub_state
    landing = LANDING.get(sub_state, [ev.AbortDone(1, 0)])
    seen = clean(pipeline, *reach, ev.Abort(1), *landing)
    end = the_terminal(seen)
    assert end.outcome is Outcome.ABORTED and end.reason == "abort"
    if sub_state is not ReqState.AWAITING_CHILDREN:  # a parent's abort is answered per child (see findings)
        assert [o for o in seen if isinstance(o, ob.AbortAnswered) and o.rid == 1][-1].ok


@pytest.mark.covers("ORCH-INV-201", "ORCH-INV-209")
def test_diffusion_abort_is_whole_sample_retry() -> None:
    seen = clean(AR_THEN_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 4), ev.StageFinished(1, 0),
                 ev.Scheduled(1, 1), ev.StageOutput(1, 1, 2), ev.Abort(1), ev.AbortDone(1, 1))  # fmt: skip
    assert not [o for o in seen if isinstance(o, ob.Emitted) and not o.finished]
    assert the_terminal(seen).cumulative == 0


@pytest.mark.covers("ORCH-INV-202", "ORCH-INV-200", "ORCH-INV-106")
def test_failed_physical_abort_then_retry_delivers_the_whole_prefix() -> None:  # B8
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1),
                 ev.AbortFailed(1, 0), ev.StageOutput(1, 0, 1), ev.Abort(1), ev.AbortDone(1, 0))  # fmt: skip
    assert [o.ok for o in seen if isinstance(o, ob.AbortAnswered)] == [False, True]
    assert seen.count(ob.AbortCommitted(1)) == 1
    assert the_terminal(seen).cumulative == 3


@pytest.mark.covers("ORCH-INV-200", "ORCH-INV-202")
def test_stage_finish_racing_an_abort_still_ends_aborted_with_prefix() -> None:
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 3), ev.Abort(1),
                 ev.StageFinished(1, 0), ev.AbortDone(1, 0))  # fmt: skip
    assert the_terminal(seen).outcome is Outcome.ABORTED and the_terminal(seen).cumulative == 3


# -- parallel sampling and CFG companions ------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-203", "ORCH-INV-105", "ORCH-INV-104", "ORCH-INV-101")
def test_child_abort_then_parent_abort() -> None:  # B1, B2
    seen = clean(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.StageOutput(2, 0, 2),
                 ev.Abort(2), ev.AbortDone(2, 0), ev.StageOutput(3, 0), ev.Abort(1), ev.AbortDone(3, 0))  # fmt: skip
    assert {o.rid for o in seen if isinstance(o, ob.Emitted)} == {1}
    assert the_terminal(seen).outcome is Outcome.ABORTED
    assert seen[-1] == ob.Released(1)


@pytest.mark.covers("ORCH-INV-203", "ORCH-INV-105", "ORCH-INV-208")
def test_aborting_every_child_drops_the_parent() -> None:  # B2
    seen = clean(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(2), ev.AbortDone(2, 0),
                 ev.Abort(3), ev.AbortDone(3, 0))  # fmt: skip
    assert ob.Released(1) in seen


@pytest.mark.covers("ORCH-INV-105", "ORCH-INV-104", "ORCH-INV-206")
def test_children_ending_apart_fold_into_one_parent_terminal() -> None:  # B1
    seen = clean(ONE_AR, ev.Submit(1, n=3), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Scheduled(4, 0),
                 ev.StageFinished(2, 0), ev.StageFailed(3, 0), ev.StageOutput(4, 0),
                 ev.StageFinished(4, 0))  # fmt: skip
    assert the_terminal(seen).outcome is Outcome.FAILED
    assert [o.sample for o in seen if isinstance(o, ob.Emitted) and o.stage_final] == [0, 1, 2]


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-001")
def test_companions_done_then_forward() -> None:
    seen = clean(AR_THEN_DIFF, ev.Submit(1, companions=2), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Scheduled(3, 0),
                 ev.StageFinished(1, 0), ev.StageFinished(2, 0), ev.StageFinished(3, 0), ev.Scheduled(1, 1),
                 ev.StageFinished(1, 1))  # fmt: skip
    forward = seen.index(ob.Forwarded(1, 0, 1))
    assert forward > seen.index(ob.Released(2)) and forward > seen.index(ob.Released(3))


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-206", "ORCH-INV-101")
def test_lost_companion_fails_its_parent_only() -> None:
    seen = clean(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(2, 0),
                 ev.Scheduled(5, 0), ev.StageFinished(1, 0), ev.ReplicaLost(2, 0), ev.StageFinished(5, 0),
                 ev.Scheduled(5, 1), ev.StageFinished(5, 1))  # fmt: skip
    assert the_terminal(seen, 1).outcome is Outcome.FAILED
    assert the_terminal(seen, 5).outcome is Outcome.FINISHED


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-209")
def test_parent_abort_reaches_its_companions() -> None:
    seen = clean(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Abort(1),
                 ev.AbortDone(1, 0), ev.AbortDone(2, 0))  # fmt: skip
    assert ob.AbortRequested(2) in seen and ob.Released(2) in seen


# -- failures, engine death, shutdown ------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-206", "ORCH-INV-107", "ORCH-INV-101")
def test_replica_loss_ends_only_its_request() -> None:
    seen = clean(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(5, 0), ev.ReplicaLost(1, 0),
                 ev.StageOutput(1, 0), ev.StageFinished(5, 0))  # fmt: skip
    assert the_terminal(seen, 1).outcome is Outcome.FAILED
    assert the_terminal(seen, 5).outcome is Outcome.FINISHED


@pytest.mark.covers("ORCH-INV-210", "ORCH-INV-101", "ORCH-INV-106", "ORCH-INV-300", "ORCH-INV-107")
def test_engine_death_fails_every_request_then_shuts_down() -> None:  # B9
    seen = clean(AR_THEN_DIFF, ev.Submit(1), ev.Submit(5), ev.Submit(9, companions=1), ev.Scheduled(1, 0),
                 ev.StageFinished(1, 0), ev.Scheduled(10, 0), ev.Control(1, SLEEP), ev.EngineDied(),
                 ev.StageOutput(1, 1), ev.RpcDone(1), ev.Shutdown())  # fmt: skip
    assert {t.rid: t.outcome for t in seen if isinstance(t, ob.Emitted) and t.finished} == {
        1: Outcome.FATAL,
        5: Outcome.FATAL,
        9: Outcome.FATAL,
    }
    assert ob.RpcAnswered(1, SLEEP, False, "engine died") in seen


@pytest.mark.covers("ORCH-INV-211", "ORCH-INV-300", "ORCH-INV-200", "ORCH-INV-107")
def test_shutdown_aborts_every_request_and_stops_the_orchestrator_first() -> None:
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Submit(5), ev.Shutdown(),
                 ev.StageOutput(1, 0), ev.Shutdown())  # fmt: skip
    assert the_terminal(seen, 1).outcome is Outcome.ABORTED and the_terminal(seen, 1).cumulative == 2
    assert the_terminal(seen, 5).outcome is Outcome.ABORTED
    assert seen.index(ob.OrchestratorStopped()) < seen.index(ob.RuntimesStopped())


# -- the control plane ------------------------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-205", "ORCH-INV-106", "ORCH-INV-108")
def test_control_rpcs_answer_their_callers_and_a_failing_pause_ends_nothing() -> None:  # B11
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Control(1, PAUSE), ev.Control(2, SLEEP),
                 ev.RpcFailed(1, "worker raised"), ev.RpcDone(2), ev.Control(3, WAKE), ev.RpcFailed(3, "oom"),
                 ev.Control(4, WAKE), ev.RpcDone(4), ev.RpcDone(4), ev.Control(5, RESUME), ev.RpcDone(5),
                 ev.StageFinished(1, 0))  # fmt: skip
    answers = [o for o in seen if isinstance(o, ob.RpcAnswered)]
    assert [(a.call_id, a.ok, a.error) for a in answers] == [
        (1, False, "worker raised"),
        (2, True, None),
        (3, False, "oom"),
        (4, True, None),
        (5, True, None),
    ]
    assert the_terminal(seen).outcome is Outcome.FINISHED


@pytest.mark.covers("ORCH-INV-108", "ORCH-INV-103")
def test_sleep_refuses_submits_with_an_error_terminal() -> None:
    seen = clean(ONE_AR, ev.Submit(1), ev.Control(1, SLEEP), ev.RpcDone(1), ev.Submit(5), ev.Control(2, WAKE),
                 ev.RpcDone(2), ev.Control(3, RESUME), ev.RpcDone(3), ev.Submit(9), ev.Scheduled(1, 0),
                 ev.StageFinished(1, 0), ev.Scheduled(9, 0), ev.StageFinished(9, 0))  # fmt: skip
    assert the_terminal(seen, 5).outcome is Outcome.FAILED and ob.Dispatched(5, 0) not in seen
    assert the_terminal(seen, 9).outcome is Outcome.FINISHED


@pytest.mark.covers("ORCH-INV-108", "ORCH-INV-109")
def test_pause_holds_admission_until_resume() -> None:
    seen = clean(ONE_AR, ev.Control(1, PAUSE), ev.RpcDone(1), ev.Submit(1), ev.Submit(5), ev.Control(2, RESUME),
                 ev.RpcDone(2), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.Scheduled(5, 0), ev.StageFinished(5, 0),
                 capacity=1)  # fmt: skip
    resumed = seen.index(ob.RpcAnswered(2, RESUME, True))
    assert seen.index(ob.Dispatched(1, 0)) > resumed and seen.index(ob.Dispatched(5, 0)) > resumed


# -- scheduling as upstream, late reports, capacity ------------------------------------------------------------


@pytest.mark.covers("AR-INV-001", "ORCH-INV-109", "AR-INV-200")
def test_ar_scheduling_follows_upstream_status_transitions() -> None:
    clean(ONE_AR, ev.Submit(1), ev.AwaitGrammar(1, 0), ev.InputReady(1, 0), ev.AwaitRemoteKVs(1, 0),
          ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0), ev.Scheduled(1, 0),
          ev.AwaitStreamingReq(1, 0), ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.AwaitChunk(1, 0),
          ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.StageFinished(1, 0, StopKind.LENGTH))  # fmt: skip


@pytest.mark.covers("AR-INV-001")
def test_a_preempted_request_reloads_its_kv_and_is_queued_preempted_again() -> None:  # vLLM 0.32
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0),
                 ev.AwaitRemoteKVs(1, 0), ev.Preempted(1, 0), ev.Scheduled(1, 0), ev.StageFinished(1, 0))  # fmt: skip
    assert not [o for o in seen if isinstance(o, ob.Rejected)]
    assert the_terminal(seen).outcome is Outcome.FINISHED


@pytest.mark.covers("AR-INV-001")
def test_a_streaming_session_whose_input_ends_while_parked_finishes() -> None:  # vLLM 0.32
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.AwaitStreamingReq(1, 0),
                 ev.StageFinished(1, 0))  # fmt: skip
    assert not [o for o in seen if isinstance(o, ob.Rejected)]
    assert (the_terminal(seen).outcome, the_terminal(seen).reason) == (Outcome.FINISHED, "stop")


@pytest.mark.covers("AR-INV-001")
def test_a_preempted_request_gets_its_in_flight_tokens_and_may_stop_on_them() -> None:  # vLLM's AsyncScheduler
    seen = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0),
                 ev.StageOutput(1, 0, 1), ev.StageFinished(1, 0))  # fmt: skip
    assert not [o for o in seen if isinstance(o, ob.Rejected)]
    assert [o.tokens for o in seen if isinstance(o, ob.Emitted) and not o.finished] == [1, 1]
    assert (the_terminal(seen).outcome, the_terminal(seen).reason) == (Outcome.FINISHED, "stop")


@pytest.mark.covers("AR-INV-001", "AR-INV-200")
def test_parked_requests_hold_no_running_slot() -> None:  # B4: vLLM parks any number of requests
    seen = clean(ONE_AR, ev.Submit(1), ev.Submit(2), ev.Submit(3), ev.Scheduled(1, 0), ev.AwaitGrammar(2, 0),
                 ev.AwaitRemoteKVs(3, 0), ev.StageFinished(1, 0), ev.InputReady(2, 0), ev.Scheduled(2, 0),
                 ev.StageFinished(2, 0), ev.InputReady(3, 0), ev.Scheduled(3, 0), ev.StageFinished(3, 0),
                 capacity=1)  # fmt: skip
    assert not [o for o in seen if isinstance(o, ob.Rejected)]
    assert [o.rid for o in seen if isinstance(o, ob.SlotTaken)] == [1, 2, 3]


@pytest.mark.covers("ORCH-INV-107", "AR-INV-003", "ORCH-INV-100")
def test_late_and_stale_reports_are_dropped() -> None:  # B3, B10
    seen = clean(AR_THEN_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.StageOutput(1, 0),
                 ev.StageFinished(1, 0), ev.Scheduled(1, 1), ev.StageFinished(1, 1), ev.StageFinished(1, 1),
                 ev.AbortDone(1, 1), ev.StageOutput(7, 0), ev.RpcDone(3))  # fmt: skip
    assert [o.why for o in seen if isinstance(o, ob.Dropped)] == ["stale", "stale", "unknown", "unknown", "unknown",
                                                                  "unknown"]  # fmt: skip


@pytest.mark.covers("ORCH-INV-109", "AR-INV-200")
def test_slots_are_reused_within_capacity() -> None:  # B4, B6
    seen = clean(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Submit(9), ev.Scheduled(1, 0), ev.Abort(1), ev.AbortDone(1, 0),
                 ev.Scheduled(5, 0), ev.StageFinished(5, 0), ev.AwaitGrammar(9, 0), ev.InputReady(9, 0),
                 ev.Scheduled(9, 0), ev.StageFinished(9, 0), capacity=1)  # fmt: skip
    assert seen.count(ob.SlotTaken(9, 0)) == 1  # running takes a slot; the grammar wait before it holds none (B4)


# -- regressions: histories that once were judged wrongly (n>1 parents, repeated aborts, orphans) ----------


def test_parallel_sampling_through_two_stages() -> None:
    clean(((AR, AR), (False, True)), ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.StageFinished(2, 0),
          ev.Scheduled(2, 1), ev.StageFinished(2, 1), ev.Scheduled(3, 0), ev.StageFinished(3, 0), ev.Scheduled(3, 1),
          ev.StageFinished(3, 1))  # fmt: skip


@pytest.mark.parametrize("ending", [ev.EngineDied(), ev.Shutdown()], ids=["engine_death", "shutdown"])
def test_engine_wide_end_of_a_parallel_sampling_request(ending: ev.Event) -> None:
    clean(ONE_AR, ev.Submit(1, n=2), ending)


def test_parallel_sampling_parent_aborted_twice() -> None:
    clean(ONE_AR, ev.Submit(1, n=2), ev.Abort(1), ev.Abort(1), ev.AbortDone(2, 0), ev.AbortDone(3, 0))


def test_companion_outliving_its_parent() -> None:
    clean(ONE_AR, ev.Submit(1, companions=1), ev.StageOutput(1, 0), ev.AbortFailed(2, 0), ev.InputReady(2, 0))


def test_child_abort_landing_beside_its_siblings_failure() -> None:
    clean(ONE_AR, ev.Submit(1, n=2), ev.Abort(2), ev.StageFailed(3, 0), ev.StageFinished(2, 0))
