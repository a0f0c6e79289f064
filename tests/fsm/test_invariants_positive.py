"""Histories of the real core, for representative scenarios, pass every invariant.

Each test runs ``Lifecycle.handle`` on an event sequence and judges the whole history with
``check_history``: zero violations. It is marked with the invariants the scenario exercises,
and checks the scenario did what it is named for, so a clean verdict is not a vacuous one: the
states each request went through, the messages the client got, each terminal with its reason,
and (in ``clean``, for every test) exactly the reports the core dropped or rejected. A wrong table
the monitor cannot see (a request failed early, its later reports dropped) fails the scenario:
``test_a_wrong_table_the_monitor_passes_fails_the_scenario`` shows it for a few.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial

import attrs
import pytest

from omni_fsm import (
    SPEC,
    ControlMethod,
    Effect,
    EngineState,
    Lifecycle,
    Outcome,
    ReqState,
    Spec,
    StageKind,
    StopKind,
    Violation,
)
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import check_history

from .faults import edit_rows

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
S = ReqState
Pipeline = tuple[tuple[StageKind, ...], tuple[bool, ...]]
AR_AR_DIFF: Pipeline = ((AR, AR, DIFF), (False, True, True))  # an earlier final-output stage, then diffusion
ONE_AR: Pipeline = ((AR,), (True,))
ONE_DIFF: Pipeline = ((DIFF,), (True,))
AR_THEN_DIFF: Pipeline = ((AR, DIFF), (False, True))
PAUSE, RESUME = ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER
SLEEP, WAKE = ControlMethod.SLEEP, ControlMethod.WAKE_UP
FINISHED, ABORTED, FAILED, FATAL = Outcome.FINISHED, Outcome.ABORTED, Outcome.FAILED, Outcome.FATAL

#: the table the scenarios run on (``test_a_wrong_table_the_monitor_passes_fails_the_scenario`` swaps it)
TABLE: Spec = SPEC


@attrs.frozen
class Run:
    """What the core did in a scenario: every observation, and after each step the state of each tracked request."""

    seen: list[ob.Observation]
    states: list[dict[int, ReqState]]

    def path(self, rid: int = 1) -> list[ReqState | None]:
        """Return the states ``rid`` went through, step by step, a repeat folded (``None``: its record dropped)."""
        path: list[ReqState | None] = []
        for states in self.states:
            state = states.get(rid)
            if (path and path[-1] is not state) or (not path and state is not None):
                path.append(state)
        return path

    def messages(self, rid: int = 1) -> list[ob.Emitted]:
        """Return the client's messages for ``rid`` before its terminal."""
        return [o for o in self.seen if isinstance(o, ob.Emitted) and o.rid == rid and not o.finished]

    def terminal(self, rid: int = 1) -> ob.Emitted:
        """Return the one terminal message of ``rid``."""
        (only,) = [o for o in self.seen if isinstance(o, ob.Emitted) and o.rid == rid and o.finished]
        return only

    def end(self, rid: int = 1) -> tuple[Outcome | None, str | None]:
        """Return the outcome and the finish reason (as the client reads it) of ``rid``'s terminal."""
        end = self.terminal(rid)
        return end.outcome, None if end.reason is None else end.reason.value

    def sample_ends(self, rid: int = 1) -> list[tuple[int, Outcome | None]]:
        """Return each n>1 sample's end (its stage-final message) as ``(sample, outcome)``, in order."""
        return [(o.sample, o.outcome) for o in self.messages(rid) if o.stage_final and o.sample >= 0]

    def engine(self) -> list[EngineState]:
        """Return the engine states the history went through."""
        return [o.state for o in self.seen if isinstance(o, ob.EngineChanged)]


def clean(pipeline: Pipeline, *events: ev.Event, capacity: int = 1 << 30,
          refused: Sequence[ob.Observation] = ()) -> Run:  # fmt: skip
    """Run the core on ``events``; assert no invariant broke and the core refused (dropped or rejected)
    exactly ``refused``; return what it did."""
    kinds, final = pipeline
    lc = Lifecycle(kinds, final, capacity, spec=TABLE)
    steps: list[tuple[ev.Event, list[ob.Observation]]] = []
    states: list[dict[int, ReqState]] = []
    for event in events:
        steps.append((event, lc.handle(event)))
        states.append({rid: rec.state for rid, rec in lc.records.items()})
    violations = check_history(kinds, final, steps, capacity)
    assert violations == [], "\n".join(map(str, violations))
    seen = [o for _, outputs in steps for o in outputs]
    assert [o for o in seen if isinstance(o, (ob.Dropped, ob.Rejected))] == list(refused)
    return Run(seen, states)


def dropped(rid: int, *events: str, why: str = "unknown") -> list[ob.Observation]:
    """Return the ``Dropped`` observations of ``events`` (their type names) about ``rid``."""
    return [ob.Dropped(rid, event, why) for event in events]


# -- success -----------------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-001", "ORCH-INV-002", "ORCH-INV-100", "ORCH-INV-102", "ORCH-INV-103", "ORCH-INV-109",
                    "ORCH-INV-207", "ORCH-INV-208", "AR-INV-001", "AR-INV-002", "AR-INV-003", "AR-INV-200")  # fmt: skip
def test_success_through_ar_ar_diffusion_with_an_earlier_final_stage() -> None:
    run = clean(AR_AR_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
                ev.Scheduled(1, 1), ev.StageOutput(1, 1, 3), ev.StageFinished(1, 1), ev.Scheduled(1, 2),
                ev.StageOutput(1, 2), ev.StageFinished(1, 2))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING] * 3 + [None]  # queued and run at each stage, then dropped
    assert [o for o in run.seen if isinstance(o, ob.Forwarded)] == [ob.Forwarded(1, 0, 1), ob.Forwarded(1, 1, 2)]
    assert [(o.stage, o.tokens, o.stage_final) for o in run.messages()] == [(1, 3, False), (1, 0, True)]
    assert run.end() == (FINISHED, "stop") and run.terminal().stage == 2


@pytest.mark.covers("ORCH-INV-103", "ORCH-INV-101")
def test_ignored_prompt_ends_with_finish_reason_length() -> None:  # B13
    run = clean(ONE_AR, ev.Submit(1), ev.StageFinished(1, 0, StopKind.IGNORED))
    assert run.path() == [S.WAITING, None] and run.messages() == []
    assert run.end() == (FINISHED, "length") and run.terminal().cumulative == 0


# -- one terminal outcome per request, for each outcome class (the promotion gate) -----------------------------

OUTCOME_CLASSES = [
    pytest.param(FINISHED, "stop", [ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0)], [S.WAITING, S.RUNNING, None],
                 id="success", marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(ABORTED, "abort", [ev.StageOutput(1, 0, 2), ev.Abort(1), ev.AbortDone(1, 0)],
                 [S.WAITING, S.RUNNING, S.ABORTING, None], id="abort",
                 marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-209")),
    pytest.param(FAILED, "error", [ev.StageOutput(1, 0, 2), ev.StageFailed(1, 0)], [S.WAITING, S.RUNNING, None],
                 id="request_scoped_failure", marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-206")),
    pytest.param(FATAL, "error", [ev.StageOutput(1, 0, 2), ev.EngineDied()], [S.WAITING, S.RUNNING, None],
                 id="fatal_engine_failure", marks=pytest.mark.covers("ORCH-INV-101", "ORCH-INV-210")),
]  # fmt: skip


@pytest.mark.parametrize("outcome, reason, events, path", OUTCOME_CLASSES)
def test_one_terminal_per_request_for_each_outcome_class(outcome: Outcome, reason: str, events: list[ev.Event],
                                                         path: list[ReqState | None]) -> None:  # fmt: skip
    late = [ev.StageOutput(1, 0), ev.StageFinished(1, 0)]  # reports after the terminal: dropped
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), *events, *late,
                refused=dropped(1, "StageOutput", "StageFinished"))  # fmt: skip
    assert run.path() == path
    assert [o.tokens for o in run.messages()] == [2]
    assert run.end() == (outcome, reason)


def test_every_outcome_class_is_demonstrated() -> None:
    assert {param.values[0] for param in OUTCOME_CLASSES} == set(Outcome)


# -- abort from every sub-state ---------------------------------------------------------------------------

#: sub-state -> the events that put request 1 (of ONE_AR, or of its pipeline) there
SUB_STATES: dict[ReqState, tuple[Pipeline, list[ev.Event]]] = {
    S.WAITING: (ONE_AR, [ev.Submit(1)]),
    S.WAITING_FOR_GRAMMAR: (ONE_AR, [ev.Submit(1), ev.AwaitGrammar(1, 0)]),
    S.WAITING_FOR_REMOTE_KVS: (ONE_AR, [ev.Submit(1), ev.AwaitRemoteKVs(1, 0)]),
    S.RUNNING: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2)]),
    S.WAITING_FOR_STREAMING_REQ: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2),
                                           ev.AwaitStreamingReq(1, 0)]),
    S.WAITING_FOR_CHUNK: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.AwaitChunk(1, 0)]),
    S.PREEMPTED: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Preempted(1, 0)]),
    S.PENDING: (ONE_AR, [ev.Control(1, PAUSE), ev.RpcDone(1), ev.Submit(1)]),
    S.STAGE_DONE: (AR_THEN_DIFF, [ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0),
                                  ev.StageFinished(1, 0)]),
    S.AWAITING_CHILDREN: (ONE_AR, [ev.Submit(1, n=2), ev.Scheduled(2, 0)]),
    S.ABORTING: (ONE_AR, [ev.Submit(1), ev.Scheduled(1, 0), ev.Abort(1)]),
}  # fmt: skip
#: what lands every physical abort the abort asked for, by sub-state
LANDING: dict[ReqState, list[ev.Event]] = {
    S.PENDING: [],
    S.STAGE_DONE: [ev.AbortDone(2, 0)],
    S.AWAITING_CHILDREN: [ev.AbortDone(2, 0), ev.AbortDone(3, 0)],
}


@pytest.mark.covers("ORCH-INV-209", "ORCH-INV-202", "ORCH-INV-200", "ORCH-INV-101", "ORCH-INV-208", "AR-INV-200")
@pytest.mark.parametrize("sub_state", list(SUB_STATES), ids=lambda s: s.name.lower())
def test_abort_ends_the_request_from_every_sub_state(sub_state: ReqState) -> None:  # B5
    pipeline, reach = SUB_STATES[sub_state]
    run = clean(pipeline, *reach, ev.Abort(1), *LANDING.get(sub_state, [ev.AbortDone(1, 0)]))
    assert run.states[len(reach) - 1].get(1) is sub_state
    assert run.path()[-1] is None
    assert run.end() == (ABORTED, "abort")
    if sub_state is not S.AWAITING_CHILDREN:  # a parent's abort is answered per child (see findings)
        assert [o for o in run.seen if isinstance(o, ob.AbortAnswered) and o.rid == 1][-1].ok


@pytest.mark.covers("ORCH-INV-201", "ORCH-INV-209")
def test_diffusion_abort_is_whole_sample_retry() -> None:
    run = clean(AR_THEN_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 4), ev.StageFinished(1, 0),
                ev.Scheduled(1, 1), ev.StageOutput(1, 1, 2), ev.Abort(1), ev.AbortDone(1, 1))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.WAITING, S.RUNNING, S.ABORTING, None]
    assert ob.Forwarded(1, 0, 1) in run.seen and run.messages() == []
    assert run.end() == (ABORTED, "abort") and (run.terminal().stage, run.terminal().cumulative) == (1, 0)


@pytest.mark.covers("ORCH-INV-202", "ORCH-INV-200", "ORCH-INV-106")
def test_failed_physical_abort_then_retry_delivers_the_whole_prefix() -> None:  # B8
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1),
                ev.AbortFailed(1, 0), ev.StageOutput(1, 0, 1), ev.Abort(1), ev.AbortDone(1, 0))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.ABORTING, S.RUNNING, S.ABORTING, None]
    assert [o.ok for o in run.seen if isinstance(o, ob.AbortAnswered)] == [False, True]
    assert run.seen.count(ob.AbortCommitted(1)) == 1
    assert [o.tokens for o in run.messages()] == [2, 1]
    assert run.end() == (ABORTED, "abort") and run.terminal().cumulative == 3


@pytest.mark.covers("ORCH-INV-200", "ORCH-INV-202")
def test_stage_finish_racing_an_abort_still_ends_aborted_with_prefix() -> None:
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 3), ev.Abort(1),
                ev.StageFinished(1, 0), ev.AbortDone(1, 0), refused=dropped(1, "AbortDone"))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.ABORTING, None]  # the finish landed the abort
    assert run.end() == (ABORTED, "abort") and run.terminal().cumulative == 3


# -- parallel sampling and CFG companions ------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-203", "ORCH-INV-105", "ORCH-INV-104", "ORCH-INV-101")
def test_child_abort_then_parent_abort() -> None:  # B1, B2
    run = clean(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.StageOutput(2, 0, 2),
                ev.Abort(2), ev.AbortDone(2, 0), ev.StageOutput(3, 0), ev.Abort(1), ev.AbortDone(3, 0))  # fmt: skip
    assert run.path(1) == [S.AWAITING_CHILDREN, S.ABORTING_CHILDREN, None]
    assert run.path(2) == run.path(3) == [S.WAITING, S.RUNNING, S.ABORTING, None]
    assert {o.rid for o in run.seen if isinstance(o, ob.Emitted)} == {1}
    assert run.sample_ends() == [(0, ABORTED), (1, ABORTED)]
    assert run.end() == (ABORTED, "abort")
    assert run.seen[-1] == ob.Released(1)


@pytest.mark.covers("ORCH-INV-203", "ORCH-INV-105", "ORCH-INV-208")
def test_aborting_every_child_drops_the_parent() -> None:  # B2
    run = clean(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(2), ev.AbortDone(2, 0),
                ev.Abort(3), ev.AbortDone(3, 0))  # fmt: skip
    assert run.path(1) == [S.AWAITING_CHILDREN, None]
    assert run.path(2) == run.path(3) == [S.WAITING, S.RUNNING, S.ABORTING, None]
    assert run.sample_ends() == [(0, ABORTED), (1, ABORTED)]
    assert run.end() == (ABORTED, "abort") and ob.Released(1) in run.seen


@pytest.mark.covers("ORCH-INV-105", "ORCH-INV-104", "ORCH-INV-206")
def test_children_ending_apart_fold_into_one_parent_terminal() -> None:  # B1
    run = clean(ONE_AR, ev.Submit(1, n=3), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Scheduled(4, 0),
                ev.StageFinished(2, 0), ev.StageFailed(3, 0), ev.StageOutput(4, 0),
                ev.StageFinished(4, 0))  # fmt: skip
    assert run.path(1) == [S.AWAITING_CHILDREN, None]
    assert run.path(2) == run.path(3) == run.path(4) == [S.WAITING, S.RUNNING, None]
    assert run.sample_ends() == [(0, FINISHED), (1, FAILED), (2, FINISHED)]
    assert run.end() == (FAILED, "error")


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-001")
def test_companions_done_then_forward() -> None:
    run = clean(AR_THEN_DIFF, ev.Submit(1, companions=2), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Scheduled(3, 0),
                ev.StageFinished(1, 0), ev.StageFinished(2, 0), ev.StageFinished(3, 0), ev.Scheduled(1, 1),
                ev.StageFinished(1, 1))  # fmt: skip
    assert run.path(1) == [S.WAITING, S.RUNNING, S.STAGE_DONE, S.WAITING, S.RUNNING, None]  # held for its companions
    assert run.path(2) == run.path(3) == [S.WAITING, S.RUNNING, None]
    forward = run.seen.index(ob.Forwarded(1, 0, 1))
    assert forward > run.seen.index(ob.Released(2)) and forward > run.seen.index(ob.Released(3))
    assert run.end() == (FINISHED, "stop") and run.terminal().stage == 1


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-206", "ORCH-INV-101")
def test_lost_companion_fails_its_parent_only() -> None:
    run = clean(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(2, 0),
                ev.Scheduled(5, 0), ev.StageFinished(1, 0), ev.ReplicaLost(2, 0), ev.StageFinished(5, 0),
                ev.Scheduled(5, 1), ev.StageFinished(5, 1))  # fmt: skip
    assert run.path(1) == [S.WAITING, S.RUNNING, S.STAGE_DONE, None]
    assert run.path(5) == [S.WAITING, S.RUNNING, S.WAITING, S.RUNNING, None]
    assert run.end(1) == (FAILED, "error")
    assert run.end(5) == (FINISHED, "stop") and run.terminal(5).stage == 1


@pytest.mark.covers("ORCH-INV-204", "ORCH-INV-209")
def test_parent_abort_reaches_its_companions() -> None:
    run = clean(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Abort(1),
                ev.AbortDone(1, 0), ev.AbortDone(2, 0))  # fmt: skip
    assert run.path(1) == run.path(2) == [S.WAITING, S.RUNNING, S.ABORTING, None]
    assert ob.AbortRequested(2, None, 1) in run.seen and ob.Released(2) in run.seen  # its parent's abort
    assert run.end() == (ABORTED, "abort")


# -- failures, engine death, shutdown ------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-206", "ORCH-INV-107", "ORCH-INV-101")
def test_replica_loss_ends_only_its_request() -> None:
    run = clean(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(5, 0), ev.ReplicaLost(1, 0),
                ev.StageOutput(1, 0), ev.StageFinished(5, 0), refused=dropped(1, "StageOutput"))  # fmt: skip
    assert run.path(1) == run.path(5) == [S.WAITING, S.RUNNING, None]
    assert run.end(1) == (FAILED, "error")
    assert run.end(5) == (FINISHED, "stop")


@pytest.mark.covers("ORCH-INV-210", "ORCH-INV-101", "ORCH-INV-106", "ORCH-INV-300", "ORCH-INV-107")
def test_engine_death_fails_every_request_then_shuts_down() -> None:  # B9
    run = clean(AR_THEN_DIFF, ev.Submit(1), ev.Submit(5), ev.Submit(9, companions=1), ev.Scheduled(1, 0),
                ev.StageFinished(1, 0), ev.Scheduled(10, 0), ev.Control(1, SLEEP), ev.EngineDied(),
                ev.StageOutput(1, 1), ev.RpcDone(1), ev.Shutdown(),
                refused=[*dropped(1, "StageOutput"), *dropped(-1, "RpcDone")])  # fmt: skip
    assert run.path(1) == [S.WAITING, S.RUNNING, S.WAITING, None]  # died queued at its second stage
    assert run.path(5) == run.path(9) == [S.WAITING, None]
    assert {rid: run.end(rid) for rid in (1, 5, 9)} == dict.fromkeys((1, 5, 9), (FATAL, "error"))
    assert ob.RpcAnswered(1, SLEEP, False, "engine died") in run.seen
    assert run.engine() == [EngineState.DEAD, EngineState.STOPPED]
    assert run.seen.index(ob.OrchestratorStopped()) < run.seen.index(ob.RuntimesStopped())


@pytest.mark.covers("ORCH-INV-211", "ORCH-INV-300", "ORCH-INV-200", "ORCH-INV-107")
def test_shutdown_aborts_every_request_and_stops_the_orchestrator_first() -> None:
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Submit(5), ev.Shutdown(),
                ev.StageOutput(1, 0), ev.Shutdown(), refused=dropped(1, "StageOutput"))  # fmt: skip
    assert run.path(1) == [S.WAITING, S.RUNNING, None] and run.path(5) == [S.WAITING, None]
    assert run.end(1) == (ABORTED, "abort") and run.terminal(1).cumulative == 2
    assert run.end(5) == (ABORTED, "abort")
    assert run.engine() == [EngineState.STOPPED]  # the second shutdown is a no-op
    assert run.seen.index(ob.OrchestratorStopped()) < run.seen.index(ob.RuntimesStopped())


# -- the control plane ------------------------------------------------------------------------------------------------


@pytest.mark.covers("ORCH-INV-205", "ORCH-INV-106", "ORCH-INV-108")
def test_control_rpcs_answer_their_callers_and_a_failing_pause_ends_nothing() -> None:  # B11
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Control(1, PAUSE), ev.Control(2, SLEEP),
                ev.RpcFailed(1, "worker raised"), ev.RpcDone(2), ev.Control(3, WAKE), ev.RpcFailed(3, "oom"),
                ev.Control(4, WAKE), ev.RpcDone(4), ev.RpcDone(4), ev.Control(5, RESUME), ev.RpcDone(5),
                ev.StageFinished(1, 0), refused=dropped(-1, "RpcDone"))  # fmt: skip
    answers = [o for o in run.seen if isinstance(o, ob.RpcAnswered)]
    assert [(a.call_id, a.ok, a.error) for a in answers] == [
        (1, False, "worker raised"),
        (2, True, None),
        (3, False, "oom"),
        (4, True, None),
        (5, True, None),
    ]
    assert run.engine() == [EngineState.SLEEPING, EngineState.PAUSED, EngineState.RUNNING]
    assert run.path() == [S.WAITING, S.RUNNING, None]
    assert run.end() == (FINISHED, "stop")


@pytest.mark.covers("ORCH-INV-108", "ORCH-INV-103")
def test_sleep_refuses_submits_with_an_error_terminal() -> None:
    run = clean(ONE_AR, ev.Submit(1), ev.Control(1, SLEEP), ev.RpcDone(1), ev.Submit(5), ev.Control(2, WAKE),
                ev.RpcDone(2), ev.Control(3, RESUME), ev.RpcDone(3), ev.Submit(9), ev.Scheduled(1, 0),
                ev.StageFinished(1, 0), ev.Scheduled(9, 0), ev.StageFinished(9, 0))  # fmt: skip
    assert run.engine() == [EngineState.SLEEPING, EngineState.PAUSED, EngineState.RUNNING]
    assert run.path(5) == [] and ob.Dispatched(5, 0) not in run.seen  # refused at admission: never tracked
    assert run.end(5) == (FAILED, "error")
    assert run.path(1) == run.path(9) == [S.WAITING, S.RUNNING, None]
    assert run.end(1) == run.end(9) == (FINISHED, "stop")


@pytest.mark.covers("ORCH-INV-108", "ORCH-INV-109")
def test_pause_holds_admission_until_resume() -> None:
    run = clean(ONE_AR, ev.Control(1, PAUSE), ev.RpcDone(1), ev.Submit(1), ev.Submit(5), ev.Control(2, RESUME),
                ev.RpcDone(2), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.Scheduled(5, 0), ev.StageFinished(5, 0),
                capacity=1)  # fmt: skip
    assert run.path(1) == run.path(5) == [S.PENDING, S.WAITING, S.RUNNING, None]
    resumed = run.seen.index(ob.RpcAnswered(2, RESUME, True))
    assert run.seen.index(ob.Dispatched(1, 0)) > resumed and run.seen.index(ob.Dispatched(5, 0)) > resumed
    assert run.end(1) == run.end(5) == (FINISHED, "stop")


# -- scheduling as upstream, late reports, capacity ------------------------------------------------------------


@pytest.mark.covers("AR-INV-001", "ORCH-INV-109", "AR-INV-200")
def test_ar_scheduling_follows_upstream_status_transitions() -> None:
    run = clean(ONE_AR, ev.Submit(1), ev.AwaitGrammar(1, 0), ev.InputReady(1, 0), ev.AwaitRemoteKVs(1, 0),
                ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0), ev.Scheduled(1, 0),
                ev.AwaitStreamingReq(1, 0), ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.AwaitChunk(1, 0),
                ev.InputReady(1, 0), ev.Scheduled(1, 0), ev.StageFinished(1, 0, StopKind.LENGTH))  # fmt: skip
    assert run.path() == [S.WAITING, S.WAITING_FOR_GRAMMAR, S.WAITING, S.WAITING_FOR_REMOTE_KVS, S.WAITING,
                          S.RUNNING, S.PREEMPTED, S.RUNNING, S.WAITING_FOR_STREAMING_REQ, S.WAITING, S.RUNNING,
                          S.WAITING_FOR_CHUNK, S.WAITING, S.RUNNING, None]  # fmt: skip
    assert run.seen.count(ob.SlotTaken(1, 0)) == 4 and run.seen.count(ob.SlotFreed(1, 0)) == 4
    assert [o.tokens for o in run.messages()] == [1]
    assert run.end() == (FINISHED, "length")


@pytest.mark.covers("AR-INV-001")
def test_a_preempted_request_reloads_its_kv_and_is_queued_preempted_again() -> None:  # vLLM 0.32
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0),
                ev.AwaitRemoteKVs(1, 0), ev.Preempted(1, 0), ev.Scheduled(1, 0), ev.StageFinished(1, 0))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.PREEMPTED, S.WAITING_FOR_REMOTE_KVS, S.PREEMPTED, S.RUNNING, None]
    assert run.end() == (FINISHED, "stop") and run.terminal().cumulative == 1


@pytest.mark.covers("AR-INV-001")
def test_a_streaming_session_whose_input_ends_while_parked_finishes() -> None:  # vLLM 0.32
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.AwaitStreamingReq(1, 0),
                ev.StageFinished(1, 0))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.WAITING_FOR_STREAMING_REQ, None]
    assert run.end() == (FINISHED, "stop") and run.terminal().cumulative == 1


@pytest.mark.covers("AR-INV-001")
def test_a_preempted_request_gets_its_in_flight_tokens_and_may_stop_on_them() -> None:  # vLLM's AsyncScheduler
    run = clean(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0),
                ev.StageOutput(1, 0, 1), ev.StageFinished(1, 0))  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.PREEMPTED, None]  # ended from PREEMPTED
    assert [o.tokens for o in run.messages()] == [1, 1]
    assert run.end() == (FINISHED, "stop") and run.terminal().cumulative == 2


@pytest.mark.covers("AR-INV-001", "AR-INV-200")
def test_parked_requests_hold_no_running_slot() -> None:  # B4: vLLM parks any number of requests
    run = clean(ONE_AR, ev.Submit(1), ev.Submit(2), ev.Submit(3), ev.Scheduled(1, 0), ev.AwaitGrammar(2, 0),
                ev.AwaitRemoteKVs(3, 0), ev.StageFinished(1, 0), ev.InputReady(2, 0), ev.Scheduled(2, 0),
                ev.StageFinished(2, 0), ev.InputReady(3, 0), ev.Scheduled(3, 0), ev.StageFinished(3, 0),
                capacity=1)  # fmt: skip
    assert run.path(2) == [S.WAITING, S.WAITING_FOR_GRAMMAR, S.WAITING, S.RUNNING, None]
    assert run.path(3) == [S.WAITING, S.WAITING_FOR_REMOTE_KVS, S.WAITING, S.RUNNING, None]
    assert [o.rid for o in run.seen if isinstance(o, ob.SlotTaken)] == [1, 2, 3]
    assert run.end(1) == run.end(2) == run.end(3) == (FINISHED, "stop")


@pytest.mark.covers("ORCH-INV-107", "AR-INV-003", "ORCH-INV-100")
def test_late_and_stale_reports_are_dropped() -> None:  # B3, B10
    run = clean(AR_THEN_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.StageOutput(1, 0),
                ev.StageFinished(1, 0), ev.Scheduled(1, 1), ev.StageFinished(1, 1), ev.StageFinished(1, 1),
                ev.AbortDone(1, 1), ev.StageOutput(7, 0), ev.RpcDone(3),
                refused=[*dropped(1, "StageOutput", "StageFinished", why="stale"),
                         *dropped(1, "StageFinished", "AbortDone"), *dropped(7, "StageOutput"),
                         *dropped(-1, "RpcDone")])  # fmt: skip
    assert run.path() == [S.WAITING, S.RUNNING, S.WAITING, S.RUNNING, None]
    assert run.end() == (FINISHED, "stop") and run.terminal().stage == 1


@pytest.mark.covers("ORCH-INV-109", "AR-INV-200")
def test_slots_are_reused_within_capacity() -> None:  # B4, B6
    run = clean(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Submit(9), ev.Scheduled(1, 0), ev.Abort(1), ev.AbortDone(1, 0),
                ev.Scheduled(5, 0), ev.StageFinished(5, 0), ev.AwaitGrammar(9, 0), ev.InputReady(9, 0),
                ev.Scheduled(9, 0), ev.StageFinished(9, 0), capacity=1)  # fmt: skip
    assert run.path(1) == [S.WAITING, S.RUNNING, S.ABORTING, None]
    assert run.path(9) == [S.WAITING, S.WAITING_FOR_GRAMMAR, S.WAITING, S.RUNNING, None]
    assert [o.rid for o in run.seen if isinstance(o, ob.SlotTaken)] == [1, 5, 9]  # one slot, taken in turn
    assert run.seen.count(ob.SlotTaken(9, 0)) == 1  # running takes a slot; the grammar wait before it holds none (B4)
    assert run.end(1) == (ABORTED, "abort") and run.end(5) == run.end(9) == (FINISHED, "stop")


# -- regressions: histories that once were judged wrongly (n>1 parents, repeated aborts, orphans) ----------


def test_parallel_sampling_through_two_stages() -> None:
    run = clean(((AR, AR), (False, True)), ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.StageFinished(2, 0),
                ev.Scheduled(2, 1), ev.StageFinished(2, 1), ev.Scheduled(3, 0), ev.StageFinished(3, 0),
                ev.Scheduled(3, 1), ev.StageFinished(3, 1))  # fmt: skip
    assert run.path(1) == [S.AWAITING_CHILDREN, None]
    assert run.path(2) == run.path(3) == [S.WAITING, S.RUNNING, S.WAITING, S.RUNNING, None]
    assert [o for o in run.seen if isinstance(o, ob.Forwarded)] == [ob.Forwarded(2, 0, 1), ob.Forwarded(3, 0, 1)]
    assert run.sample_ends() == [(0, FINISHED), (1, FINISHED)]
    assert run.end() == (FINISHED, "stop") and run.terminal().stage == 1


@pytest.mark.parametrize(("ending", "outcome", "reason"), [(ev.EngineDied(), FATAL, "error"),
                                                          (ev.Shutdown(), ABORTED, "abort")],
                         ids=["engine_death", "shutdown"])  # fmt: skip
def test_engine_wide_end_of_a_parallel_sampling_request(ending: ev.Event, outcome: Outcome, reason: str) -> None:
    run = clean(ONE_AR, ev.Submit(1, n=2), ending)
    assert run.path(1) == [S.AWAITING_CHILDREN, None] and run.path(2) == run.path(3) == [S.WAITING, None]
    assert run.sample_ends() == [(0, outcome), (1, outcome)]
    assert run.end() == (outcome, reason)


def test_parallel_sampling_parent_aborted_twice() -> None:
    run = clean(ONE_AR, ev.Submit(1, n=2), ev.Abort(1), ev.Abort(1), ev.AbortDone(2, 0), ev.AbortDone(3, 0))
    assert run.path(1) == [S.AWAITING_CHILDREN, S.ABORTING_CHILDREN, None]
    assert run.path(2) == run.path(3) == [S.WAITING, S.ABORTING, None]
    assert run.sample_ends() == [(0, ABORTED), (1, ABORTED)]
    assert run.end() == (ABORTED, "abort")


def test_companion_outliving_its_parent() -> None:
    run = clean(ONE_AR, ev.Submit(1, companions=1), ev.StageOutput(1, 0), ev.AbortFailed(2, 0), ev.InputReady(2, 0),
                refused=[ob.Rejected(1, "StageOutput"), ob.Rejected(2, "InputReady")])  # fmt: skip
    assert run.end(1) == (FAILED, "error")  # output before it was scheduled: the parent fails
    assert run.states[2] == {2: S.ABORTING}  # its companion's abort failed: it outlives the parent
    assert run.path(2) == [S.WAITING, S.ABORTING, None]


def test_child_abort_landing_beside_its_siblings_failure() -> None:
    run = clean(ONE_AR, ev.Submit(1, n=2), ev.Abort(2), ev.StageFailed(3, 0), ev.StageFinished(2, 0))
    assert run.path(1) == [S.AWAITING_CHILDREN, None]
    assert run.path(2) == [S.WAITING, S.ABORTING, None] and run.path(3) == [S.WAITING, None]
    assert run.sample_ends() == [(1, FAILED), (0, ABORTED)]
    assert run.end() == (FAILED, "error")


# -- the checks above are what a wrong table the monitor cannot see fails ------------------------------------


def _without_row(source: ReqState, event: type[ev.Event], target: ReqState | None = None) -> Callable[[], Spec]:
    """Return a maker of the table without the row ``source --event--> target`` (any target if ``None``)."""
    return lambda: edit_rows(lambda r: r.source is source and r.event is event and target in (None, r.target),
                             lambda r: [])  # fmt: skip


def _earlier_final_stage_says_nothing() -> Spec:
    silent = Effect.EMIT_STAGE_FINAL
    return edit_rows(lambda r: r.source is S.RUNNING and r.target is S.WAITING and silent in r.effects,
                     lambda r: [attrs.evolve(r, effects=tuple(e for e in r.effects if e is not silent))])  # fmt: skip


#: (a wrong table the monitor judges clean on the scenario, the scenario that must then fail)
WRONG_TABLES = [
    pytest.param(_without_row(S.WAITING, ev.AwaitGrammar), test_ar_scheduling_follows_upstream_status_transitions,
                 id="no_grammar_wait-upstream_transitions"),
    pytest.param(_without_row(S.WAITING, ev.AwaitGrammar), test_parked_requests_hold_no_running_slot,
                 id="no_grammar_wait-parked_requests"),
    pytest.param(_without_row(S.WAITING, ev.AwaitGrammar), test_slots_are_reused_within_capacity,
                 id="no_grammar_wait-slots_reused"),
    pytest.param(_without_row(S.WAITING, ev.AwaitGrammar),
                 partial(test_abort_ends_the_request_from_every_sub_state, S.WAITING_FOR_GRAMMAR),
                 id="no_grammar_wait-abort_from_grammar_wait"),
    pytest.param(_without_row(S.PREEMPTED, ev.AwaitRemoteKVs),
                 test_a_preempted_request_reloads_its_kv_and_is_queued_preempted_again,
                 id="preempted_cannot_reload_kv"),
    pytest.param(_without_row(S.WAITING_FOR_STREAMING_REQ, ev.StageFinished, S.FINISHED_STOPPED),
                 test_a_streaming_session_whose_input_ends_while_parked_finishes, id="parked_stream_cannot_finish"),
    pytest.param(_earlier_final_stage_says_nothing, test_success_through_ar_ar_diffusion_with_an_earlier_final_stage,
                 id="earlier_final_stage_says_nothing"),
]  # fmt: skip


@pytest.mark.parametrize("wrong, scenario", WRONG_TABLES)
def test_a_wrong_table_the_monitor_passes_fails_the_scenario(wrong: Callable[[], Spec], scenario: Callable[[], None],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    verdicts: list[list[Violation]] = []
    judge = check_history

    def judged(*args: object, **kwargs: object) -> list[Violation]:
        verdicts.append(judge(*args, **kwargs))  # type: ignore[arg-type]
        return verdicts[-1]

    here = sys.modules[__name__]
    monkeypatch.setattr(here, "TABLE", wrong())
    monkeypatch.setattr(here, "check_history", judged)
    with pytest.raises(AssertionError):
        scenario()
    assert verdicts == [[]], "the monitor saw the wrong table: the scenario's own checks were not what failed"
