"""Text and sampling parameters, as a user of the library expects them from the docstrings.

``IncrementalText`` (deltas, stop strings, the prompt as context) and ``stage_tokens``; ``Sampling`` and
``Prompt`` checked when made; ``[stages.sampling]`` overrides in a pipeline file and in ``StageSpec``; the
orchestrator dispatching each stage's sampling (overrides on top, ``seed + i`` per sample), CFG companions on
the negative prompt, text and stop reasons on client messages, ``Aborted`` as an abort with its prefix; the
simulator detokenizing, honouring stop strings and seeds, and pausing in abort mode. Pure and fast: no vLLM,
no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from helpers import assert_drained

from omni_fsm import ControlMethod, Outcome, StageKind, StopKind
from omni_runtime import (
    PAUSE_MODES,
    ConfigError,
    Engine,
    Orchestrator,
    Pipeline,
    PipelineError,
    Prompt,
    RpcError,
    Sampling,
    StageInput,
    StageSpec,
    parse_pipeline,
    simple_pipeline,
)
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.adapters import ar_to_ar, companion_input, prompt_input
from omni_runtime.core.text import IncrementalText, Tokenizer, stage_tokens
from omni_runtime.runtimes.sim import sim_runtimes

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
SCHEDULED = rp.Status.SCHEDULED


class Words:
    """A word-level tokenizer: id 1 is ``<s>`` (put before any text, dropped by ``decode``); each new word gets the
    next id; ``decode`` joins the words with spaces."""

    BOS = 1

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def ids(self, text: str) -> list[int]:
        """Return the ids of ``text``'s words (no ``<s>``)."""
        out = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.vocab) + 2
                self.words[self.vocab[word]] = word
            out.append(self.vocab[word])
        return out

    def encode(self, text: str) -> list[int]:
        return [self.BOS, *self.ids(text)]

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(self.words[i] for i in token_ids if i != self.BOS)


class Bytes:
    """A byte-level tokenizer: one id per UTF-8 byte; an incomplete character decodes to U+FFFD (as HF tokenizers)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, token_ids: Sequence[int]) -> str:
        return bytes(token_ids).decode("utf-8", errors="replace")


def feed(text: IncrementalText, tok: Words, *batches: str) -> list[str]:
    """Add each batch of words; return the deltas."""
    return [text.add(tok.ids(batch)) for batch in batches]


# -- IncrementalText ------------------------------------------------------------------------------------------


def test_the_test_tokenizers_are_tokenizers() -> None:
    assert isinstance(Words(), Tokenizer) and isinstance(Bytes(), Tokenizer)


def test_deltas_concatenate_to_the_whole_text() -> None:
    tok = Words()
    text = IncrementalText(tok)
    deltas = feed(text, tok, "the cat", "sat", "", "on the mat")
    assert deltas == ["the cat", " sat", "", " on the mat"]
    assert "".join(deltas) == text.text == "the cat sat on the mat"
    assert text.stop_reason is None


def test_a_stop_string_inside_one_batch_ends_the_text_just_before_it() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=["sat"])
    deltas = feed(text, tok, "the cat", "sat on", "the mat")
    assert text.stop_reason == "sat"
    assert "".join(deltas) == text.text == "the cat "
    assert deltas[-1] == ""


def test_a_stop_string_straddling_two_batches_is_found_and_later_adds_return_nothing() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=["cat sat"])
    feed(text, tok, "the cat")
    assert text.stop_reason is None
    feed(text, tok, "sat on")
    assert text.stop_reason == "cat sat"
    before = text.text
    assert feed(text, tok, "the mat", "again") == ["", ""]
    assert text.text == before and text.stop_reason == "cat sat"


def test_a_stop_string_straddling_two_batches_is_not_in_the_text() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=["cat sat"])
    deltas = feed(text, tok, "the cat", "sat on")
    assert text.stop_reason == "cat sat"
    assert "".join(deltas) == text.text == "the "


def test_the_earliest_of_several_stop_strings_wins_whatever_their_order() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=["mat", "on", "sat"])
    deltas = feed(text, tok, "the cat sat on the mat")
    assert text.stop_reason == "sat"
    assert "".join(deltas) == text.text == "the cat "


def test_an_empty_stop_string_is_ignored() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=[""])
    assert feed(text, tok, "a b") == ["a b"] and text.stop_reason is None


def test_with_a_prompt_the_output_reads_as_its_continuation() -> None:
    tok = Words()
    prompt = tok.encode("once upon a time in a land far away")  # longer than the context vLLM decodes
    text = IncrementalText(tok, prompt=prompt)
    deltas = feed(text, tok, "there", "lived a", "king")
    assert deltas == [" there", " lived a", " king"]
    assert text.text == " there lived a king"


def test_a_stop_string_in_the_prompt_does_not_stop_the_output() -> None:
    tok = Words()
    text = IncrementalText(tok, stop=["sat"], prompt=tok.encode("the cat sat"))
    deltas = [*feed(text, tok, "down", "here"), text.add((), final=True)]  # the last two characters held till the end
    assert "".join(deltas) == text.text == " down here" and text.stop_reason is None


def test_a_character_split_across_batches_is_emitted_whole() -> None:
    text = IncrementalText(Bytes())
    e_acute = "é".encode()
    deltas = [text.add([e_acute[0]]), text.add([e_acute[1]]), text.add(list(b" x"))]
    assert "".join(deltas) == text.text == "é x"


# -- stage_tokens ---------------------------------------------------------------------------------------------


def test_stage_tokens_uses_the_ids_when_given() -> None:
    tok = Words()
    assert stage_tokens(StageInput((7, 8)), tok) == (7, 8)
    assert stage_tokens(StageInput((7, 8)), None) == (7, 8)
    assert stage_tokens(StageInput((7, 8), text="ignored words"), tok) == (7, 8)


def test_stage_tokens_tokenizes_text_with_the_stages_tokenizer() -> None:
    tok = Words()
    assert stage_tokens(StageInput(text="hello world"), tok) == (1, *tok.ids("hello world"))


def test_stage_tokens_refuses_text_for_a_stage_without_a_tokenizer() -> None:
    with pytest.raises(ValueError, match="no tokenizer"):
        stage_tokens(StageInput(text="hello"), None)


def test_a_continuation_leaves_out_what_the_tokenizer_puts_before_any_text() -> None:
    tok = Words()
    assert stage_tokens(StageInput(text="more words"), tok, continuation=True) == tuple(tok.ids("more words"))
    assert stage_tokens(StageInput(text="more words"), tok, continuation=False)[0] == Words.BOS


# -- Sampling and Prompt --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "error", "field"), [
    ({"temperature": -0.1}, ValueError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_p": 0}, ValueError, "top_p"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"seed": 1.0}, TypeError, "seed"),
    ({"seed": True}, TypeError, "seed"),
    ({"stop": ("end", "")}, (TypeError, ValueError), "stop"),
    ({"stop": ["end", 3]}, TypeError, "stop"),
    ({"stop_token_ids": (1, "2")}, TypeError, "stop_token_ids"),
    ({"ignore_eos": 1}, TypeError, "ignore_eos"),
    ({"ignore_eos": "yes"}, TypeError, "ignore_eos"),
    ({"detokenize": None}, TypeError, "detokenize"),
])  # fmt: skip
def test_sampling_refuses_bad_values_naming_the_field(fields: dict[str, Any], error: Any, field: str) -> None:
    with pytest.raises(error, match=rf"Sampling\.{field} "):
        Sampling(**fields)


def test_sampling_accepts_its_bounds_and_converts_lists_to_tuples() -> None:
    s = Sampling(temperature=0, top_p=1, seed=0, stop=["a", "b c"], stop_token_ids=[2, 3], ignore_eos=True)
    assert s.stop == ("a", "b c") and s.stop_token_ids == (2, 3)
    assert (s.temperature, s.top_p, s.seed, s.ignore_eos) == (0, 1, 0, True)
    assert Sampling() == Sampling(temperature=1.0, top_p=1.0, top_k=0, seed=None, stop=(), detokenize=True)


def test_for_sample_adds_the_index_to_a_seed_and_leaves_an_unseeded_sampling_alone() -> None:
    seeded = Sampling(temperature=0.5, seed=10, stop=("x",))
    assert [seeded.for_sample(i).seed for i in range(3)] == [10, 11, 12]
    assert seeded.for_sample(2) == Sampling(temperature=0.5, seed=12, stop=("x",))
    unseeded = Sampling(temperature=0.5)
    assert unseeded.for_sample(4) == unseeded and unseeded.for_sample(4).seed is None


def test_a_prompt_has_token_ids_or_text_not_both() -> None:
    with pytest.raises(ValueError, match="token_ids or text, not both"):
        Prompt((1, 2), text="a b")
    with pytest.raises(ValueError, match="token_ids or text, not both"):
        Prompt([1, 2], text="a b")


def test_a_prompt_takes_a_list_of_ids_as_a_tuple() -> None:
    prompt = Prompt([1, 2], negative=[3, 4])
    assert prompt.token_ids == (1, 2) and prompt.ids == (1, 2) and prompt.negative == (3, 4)
    assert Prompt([1, 2]) == Prompt((1, 2))


def test_a_text_prompt_has_no_ids_and_a_default_prompt_has_three() -> None:
    text = Prompt(text="a cat")
    assert (text.text, text.token_ids, text.ids) == ("a cat", None, ())
    assert Prompt().ids == (1, 2, 3)
    assert Prompt().sampling == Sampling() and Prompt().negative is None and Prompt().streaming is False


@pytest.mark.parametrize("negative", [3, b"neg", (1, 2.0)])
def test_a_prompt_refuses_a_negative_that_is_neither_text_nor_ids(negative: Any) -> None:
    with pytest.raises(TypeError, match=r"Prompt\.negative"):
        Prompt(negative=negative)


# -- input adapters -------------------------------------------------------------------------------------------


def test_stage_zero_takes_the_prompts_text_or_ids() -> None:
    assert prompt_input(Prompt(text="a cat", max_tokens=3), None, ()) == StageInput((), None, 3, "a cat")
    assert prompt_input(Prompt((4, 5)), None, (), None) == StageInput((4, 5))


def test_ar_to_ar_takes_the_previous_stages_text_where_it_made_text() -> None:
    prompt = Prompt((1,), max_tokens=6)
    assert ar_to_ar(prompt, (5, 6), (), " a b") == StageInput((), None, 6, " a b")
    assert ar_to_ar(prompt, (5, 6), (), None) == StageInput((5, 6), None, 6)


@pytest.mark.parametrize(("negative", "text", "ids"),
                         [("a b", "a b", None), ((7, 8), None, (7, 8)), (None, "", None)])  # none: empty text
def test_a_companion_prompts_the_negative(negative: Any, text: str | None, ids: Any) -> None:
    sampling = Sampling(seed=4)
    parent = Prompt((1, 2), max_tokens=5, height=32, width=16, sampling=sampling, negative=negative)
    companion = companion_input(parent)
    assert (companion.text, companion.token_ids) == (text, ids)
    assert (companion.max_tokens, companion.height, companion.width, companion.sampling) == (5, 32, 16, sampling)


# -- pipeline: [stages.sampling] and StageSpec.sampling -------------------------------------------------------

SAMPLED = """\
[[stages]]
kind = 'ar'

[stages.sampling]
temperature = 0.0
stop = ['x', 'y']
seed = 3

[[stages]]
kind = 'ar'
final = true
adapter = 'ar2ar'
"""


def test_a_stages_sampling_table_sets_that_stages_overrides() -> None:
    pipeline = parse_pipeline(SAMPLED)
    assert dict(pipeline.stages[0].sampling) == {"temperature": 0.0, "stop": ("x", "y"), "seed": 3}
    assert pipeline.stages[1].sampling == ()


def test_an_inline_sampling_table_sets_the_overrides_too() -> None:
    pipeline = parse_pipeline("[[stages]]\nkind = 'ar'\nfinal = true\nsampling = {top_k = 4, ignore_eos = true}\n")
    assert dict(pipeline.stages[0].sampling) == {"top_k": 4, "ignore_eos": True}


BAD_SAMPLING = [
    # (text, the lines the error may name: the table's header or the key's line, what the reason says)
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\ntemperature = 0.0\ntemprature = 0.5\n", {5, 7},
     "unknown sampling parameter 'temprature'"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\ntemperature = 0.0\ntop_p = 0.0\n", {5, 7}, "top_p"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\nseed = 1.5\n", {5, 6}, "seed"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\nstop = ['a', '']\n", {5, 6}, "stop"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\nignore_eos = 1\n", {5, 6}, "ignore_eos"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\n\n[stages.sampling]\ntemperature = -1.0\n", {5, 6}, "temperature"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\nsampling = {temperature = -1.0}\n", {4}, "temperature"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\nsampling = 3\n", {4}, "sampling must be a table"),
    (SAMPLED + "\n[stages.sampling]\ntop_p = 2.0\n", {14, 15}, "stage 1: sampling: top_p"),  # stage 1's own table
]  # fmt: skip


@pytest.mark.parametrize(("text", "lines", "why"), BAD_SAMPLING)
def test_a_bad_sampling_table_names_its_line(text: str, lines: set[int], why: str) -> None:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text, "p.toml")
    assert info.value.line in lines, (info.value.line, str(info.value))
    assert str(info.value).startswith(f"p.toml:{info.value.line}: ")
    assert why in info.value.reason, info.value.reason


def test_stage_spec_takes_sampling_overrides_as_a_dict() -> None:
    spec = StageSpec("a", AR, True, sampling={"temperature": 0.0, "stop": ["x"]})
    assert dict(spec.sampling) == {"temperature": 0.0, "stop": ("x",)}
    assert spec == StageSpec("a", AR, True, sampling={"stop": ("x",), "temperature": 0.0})
    assert hash(spec) == hash(StageSpec("a", AR, True, sampling={"stop": ("x",), "temperature": 0.0}))
    assert StageSpec("a", AR, True).sampling == ()


@pytest.mark.parametrize(("sampling", "why"), [
    ({"temprature": 1.0}, "unknown sampling parameter 'temprature'"),
    ({"top_p": 0}, "top_p"),
    ({"seed": "1"}, "seed"),
    ({"stop": [""]}, "stop"),
    (5, "sampling must be a table"),
])  # fmt: skip
def test_stage_spec_refuses_bad_sampling_overrides(sampling: Any, why: str) -> None:
    with pytest.raises(ConfigError, match="StageSpec: ") as info:
        StageSpec("a", AR, True, sampling=sampling)
    assert why in str(info.value)


# -- the orchestrator -------------------------------------------------------------------------------------------


def dispatches(commands: list[cmd.Command]) -> list[cmd.Dispatch]:
    return [c for c in commands if isinstance(c, cmd.Dispatch)]


def messages(commands: list[cmd.Command]) -> list[cmd.ClientMessage]:
    return [c.message for c in commands if isinstance(c, cmd.Deliver)]


def terminals(commands: list[cmd.Command]) -> dict[int, cmd.ClientMessage]:
    return {m.rid: m for m in messages(commands) if m.finished}


def run_stage(orch: Orchestrator, rid: int, stage: int, outputs: Sequence[tuple[tuple[int, ...], str | None]],
              finished: rp.Finished | None = None) -> list[cmd.Command]:  # fmt: skip
    """Report ``rid`` scheduled at ``stage``, then each (tokens, text) output, then ``finished`` (its seq set)."""
    replica = orch.routes[rid].replica
    out = orch.report(stage, replica, rp.StatusChanged(rid, 0, SCHEDULED))
    for seq, (tokens, text) in enumerate(outputs, 1):
        out += orch.report(stage, replica, rp.Output(rid, seq, len(tokens), tokens, text))
    if finished is not None:
        out += orch.report(stage, replica, attrs.evolve(finished, req_id=rid, seq=len(outputs) + 1))
    return out


def test_a_stage_without_overrides_gets_the_prompts_sampling() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    sampling = Sampling(temperature=0.3, top_k=7, seed=2, stop=("end",))
    _, out = orch.submit(Prompt((1, 2), sampling=sampling))
    (dispatch,) = dispatches(out)
    assert dispatch.stage_input.sampling == sampling


def test_each_stage_gets_the_prompts_sampling_with_its_own_overrides_on_top() -> None:
    pipeline = Pipeline((StageSpec("a", AR, sampling={"temperature": 0.0, "stop": ["END"]}),
                         StageSpec("b", AR, True, adapter="ar2ar", sampling={"seed": 99})))  # fmt: skip
    orch = Orchestrator(pipeline)
    prompt = Prompt((1, 2), sampling=Sampling(temperature=0.8, top_p=0.9, seed=5, stop=("x",)))
    rid, out = orch.submit(prompt)
    (first,) = dispatches(out)
    assert first.stage_input.sampling == Sampling(temperature=0.0, top_p=0.9, seed=5, stop=("END",))
    (second,) = dispatches(run_stage(orch, rid, 0, [((5,), " a")], rp.Finished(0, 0)))
    assert second.stage == 1
    assert second.stage_input.sampling == Sampling(temperature=0.8, top_p=0.9, seed=99, stop=("x",))


def test_sampling_overrides_from_a_pipeline_file_reach_the_dispatch() -> None:
    orch = Orchestrator(parse_pipeline(SAMPLED))
    _, out = orch.submit(Prompt(sampling=Sampling(top_k=5, seed=8)))
    (dispatch,) = dispatches(out)
    assert dispatch.stage_input.sampling == Sampling(temperature=0.0, top_k=5, seed=3, stop=("x", "y"))


@pytest.mark.parametrize(("seed", "seeds"), [(10, [10, 11, 12]), (None, [None, None, None])])
def test_sample_i_of_an_n_request_is_dispatched_with_seed_plus_i(seed: int | None, seeds: list[int | None]) -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, out = orch.submit(Prompt((1, 2), sampling=Sampling(temperature=0.7, seed=seed)), n=3)
    sent = sorted((d.rid, d.stage_input.sampling) for d in dispatches(out) if d.stage == 0)
    assert [r for r, _ in sent] == [rid + 1, rid + 2, rid + 3]
    assert [s.seed for _, s in sent] == seeds
    assert {s.temperature for _, s in sent} == {0.7}


def test_the_samples_keep_their_seeds_at_the_next_stage() -> None:
    orch = Orchestrator(simple_pipeline([AR, AR]))
    rid, _ = orch.submit(Prompt((1, 2), sampling=Sampling(seed=10)), n=2)
    seeds = {}
    for k, sample in enumerate((rid + 1, rid + 2)):
        (forward,) = dispatches(run_stage(orch, sample, 0, [((5 + k,), None)], rp.Finished(0, 0)))
        seeds[forward.rid] = forward.stage_input.sampling.seed
    assert seeds == {rid + 1: 10, rid + 2: 11}


def test_samples_of_a_stage_with_a_seed_override_still_get_seed_plus_i() -> None:
    orch = Orchestrator(Pipeline((StageSpec("a", AR, True, sampling={"seed": 5}),)))
    _, out = orch.submit(Prompt((1, 2)), n=3)
    assert sorted(d.stage_input.sampling.seed for d in dispatches(out)) == [5, 6, 7]


@pytest.mark.parametrize(("negative", "text", "ids"), [("a b", "a b", ()), ((7, 8), None, (7, 8)), (None, "", ())])
def test_a_cfg_companion_is_dispatched_with_the_negative_prompt(negative: Any, text: str | None, ids: Any) -> None:
    orch = Orchestrator(simple_pipeline([AR, DIFF]))
    sampling = Sampling(seed=3)
    rid, out = orch.submit(Prompt((1, 2), negative=negative, sampling=sampling), companions=1)
    sent = {d.rid: d.stage_input for d in dispatches(out)}
    assert sorted(sent) == [rid, rid + 1]
    assert (sent[rid].token_ids, sent[rid].text) == ((1, 2), None)
    assert (sent[rid + 1].text, sent[rid + 1].token_ids) == (text, ids)
    assert sent[rid + 1].sampling == sampling


def test_a_text_prompt_and_its_negative_are_dispatched_as_text() -> None:
    orch = Orchestrator(simple_pipeline([AR, DIFF]))
    rid, out = orch.submit(Prompt(text="a cat", negative="blurry"), companions=1)
    sent = {d.rid: (d.stage_input.text, d.stage_input.token_ids) for d in dispatches(out)}
    assert sent == {rid: ("a cat", ()), rid + 1: ("blurry", ())}


@pytest.mark.parametrize(("stop", "stop_reason", "reason"), [
    (StopKind.STOP, "END", "stop"),  # a stop string
    (StopKind.STOP, 42, "stop"),  # a stop token id
    (StopKind.STOP, None, "stop"),  # EOS
    (StopKind.LENGTH, None, "length"),
])  # fmt: skip
def test_client_messages_carry_each_outputs_text_and_the_terminal_the_whole_text_and_stop_reason(
        stop: StopKind, stop_reason: str | int | None, reason: str) -> None:  # fmt: skip
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    outputs = [((5,), " a"), ((6, 7), " b c"), ((8,), "")]
    out = run_stage(orch, rid, 0, outputs, rp.Finished(0, 0, stop, None, stop_reason))
    partial = [m for m in messages(out) if not m.finished]
    assert [(m.data, m.text) for m in partial] == outputs
    assert all(m.stop_reason is None for m in partial)
    end = terminals(out)[rid]
    assert (end.outcome, end.reason, end.data) == (Outcome.FINISHED, reason, (5, 6, 7, 8))
    assert (end.text, end.stop_reason) == (" a b c", stop_reason)
    assert_drained(orch)


def test_outputs_without_text_give_messages_without_text() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    out = run_stage(orch, rid, 0, [((5,), None), ((6,), None)], rp.Finished(0, 0))
    assert [m.text for m in messages(out)] == [None, None, None]
    assert terminals(out)[rid].data == (5, 6)


def test_reordered_outputs_join_their_text_in_seq_order() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    orch.report(0, 0, rp.StatusChanged(rid, 0, SCHEDULED))
    assert orch.report(0, 0, rp.Output(rid, 2, 1, (6,), " b")) == []  # early: held
    out = orch.report(0, 0, rp.Output(rid, 1, 1, (5,), " a"))
    assert [m.text for m in messages(out)] == [" a", " b"]
    end = terminals(orch.report(0, 0, rp.Finished(rid, 3)))[rid]
    assert (end.data, end.text) == ((5, 6), " a b")


def test_each_sample_ends_with_its_own_text() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)), n=2)
    ends = []
    for k, sample in enumerate((rid + 1, rid + 2)):
        out = run_stage(orch, sample, 0, [((5 + k,), f" w{k}")], rp.Finished(0, 0, StopKind.STOP, None, f"s{k}"))
        ends += [(m.sample, m.text, m.stop_reason) for m in messages(out) if m.stage_final]
    assert ends == [(0, " w0", "s0"), (1, " w1", "s1")]


def test_the_next_ar_stage_gets_the_whole_text_of_the_first() -> None:
    orch = Orchestrator(simple_pipeline([AR, AR], final=[True, True]))
    rid, _ = orch.submit(Prompt((1, 2), max_tokens=4))
    out = run_stage(orch, rid, 0, [((5,), " a"), ((6, 7), " b c")], rp.Finished(0, 0, StopKind.STOP, None, "END"))
    (stage_end,) = [m for m in messages(out) if m.stage_final]
    assert (stage_end.stage, stage_end.data, stage_end.text, stage_end.stop_reason) == (0, (5, 6, 7), " a b c", "END")
    (forward,) = dispatches(out)
    assert (forward.stage, forward.src) == (1, 0)
    assert (forward.stage_input.text, forward.stage_input.token_ids) == (" a b c", ())
    assert forward.stage_input.max_tokens == 4
    end = terminals(run_stage(orch, rid, 1, [((9,), " d")], rp.Finished(0, 0, StopKind.LENGTH)))[rid]
    assert (end.stage, end.data, end.text, end.stop_reason) == (1, (9,), " d", None)  # stage 1's, not stage 0's


def test_the_next_ar_stage_gets_the_token_ids_of_a_first_stage_that_made_no_text() -> None:
    orch = Orchestrator(simple_pipeline([AR, AR]))
    rid, _ = orch.submit(Prompt((1, 2)))
    (forward,) = dispatches(run_stage(orch, rid, 0, [((5,), None), ((6, 7), None)], rp.Finished(0, 0)))
    assert (forward.stage_input.token_ids, forward.stage_input.text) == ((5, 6, 7), None)


def test_an_engine_abort_ends_the_request_as_aborted_with_its_tokens_so_far() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    run_stage(orch, rid, 0, [((5,), " a"), ((6,), " b")])
    out = orch.report(0, 0, rp.Aborted(rid, 3))
    end = terminals(out)[rid]
    assert (end.outcome, end.reason, end.error) == (Outcome.ABORTED, "abort", None)
    assert (end.data, end.text, end.stop_reason) == ((5, 6), " a b", None)
    assert orch.counters()["failed_illegal"] == 0
    assert_drained(orch)


def test_an_engine_abort_during_a_client_abort_still_ends_it_as_aborted() -> None:
    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    run_stage(orch, rid, 0, [((5,), " a")])
    call, out = orch.abort(rid)
    (physical,) = [c for c in out if isinstance(c, cmd.AbortAt)]
    out = orch.report(0, 0, rp.Aborted(rid, 2))
    end = terminals(out)[rid]
    assert (end.outcome, end.reason, end.error, end.data) == (Outcome.ABORTED, "abort", None, (5,))
    assert cmd.AbortAnswer(call, rid, True) in out
    assert orch.report(0, 0, rp.AbortResult(physical.abort_id, rid, True)) == []  # late: nothing to do
    assert_drained(orch)


def two_running(orch: Orchestrator) -> tuple[int, int]:
    a, _ = orch.submit(Prompt((1,)))
    b, _ = orch.submit(Prompt((2,)))
    for rid in (a, b):
        run_stage(orch, rid, 0, [((5,), " w")])
    return a, b


@pytest.mark.parametrize("text", [b" x", 3, [" x"]])
def test_an_output_whose_text_is_not_a_str_fails_only_its_request(text: Any) -> None:
    orch = Orchestrator(simple_pipeline([AR], replicas=2))
    a, b = two_running(orch)
    ended = terminals(orch.report(0, orch.routes[a].replica, rp.Output(a, 2, 1, (6,), text)))
    assert list(ended) == [a] and ended[a].outcome is Outcome.FAILED
    assert ended[a].error is not None and "text" in ended[a].error, ended[a].error
    replica = orch.routes[b].replica
    orch.report(0, replica, rp.Output(b, 2, 1, (7,), " y"))
    end = terminals(orch.report(0, replica, rp.Finished(b, 3)))[b]
    assert (end.outcome, end.data, end.text) == (Outcome.FINISHED, (5, 7), " w y")
    assert_drained(orch)


def test_an_output_whose_text_is_a_str_subclass_is_text() -> None:
    class Text(str):
        pass

    orch = Orchestrator(simple_pipeline([AR]))
    rid, _ = orch.submit(Prompt((1,)))
    end = terminals(run_stage(orch, rid, 0, [((5,), Text(" a"))], rp.Finished(0, 0)))[rid]
    assert (end.outcome, end.text) == (Outcome.FINISHED, " a")


# -- pause modes --------------------------------------------------------------------------------------------


def test_pause_mode_reads_one_mode_tag() -> None:
    assert PAUSE_MODES == ("keep", "wait", "abort")
    assert rp.pause_mode(frozenset()) == "keep"
    assert [rp.pause_mode(frozenset({m})) for m in PAUSE_MODES] == ["keep", "wait", "abort"]
    with pytest.raises(ValueError, match="one mode tag"):
        rp.pause_mode(frozenset({"abort", "wait"}))
    with pytest.raises(ValueError, match="one mode tag"):
        rp.pause_mode(frozenset({"now"}))


# -- the simulator through Engine ---------------------------------------------------------------------------

SIM = simple_pipeline([AR], max_tokens=12)


def sim_run(prompt: Prompt, engine: Engine | None = None) -> list[cmd.ClientMessage]:
    """Return every message of ``prompt`` (in a fresh engine unless one is given)."""
    return (engine or Engine(SIM, sim_runtimes(SIM, seed=3))).generate(prompt)


def test_the_simulator_detokenizes_its_tokens_as_the_prompts_continuation() -> None:
    ms = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)))
    end = ms[-1]
    assert end.outcome is Outcome.FINISHED and len(end.data) >= 1
    assert end.text == "".join(f" t{i}" for i in end.data)
    assert "".join(m.text for m in ms[:-1]) == end.text


def test_the_simulator_gives_token_ids_only_without_detokenize() -> None:
    ms = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10, detokenize=False)))
    assert [m.text for m in ms] == [None] * len(ms) and len(ms[-1].data) >= 1


def test_the_same_seed_gives_the_same_tokens_and_another_seed_other_tokens() -> None:
    first = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)))[-1]
    again = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)))[-1]
    other = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=11)))[-1]
    assert len(first.data) >= 2
    assert (again.data, again.text) == (first.data, first.text)
    assert other.data != first.data


def test_the_same_seed_gives_the_same_tokens_in_one_engine() -> None:
    engine = Engine(SIM, sim_runtimes(SIM, seed=3))
    runs = [sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)), engine)[-1].data for _ in range(3)]
    assert runs[1] == runs[0] and runs[2] == runs[0]


def test_a_stop_string_from_a_first_run_ends_a_second_run_before_it() -> None:
    first = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)))[-1]
    words = first.text.split()
    assert len(words) >= 4
    stop = f" {words[2]}"
    cut = first.text.find(stop)
    ms = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10, stop=(stop,))))
    end = ms[-1]
    assert (end.outcome, end.reason, end.stop_reason) == (Outcome.FINISHED, "stop", stop)
    assert end.text == first.text[:cut] and stop not in end.text
    assert "".join(m.text for m in ms[:-1]) == end.text
    assert len(end.data) < len(first.data) and end.data == first.data[: len(end.data)]


def test_a_stop_string_straddling_two_outputs_ends_the_text_before_it() -> None:
    ms = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10)))
    partial = [m.text for m in ms if not m.finished]
    assert len(partial) >= 2
    stop = f"{partial[0].split()[-1]} {partial[1].split()[0]}"  # the last word of one output, the first of the next
    whole = ms[-1].text
    end = sim_run(Prompt((1, 2, 3), sampling=Sampling(seed=10, stop=(stop,))))[-1]
    assert (end.reason, end.stop_reason) == ("stop", stop)
    assert end.text == whole[: whole.find(stop)]


def test_a_pause_in_abort_mode_ends_the_running_requests_as_aborted() -> None:
    engine = Engine(SIM, sim_runtimes(SIM, seed=3))
    rids = [engine.submit(Prompt((1, 2, 3), sampling=Sampling(seed=s))) for s in (10, 11)]
    for _ in range(2):
        engine.host.pump()  # both scheduled, with outputs
    engine.control(ControlMethod.PAUSE_SCHEDULER, tags=frozenset({"abort"}))
    for rid in rids:
        ms = list(engine.outputs(rid))
        end, partial = ms[-1], ms[:-1]
        assert partial, "the request should have had outputs before the pause"
        assert (end.outcome, end.reason, end.error) == (Outcome.ABORTED, "abort", None)
        assert end.data == tuple(t for m in partial for t in m.data)
        assert end.text == "".join(m.text for m in partial)
    engine.control(ControlMethod.RESUME_SCHEDULER)
    after = engine.generate(Prompt((1, 2, 3)))[-1]
    assert after.outcome is Outcome.FINISHED and len(after.data) >= 1
    engine.run_until_idle()
    assert_drained(engine.orchestrator)
    engine.shutdown()


def test_a_pause_with_two_modes_is_refused_by_the_workers() -> None:
    engine = Engine(SIM, sim_runtimes(SIM, seed=3))
    with pytest.raises(RpcError, match="one mode tag"):
        engine.control(ControlMethod.PAUSE_SCHEDULER, tags=frozenset({"abort", "wait"}))
    engine.shutdown()


def test_a_parent_failed_by_its_companion_says_which_companion_and_why() -> None:
    orch = Orchestrator(simple_pipeline([AR, DIFF]))
    rid, out = orch.submit(Prompt((1, 2), negative="a b"), companions=1)
    out = orch.report(0, 0, rp.Failed(rid + 1, 0, "vLLM rejects an empty prompt"))
    terminal = [m for m in messages(out) if m.finished]
    assert [(m.rid, m.outcome, m.reason) for m in terminal] == [(rid, Outcome.FAILED, "error")]
    assert terminal[0].error == f"its CFG companion {rid + 1} failed: vLLM rejects an empty prompt"
