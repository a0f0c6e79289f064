"""The CFG companion rules hold with aborts and failures put at every point of a bundle (``cfg_bundle.py``: the AR
stage on the simulator, the diffusion stage on diffusers): no forward before the companion is done, a companion
lost before it is done fails its parent exactly once, a diffusion abort is a whole-sample retry. Judged by the
monitor over the run's observed history and by direct checks on what the client got; the same check catches a
table that forwards before the companions are done, and one where a lost companion does not fail its parent."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_fsm import SPEC, Outcome, ReqState, Row, Spec
from omni_fsm import events as ev
from tests.fsm.faults import edit_rows
from tests.fsm.reach_faults import forward_before_companions
from tests.runtimes.diffusers import cfg_bundle as cb
from tests.runtimes.diffusers.cfg_bundle import EVERY_FAULT, Fault, run_bundles


def expected_outcome(fault: Fault | None) -> Outcome:
    """Return how a bundle with ``fault`` must end for its client."""
    if fault is None:
        return Outcome.FINISHED
    if fault.target == cb.COMPANION or fault.action == cb.FAIL:
        return Outcome.FAILED  # a companion lost before it was done fails its parent
    return Outcome.ABORTED


def _image(data: object) -> object:
    return data.get("image") if isinstance(data, dict) else None


def check_bundles(faults: list[Fault | None], spec: Spec = SPEC) -> list[str]:
    """Run one bundle per fault; return every problem: the monitor's violations (``ID (check) ...``), then what
    the client got that the rules forbid. Empty: the companion rules held."""
    run = run_bundles(faults, spec)
    problems = [str(v) for v in run.violations]
    for index, (fault, messages, fired) in enumerate(zip(faults, run.messages, run.fired, strict=True)):
        where = f"bundle {index} ({fault})"
        if fault is not None and not fired:
            problems.append(f"{where}: the fault's moment never came")
        terminals = [m for m in messages if m.finished]
        if len(terminals) != 1 or not messages[-1].finished:
            problems.append(f"{where}: {len(terminals)} terminals, the last message finished={messages[-1].finished}")
            continue
        parent = messages[-1].rid
        if any(m.rid != parent for m in messages):
            problems.append(f"{where}: a message not of the parent reached the client")
        outcome, want = messages[-1].outcome, expected_outcome(fault)
        if outcome is not want:
            problems.append(f"{where}: ended {outcome.value if outcome else None}, not {want.value}")
        images = [m for m in messages if _image(m.data) is not None]
        if want is Outcome.FINISHED and [np.shape(_image(m.data)) for m in images] != [(16, 16, 3)]:
            problems.append(f"{where}: finished without its one 16x16 image")
        if want is not Outcome.FINISHED and images:
            problems.append(f"{where}: ended {outcome} but the client got an image")
    return problems


FAULT_OR_NONE = st.one_of(st.none(), st.sampled_from(EVERY_FAULT))


@settings(derandomize=True, max_examples=12, deadline=None)
@given(st.lists(FAULT_OR_NONE, min_size=1, max_size=3))
def test_the_companion_rules_hold_whatever_fails_and_when(faults: list[Fault | None]) -> None:
    assert check_bundles(faults) == []


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=lambda f: f"{f.target}-{f.moment}-{f.action}-{f.at}")
def test_the_companion_rules_hold_with_a_fault_at_this_point(fault: Fault) -> None:
    """Every point, each beside an untouched bundle (which must finish with its image)."""
    assert check_bundles([fault, None]) == []


@pytest.mark.parametrize("at", range(3))
@pytest.mark.parametrize("action", [cb.ABORT, cb.STAGE_ABORT])
def test_a_diffusion_abort_is_a_whole_sample_retry(at: int, action: str, stock_image) -> None:
    """Aborted after ``at`` denoising steps, the prompt submitted again makes the image an untouched run makes:
    the stock pipeline's for what it was made from, from its seed, with nothing of the aborted sample in it."""
    run = run_bundles([Fault(cb.PARENT, cb.DIFFUSION, action, at)], retry_aborted=True)
    untouched = run_bundles([None])
    assert run.violations == [] and run.messages[0][-1].outcome is Outcome.ABORTED
    [again] = [m for m in run.retries[0] if m.finished]
    [clean] = [m for m in untouched.messages[0] if m.finished]
    assert again.outcome is Outcome.FINISHED
    made = again.data
    reference = stock_image(made["prompt"], made["negative_prompt"], made["guidance_scale"], made["steps"],
                            made["seed"])  # fmt: skip
    assert np.abs(made["image"] - reference).max() <= 1e-4
    assert np.abs(made["image"] - clean.data["image"]).max() <= 1e-4 and made["prompt"] == clean.data["prompt"]


# -- the same check on faulty companion trackers --------------------------------------------------------------


def lost_companion_counts_as_done() -> Spec:
    """A companion that failed or was ended is counted as done: its parent goes on (and forwards) as if it
    finished."""

    def as_if_ok(row: Row) -> list[Row]:
        return [attrs.evolve(ok, when=tuple(w for w in ok.when if w != "companion_ok")) for ok in SPEC.rows
                if ok.source is row.source and ok.event is ev.CompanionEnded and "companion_ok" in ok.when]  # fmt: skip

    return edit_rows(lambda r: r.event is ev.CompanionEnded and r.target is ReqState.FINISHED_ERROR, as_if_ok)


@pytest.mark.parametrize("fault", [Fault(cb.COMPANION, cb.PARENT_WAITS, cb.FAIL),
                                   Fault(cb.COMPANION, cb.PARENT_WAITS, cb.STAGE_ABORT), None])  # fmt: skip
def test_the_check_catches_a_parent_forwarded_before_its_companion_is_done(fault: Fault | None) -> None:
    problems = check_bundles([fault], forward_before_companions())
    assert any(p.startswith("ORCH-INV-204 (companions_gate_parent)") and "companions done" in p for p in problems)


@pytest.mark.parametrize("fault", [f for f in EVERY_FAULT if f.target == cb.COMPANION])
def test_the_check_catches_a_lost_companion_that_does_not_fail_its_parent(fault: Fault) -> None:
    problems = check_bundles([fault, None], lost_companion_counts_as_done())
    assert any(p.startswith("ORCH-INV-204 (companions_gate_parent)") and "did not fail" in p for p in problems)
    assert any("ended finished, not failed" in p for p in problems)  # the direct check sees it too: the parent finished


def test_the_faulty_trackers_differ_from_the_table_only_where_they_are_meant_to() -> None:
    """Both faults change ``CompanionEnded`` / ``StageFinished`` rows only, so nothing else can be what trips."""
    for faulty in (forward_before_companions(), lost_companion_counts_as_done()):
        changed = set(faulty.rows) ^ set(SPEC.rows)
        assert changed and {r.event for r in changed} <= {ev.CompanionEnded, ev.StageFinished}
