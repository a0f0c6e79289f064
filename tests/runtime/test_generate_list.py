"""``generate`` takes a list (or tuple) of prompts, as vLLM's ``LLM.generate`` does: every prompt is submitted before
any is waited for, and one ``RequestResult`` per prompt comes back, in order; one request that is aborted or fails
leaves the others' results as they would have been."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest
from faulty_runtimes import FinishesOnlyAtShutdown, Raising
from helpers import assert_drained, demo_pipeline

from omni_fsm import Outcome, StageKind
from omni_fsm import observations as ob
from omni_runtime import (
    AsyncEngine,
    ClientMessage,
    Engine,
    NoProgress,
    Prompt,
    RequestRefused,
    RequestResult,
    simple_pipeline,
)
from omni_runtime.runtimes.sim import sim_runtimes

PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR], max_tokens=6)
PROMPTS = [Prompt([1, 2, 3]), Prompt((4, 5)), Prompt(text="t7 t8 t9", max_tokens=3)]


def _singles(prompts: list[Prompt], n: int = 1, pipeline=PIPELINE) -> list[list[ClientMessage]]:
    """Return each prompt's messages from one ``generate`` call per prompt, on a fresh engine of the same seed."""
    with Engine(pipeline, sim_runtimes(pipeline, 5)) as engine:
        return [engine.generate(prompt, n=n) for prompt in prompts]


def test_a_list_gives_one_result_per_prompt_in_order_as_one_call_per_prompt_would() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
        results = engine.generate(PROMPTS)
        assert_drained(engine.orchestrator)
    singles = _singles(PROMPTS)
    assert [type(r) for r in results] == [RequestResult] * 3
    for result, messages in zip(results, singles, strict=True):
        end = messages[-1]
        assert (result.rid, result.request_id, result.outcome, result.error) == (end.rid, None, Outcome.FINISHED, None)
        assert result.token_ids == (end.data,) and result.data == (end.data,) and len(end.data) > 0
        assert result.texts == (end.text,) and result.finish_reasons == (end.reason,)
        assert result.messages == tuple(messages) and result.finished
    assert [r.rid for r in results] == [0, 1, 2]
    assert results[2].texts[0] and results[0].token_ids != results[1].token_ids


def test_the_prompts_of_a_list_run_together() -> None:
    """All are submitted before the engine waits: every request is dispatched before the first one ends."""
    seen: list[tuple[str, int]] = []

    def on_step(event, observations) -> None:
        for o in observations:
            if isinstance(o, ob.Dispatched) and o.stage == 0:
                seen.append(("dispatched", o.rid))
            elif isinstance(o, ob.Emitted) and o.finished:
                seen.append(("ended", o.rid))

    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5), on_step=on_step) as engine:
        engine.generate(PROMPTS)
    first_end = next(i for i, (what, _) in enumerate(seen) if what == "ended")
    assert seen[:first_end] == [("dispatched", 0), ("dispatched", 1), ("dispatched", 2)]
    assert sorted(seen[first_end:]) == [("ended", 0), ("ended", 1), ("ended", 2)]


def test_a_tuple_of_prompts_is_taken_as_the_list() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
        from_tuple = engine.generate(tuple(PROMPTS))
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
        from_list = engine.generate(list(PROMPTS))
    assert from_tuple == from_list


def test_each_sample_of_an_n2_request_has_its_own_tokens_text_and_reason() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
        results = engine.generate(PROMPTS[:2], n=2)
    for result, messages in zip(results, _singles(PROMPTS[:2], n=2), strict=True):
        ends = sorted((m for m in messages if m.stage_final and m.stage == 1), key=lambda m: m.sample)
        assert [m.sample for m in ends] == [0, 1]
        assert result.token_ids == tuple(m.data for m in ends) and result.texts == tuple(m.text for m in ends)
        assert result.finish_reasons == tuple(m.reason for m in ends) and result.outcome is Outcome.FINISHED


def test_a_diffusion_last_stage_gives_its_samples_as_data_and_no_token_ids() -> None:
    pipeline = demo_pipeline(replicas=1)
    with Engine(pipeline, sim_runtimes(pipeline, 5)) as engine:
        (result,) = engine.generate([Prompt((3, 4))], companions=1)
    end = result.messages[-1]
    assert result.data == (end.data,) and isinstance(end.data, dict) and result.token_ids == ((),)


def test_a_failed_request_of_a_list_leaves_the_others_results_as_they_were() -> None:
    pipeline = simple_pipeline([StageKind.AR], max_tokens=6)
    runtimes = sim_runtimes(pipeline, 5)
    runtimes[0][0] = Raising.around(runtimes[0][0], add_request=1)  # the first dispatch raises: request 0 fails
    with Engine(pipeline, runtimes) as engine:
        results = engine.generate(PROMPTS)
        assert_drained(engine.orchestrator)
    assert results[0].outcome is Outcome.FAILED and "add_request broke" in (results[0].error or "")
    assert results[0].token_ids == ((),) and results[0].finish_reasons == ("error",)
    singles = _singles(PROMPTS, pipeline=pipeline)
    for result, messages in zip(results[1:], singles[1:], strict=True):
        assert result.outcome is Outcome.FINISHED and result.messages == tuple(messages)


def test_an_empty_list_gives_an_empty_list() -> None:
    with Engine(PIPELINE) as engine:
        assert engine.generate([]) == []


@pytest.mark.parametrize(
    ("prompts", "why"),
    [
        ([Prompt(), 7], "prompt 1 of the list is not an omni_runtime.Prompt but a int: 7 (token ids go in a Prompt"),
        ([Prompt(), Prompt(streaming=True)], "prompt 1 of the list streams its input"),
    ],
)
def test_a_bad_prompt_refuses_the_whole_list_before_any_is_submitted(prompts: list, why: str) -> None:
    with Engine(PIPELINE) as engine:
        with pytest.raises(RequestRefused, match=f"^{why}".replace("(", r"\(")):
            engine.generate(prompts)
        assert engine.host.orchestrator.open_requests() == [] and engine.submit(Prompt()) == 0  # no id was used


def test_the_async_list_form_is_awaited_and_equals_the_sync_one() -> None:
    async def main() -> list[RequestResult]:
        async with AsyncEngine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
            return await engine.generate(PROMPTS, request_ids=["a", "b", None])

    results = asyncio.run(main())
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 5)) as engine:
        expected = engine.generate(PROMPTS, request_ids=["a", "b", None])
    assert results == expected and [r.request_id for r in results] == ["a", "b", None]


def test_an_async_abort_of_one_request_of_a_list_leaves_the_others_running() -> None:
    long = [Prompt([1, 2], max_tokens=40), Prompt([3, 4], max_tokens=40), Prompt([5, 6], max_tokens=40)]
    pipeline = simple_pipeline([StageKind.AR], max_tokens=40)

    async def main() -> tuple[list[RequestResult], bool]:
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, 5), loop="poll") as engine:
            waiting = asyncio.ensure_future(engine.generate(long, request_ids=["x", "y", "z"]))
            while not engine.host.orchestrator.open_requests():  # until the list is submitted
                await asyncio.sleep(0)
            aborted = await engine.abort(1)
            return await waiting, aborted

    results, aborted = asyncio.run(main())
    assert aborted and [r.outcome for r in results] == [Outcome.FINISHED, Outcome.ABORTED, Outcome.FINISHED]
    assert results[1].finish_reasons == ("abort",) and len(results[1].token_ids[0]) < 40
    singles = _singles(long, pipeline=pipeline)
    for result, messages in ((results[0], singles[0]), (results[2], singles[2])):
        assert (result.token_ids, result.finish_reasons) == ((messages[-1].data,), (messages[-1].reason,))
    assert {m.request_id for m in results[1].messages} == {"y"}


def test_cancelling_the_async_list_aborts_its_requests() -> None:
    pipeline = simple_pipeline([StageKind.AR], max_tokens=200)

    async def main() -> tuple[list[int], dict[str, int]]:
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, 5)) as engine:
            waiting = asyncio.ensure_future(engine.generate([Prompt(max_tokens=200)] * 3))
            while not engine.host.orchestrator.open_requests():
                await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            for _ in range(200):  # the aborts complete
                if not engine.host.orchestrator.open_requests():
                    break
                await asyncio.sleep(0.001)
            return engine.host.orchestrator.open_requests(), engine.host.orchestrator.held_state()

    still_open, held = asyncio.run(main())
    assert still_open == [] and held == dict.fromkeys(held, 0)


def test_a_list_whose_wait_gives_up_aborts_its_requests_sync_and_async() -> None:
    """A runtime that never finishes anything: the wait ends (``NoProgress``) and the requests, which nobody could
    read any more, are aborted instead of left open."""
    pipeline = simple_pipeline([StageKind.AR])

    def silent() -> list[list[FinishesOnlyAtShutdown]]:
        return [[FinishesOnlyAtShutdown(pipeline.stages[0], 0, 0, False)]]

    engine = Engine(pipeline, silent(), max_idle_rounds=5)
    with pytest.raises(NoProgress):
        engine.generate([Prompt(), Prompt()], request_ids=["p", "q"])
    engine.run_until_idle()
    assert engine.orchestrator.open_requests() == [] and engine.submit(Prompt(), request_id="p") == 2  # ids free
    engine.shutdown()

    async def main() -> list[int]:
        async with AsyncEngine(pipeline, silent(), max_idle_rounds=5) as engine:
            with pytest.raises(NoProgress):
                await engine.generate([Prompt(), Prompt()], request_ids=["p", "q"])
            for _ in range(200):  # the aborts are answered
                if not engine.host.orchestrator.open_requests():
                    break
                await asyncio.sleep(0.001)
            return engine.host.orchestrator.open_requests()

    assert asyncio.run(main()) == []


def test_async_for_over_a_list_names_the_await_and_leaves_no_coroutine_unawaited() -> None:
    async def main() -> list[int]:
        async with AsyncEngine(PIPELINE, sim_runtimes(PIPELINE, seed=0)) as engine:
            with pytest.raises(TypeError, match=r"await engine\.generate\(\[\.\.\.\]\)"):
                async for _ in engine.generate(PROMPTS):  # type: ignore[attr-defined]
                    pass
            return engine.host.orchestrator.open_requests()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "coroutine ... was never awaited" RuntimeWarning fails the test
        assert asyncio.run(main()) == []
        gc.collect()
