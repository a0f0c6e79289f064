"""A client's own request id (``request_id``, as vLLM's): on every client message of its request and on the answers
to its aborts, unique among open requests, free again once the request ended. The core keeps its int ids."""

from __future__ import annotations

import asyncio

import pytest
from helpers import assert_drained, demo_pipeline, record_answers

from omni_fsm import ControlMethod, Outcome, StageKind
from omni_runtime import AbortAnswer, AsyncEngine, ClientMessage, Engine, Prompt, RequestRefused, simple_pipeline
from omni_runtime.runtimes.sim import sim_runtimes

PIPELINE = demo_pipeline(replicas=1)  # AR -> AR (final) -> diffusion: partials, stage ends, samples, a terminal


def test_every_message_of_a_request_carries_its_request_id_and_no_other_request_does() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 2)) as engine:
        samples = engine.submit(Prompt(max_tokens=5), n=2, request_id="chat-1")
        guided = engine.submit(Prompt(max_tokens=5), companions=1, request_id="chat-2")
        plain = engine.submit(Prompt(max_tokens=5))
        messages = list(engine.outputs(samples))
        with_companion = list(engine.outputs(guided))
        others = list(engine.outputs(plain))
        assert_drained(engine.orchestrator)
    kinds = {(m.stage, m.sample >= 0, m.finished, m.stage_final) for m in messages}
    assert len(kinds) >= 4 and messages[-1].outcome is Outcome.FINISHED  # partials, sample and stage ends, terminal
    assert {m.request_id for m in messages} == {"chat-1"} and {m.rid for m in messages} == {samples}
    assert {m.request_id for m in with_companion} == {"chat-2"} and with_companion[-1].outcome is Outcome.FINISHED
    assert {m.request_id for m in others} == {None}


def test_generate_takes_a_request_id_for_one_prompt_and_request_ids_for_a_list() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 2)) as engine:
        assert {m.request_id for m in engine.generate(Prompt(), request_id="one")} == {"one"}
        results = engine.generate([Prompt(), Prompt(), Prompt()], request_ids=("a", None, "c"))
    assert [r.request_id for r in results] == ["a", None, "c"]
    assert [{m.request_id for m in r.messages} for r in results] == [{"a"}, {None}, {"c"}]


def test_the_abort_answer_and_the_aborted_terminal_carry_the_request_id() -> None:
    pipeline = simple_pipeline([StageKind.AR], max_tokens=50)
    with Engine(pipeline, sim_runtimes(pipeline, 2)) as engine:
        answers = record_answers(engine.host)
        rid = engine.submit(Prompt(max_tokens=50), request_id="to-abort")
        assert engine.abort(rid)
        messages = list(engine.outputs(rid))
    assert answers == [AbortAnswer(answers[0].call_id, rid, True, "to-abort")]  # type: ignore[attr-defined]
    assert messages[-1].outcome is Outcome.ABORTED and {m.request_id for m in messages} == {"to-abort"}


def test_a_request_failed_at_once_still_carries_its_request_id() -> None:
    """A sleeping engine fails a request as it is submitted: its terminal is made before ``submit`` returns."""
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 2)) as engine:
        engine.control(ControlMethod.SLEEP)
        messages = engine.generate(Prompt(), request_id="asleep")
        engine.control(ControlMethod.WAKE_UP)
        assert_drained(engine.orchestrator)
    assert messages[-1].outcome is Outcome.FAILED and [m.request_id for m in messages] == ["asleep"] * len(messages)


def test_a_request_id_in_use_by_an_open_request_is_refused_and_free_again_once_it_ended() -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 2)) as engine:
        rid = engine.submit(Prompt(), request_id="dup")
        held = engine.orchestrator.held_state()
        with pytest.raises(RequestRefused, match=f"^request id 'dup' is in use by open request {rid}$"):
            engine.submit(Prompt(), request_id="dup")
        assert engine.orchestrator.open_requests() == [rid] and engine.orchestrator.held_state() == held
        with pytest.raises(RequestRefused, match=f"^request id 'dup' is in use by open request {rid}$"):
            engine.generate([Prompt(), Prompt()], request_ids=["fresh", "dup"])
        assert engine.orchestrator.open_requests() == [rid]  # the list was refused whole: "fresh" was not submitted
        assert list(engine.outputs(rid))[-1].outcome is Outcome.FINISHED
        again = engine.generate(Prompt(), request_id="dup")
        assert {m.request_id for m in again} == {"dup"} and again[-1].rid != rid
        assert_drained(engine.orchestrator)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda e: e.generate([Prompt(), Prompt()], request_ids=["x", "x"]),
         "request id 'x' is given to two prompts of the list"),
        (lambda e: e.generate([Prompt(), Prompt()], request_ids=["x"]),
         "request_ids is a list of one id (or None) per prompt: 2 prompts, 1 ids"),
        (lambda e: e.generate([Prompt()], request_ids="x"),
         "request_ids is a list of one id (or None) per prompt: 1 prompts, 'x'"),
        (lambda e: e.generate([Prompt()], request_id="x"), "a list of prompts takes request_ids=[...]"),
        (lambda e: e.generate(Prompt(), request_ids=["x"]), "one prompt takes request_id=..., not request_ids"),
        (lambda e: e.submit(Prompt(), request_id=""), "a request id is a non-empty str, not ''"),
        (lambda e: e.submit(Prompt(), request_id=7), "a request id is a non-empty str, not 7"),
    ],
)  # fmt: skip
def test_a_bad_request_id_is_refused_in_one_line_and_nothing_is_submitted(call, why: str) -> None:
    with Engine(PIPELINE, sim_runtimes(PIPELINE, 2)) as engine:
        with pytest.raises(RequestRefused) as refused:
            call(engine)
        assert str(refused.value).startswith(why) and "\n" not in str(refused.value)
        assert engine.orchestrator.open_requests() == [] and engine.submit(Prompt()) == 0


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_async_messages_carry_the_request_id(loop: str) -> None:
    async def main() -> tuple[list[ClientMessage], list[ClientMessage]]:
        async with AsyncEngine(PIPELINE, sim_runtimes(PIPELINE, 2), loop=loop) as engine:
            one = [m async for m in engine.generate(Prompt(), n=2, request_id="async-1")]
            (result,) = await engine.generate([Prompt()], companions=1, request_ids=["async-2"])
            with pytest.raises(RequestRefused, match="is in use by open request"):
                engine.submit(Prompt(), request_id="async-3")
                engine.submit(Prompt(), request_id="async-3")
            return one, list(result.messages)

    one, listed = asyncio.run(main())
    assert one[-1].outcome is Outcome.FINISHED and {m.request_id for m in one} == {"async-1"}
    assert listed[-1].outcome is Outcome.FINISHED and {m.request_id for m in listed} == {"async-2"}


def test_an_abort_names_the_request_by_its_request_id() -> None:
    pipeline = simple_pipeline([StageKind.AR], max_tokens=50)
    with Engine(pipeline, sim_runtimes(pipeline, 2)) as engine:
        kept = engine.submit(Prompt(max_tokens=50), request_id="keep")
        rid = engine.submit(Prompt(max_tokens=50), request_id="stop")
        assert engine.abort("stop") is True
        stopped, others = list(engine.outputs(rid)), list(engine.outputs(kept))
        assert engine.abort("stop") is True  # ended: a harmless no-op, as by its engine id
        with pytest.raises(RequestRefused, match="no request ever had request id 'never'"):
            engine.abort("never")
        assert_drained(engine.orchestrator)
    assert stopped[-1].outcome is Outcome.ABORTED and others[-1].outcome is Outcome.FINISHED


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_an_async_abort_names_the_request_by_its_request_id(loop: str) -> None:
    pipeline = simple_pipeline([StageKind.AR], max_tokens=50)

    async def main() -> list[ClientMessage]:
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, 2), loop=loop) as engine:
            rid = engine.submit(Prompt(max_tokens=50), request_id="async-stop")
            assert await engine.abort("async-stop") is True
            return [m async for m in engine.outputs(rid)]

    messages = asyncio.run(main())
    assert messages[-1].outcome is Outcome.ABORTED and {m.request_id for m in messages} == {"async-stop"}


def test_an_abort_of_an_ended_request_is_a_no_op_and_of_an_id_never_given_refused_whichever_its_type() -> None:
    pipeline = simple_pipeline([StageKind.AR])
    with Engine(pipeline, sim_runtimes(pipeline, 2)) as engine:
        rid = engine.submit(Prompt(), request_id="done")
        list(engine.outputs(rid))
        assert engine.abort(rid) is True and engine.abort("done") is True
        for never in (12345, "12345", -1, True, 1.0):
            with pytest.raises(RequestRefused, match="no request ever had"):
                engine.abort(never)  # type: ignore[arg-type]
        assert_drained(engine.orchestrator)


def test_an_async_abort_of_an_id_never_given_is_refused_whichever_its_type() -> None:
    pipeline = simple_pipeline([StageKind.AR])

    async def main() -> list[bool]:
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, 2)) as engine:
            rid = engine.submit(Prompt(), request_id="done")
            [m async for m in engine.outputs(rid)]
            for never in (999, "999"):
                with pytest.raises(RequestRefused, match="no request ever had"):
                    await engine.abort(never)
            return [await engine.abort(rid), await engine.abort("done")]

    assert asyncio.run(main()) == [True, True]
