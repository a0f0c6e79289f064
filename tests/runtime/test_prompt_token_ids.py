"""A prompt's token ids come as a list or a tuple (as vLLM takes them), are kept as a tuple, and must be ints."""

from __future__ import annotations

import re

import attrs
import pytest

from omni_runtime import Engine, Prompt, Sampling, example_pipeline, load_pipeline


def test_a_list_of_ids_is_kept_as_the_equal_tuple() -> None:
    for prompt in (Prompt([1, 2, 3]), Prompt(token_ids=[1, 2, 3]), attrs.evolve(Prompt([9]), token_ids=[1, 2, 3])):
        assert prompt == Prompt((1, 2, 3)) and type(prompt.token_ids) is tuple
    assert hash(Prompt([1, 2, 3])) == hash(Prompt((1, 2, 3)))  # frozen, so usable as a key
    assert Prompt([]).ids == ()


def test_a_list_of_stop_token_ids_is_kept_as_a_tuple() -> None:
    assert Sampling(stop_token_ids=[7, 8]) == Sampling(stop_token_ids=(7, 8))


def test_an_engine_runs_a_list_prompt_as_the_tuple_prompt() -> None:
    def run(prompt: Prompt) -> list[tuple[object, ...]]:
        with Engine(load_pipeline(example_pipeline())) as engine:
            return [(m.stage, m.data, m.finished, m.outcome, m.reason) for m in engine.generate(prompt)]

    assert run(Prompt([5, 6, 7], max_tokens=4)) == run(Prompt((5, 6, 7), max_tokens=4))


@pytest.mark.parametrize(
    ("token_ids", "named"),
    [
        (["1", 2], "item 0 is '1', a str"),
        ([1, 2.0], "item 1 is 2.0, a float"),
        ([1, True], "item 1 is True, a bool"),
        ((1, None), "item 1 is None, a NoneType"),
        ([[1, 2]], "item 0 is [1, 2], a list"),
    ],
)
def test_a_non_int_id_is_refused_naming_the_item(token_ids: object, named: str) -> None:
    with pytest.raises(TypeError, match=rf"^Prompt.token_ids must be a tuple of ints, not .*: {re.escape(named)}$"):
        Prompt(token_ids)  # type: ignore[arg-type]


@pytest.mark.parametrize("token_ids", ["123", {1, 2}, range(3), 5])
def test_ids_that_are_neither_list_nor_tuple_are_refused(token_ids: object) -> None:
    with pytest.raises(TypeError, match=r"Prompt.token_ids must be a tuple of ints, not .* \(a list of ints is taken"):
        Prompt(token_ids)  # type: ignore[arg-type]


def test_a_non_int_negative_or_stop_id_is_refused_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"Prompt.negative must be a tuple of ints.*item 1 is 'x'"):
        Prompt([1], negative=[1, "x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"Sampling.stop_token_ids must be a tuple of ints.*item 0 is 1.5"):
        Sampling(stop_token_ids=[1.5])  # type: ignore[list-item]


@pytest.mark.parametrize("field", ["token_ids", "negative"])
def test_a_negative_token_id_is_refused_naming_the_field_and_the_item(field: str) -> None:
    with pytest.raises(ValueError, match=rf"^Prompt.{field} must be token ids, ints >= 0, not \(1, -5, 1000.*\): "
                                         r"item 1 is -5$"):  # fmt: skip
        Prompt(**{field: (1, -5, 10**30)})


class _Declares:
    """A simulated stage-0 replica that declares a vocabulary of 100 token ids (``protocol.DeclaresVocabulary``)."""

    vocab_size = 100

    def __init__(self, runtime: object) -> None:
        self.runtime = runtime

    def __getattr__(self, name: str) -> object:
        return getattr(self.runtime, name)


def test_a_token_id_outside_a_declared_vocabulary_is_refused_at_submit_naming_the_prompt_and_the_id() -> None:
    from omni_fsm import StageKind
    from omni_runtime import RequestRefused, simple_pipeline
    from omni_runtime.runtimes.sim import sim_runtimes

    pipeline = simple_pipeline([StageKind.AR])
    runtimes = sim_runtimes(pipeline, 0)
    runtimes[0] = [_Declares(r) for r in runtimes[0]]
    with Engine(pipeline, runtimes) as engine:
        with pytest.raises(RequestRefused, match=r"^prompt \(1, 100\): token id 100 \(item 1\) is outside the "
                                                 r"vocabulary of stage 0's runtime \(0\.\.99\)$"):  # fmt: skip
            engine.submit(Prompt((1, 100)))
        with pytest.raises(RequestRefused, match=r"^prompt 1 of the list \(7, 10000\): token id 10000 "):
            engine.generate([Prompt((1, 2)), Prompt((7, 10**4))])
        assert engine.orchestrator.open_requests() == []  # refused before any was submitted
        assert engine.generate(Prompt((1, 99)))[-1].finished
