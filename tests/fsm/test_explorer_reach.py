"""``NEEDS`` names, per invariant the monitor checks, the least bound that can make it fire: there, a
``Spec`` that breaks the invariant (``reach_faults.BREAKS``) makes the explorer report it, and the real
table does not. An invariant no ``Spec`` can break is never claimed reachable, at any bound."""

from __future__ import annotations

import functools

import attrs
import pytest

from omni_fsm import SPEC
from omni_fsm.explore.explorer import FAMILIES, Bound, explore
from omni_fsm.explore.reach import BASIC, NEEDS, Needs, reachable
from omni_fsm.invariants import CHECKS
from omni_fsm.spec.vocabulary import StageKind

from .reach_faults import BREAKS

MONITORED = sorted({c.invariant for c in CHECKS.values()})
EXPLORABLE = sorted(inv for inv, needs in NEEDS.items() if needs.explorable)
#: The rules no Spec can break (the explorer varies only the table): judged on traces and runtimes only.
NOT_BY_ANY_SPEC = ["ORCH-INV-107"]
#: What the project's default bound (``Bound()``) cannot make fire, and why (the report the explorer prints).
NOT_AT_DEFAULT = {
    "ORCH-INV-104": "no companions",
    "ORCH-INV-105": "n = 1",
    "ORCH-INV-107": "no Spec breaks it",
    "ORCH-INV-201": "no diffusion stage",
    "ORCH-INV-203": "n = 1",
    "ORCH-INV-204": "no companions",
    "ORCH-INV-207": "one final-output stage",
}
#: Bounds far richer than the default one: a rule no Spec breaks is not reachable there either.
RICH = [Bound(), Bound(requests=2, stages=3, final_stages=2, n=2, families=frozenset(FAMILIES)),
        Bound(requests=2, companions=1, capacity=1, kinds=(StageKind.AR, StageKind.DIFFUSION),
              families=frozenset(FAMILIES))]  # fmt: skip


@functools.cache
def fired(inv: str) -> frozenset[str]:
    """Return the invariants the explorer reports at ``NEEDS[inv].bound()`` on the fault that breaks ``inv``."""
    report = explore(NEEDS[inv].bound(), BREAKS[inv](), liveness=False)  # safety only: faults may leave requests stuck
    return frozenset(c.invariant for c in report.violations)


def test_needs_cover_exactly_the_invariants_the_monitor_checks() -> None:
    assert sorted(NEEDS) == MONITORED


def test_every_explorable_invariant_has_a_fault_that_breaks_it() -> None:
    assert sorted(BREAKS) == EXPLORABLE


@pytest.mark.parametrize("inv", EXPLORABLE)
def test_the_named_bound_meets_the_needs_and_the_fault_fires_there(inv: str) -> None:
    bound = NEEDS[inv].bound()
    assert NEEDS[inv].met_by(bound)
    assert inv in fired(inv), f"{BREAKS[inv].__name__} at {bound}: found {sorted(fired(inv))}"


@pytest.mark.parametrize("inv", EXPLORABLE)
def test_the_named_bound_is_clean_on_the_real_table(inv: str) -> None:
    """What fires at the named bound is the fault's doing."""
    assert not explore(NEEDS[inv].bound(), SPEC, liveness=False).violations


def _one_short(needs: Needs) -> list[Bound]:
    """Return bounds each one step short of ``needs.bound()`` in one of its needs."""
    b = needs.bound()
    short = [attrs.evolve(b, families=b.families - {f}) for f in needs.families - BASIC]
    if needs.requests > 0:
        short.append(attrs.evolve(b, requests=needs.requests - 1))
    if needs.stages > 1:
        short.append(attrs.evolve(b, stages=needs.stages - 1, final_stages=min(needs.final_stages, needs.stages - 1),
                                  kinds=b.kinds[1:]))
    if needs.final_stages > 1:
        short.append(attrs.evolve(b, final_stages=needs.final_stages - 1))
    if needs.n > 1:
        short.append(attrs.evolve(b, n=needs.n - 1))
    if needs.companions > 0:
        short.append(attrs.evolve(b, companions=needs.companions - 1))
    if needs.diffusion:
        short.append(attrs.evolve(b, kinds=()))
    if needs.beyond_capacity:
        short.append(attrs.evolve(b, capacity=b.requests * max(b.n, 1 + b.companions)))
    return short


@pytest.mark.parametrize("inv", EXPLORABLE)
def test_each_need_is_needed(inv: str) -> None:
    """The named bound is the least: one step short in any need, and the needs are not met."""
    assert not [b for b in _one_short(NEEDS[inv]) if NEEDS[inv].met_by(b)]


def test_the_rules_no_spec_breaks_are_few_and_say_so() -> None:
    assert sorted(set(NEEDS) - set(EXPLORABLE)) == NOT_BY_ANY_SPEC
    for inv in NOT_BY_ANY_SPEC:
        assert "judged on traces and runtimes only" in NEEDS[inv].why


@pytest.mark.parametrize("bound", [*RICH, *(NEEDS[inv].bound() for inv in NOT_BY_ANY_SPEC)],
                         ids=[*(f"rich-{i}" for i in range(len(RICH))), *NOT_BY_ANY_SPEC])
def test_a_rule_no_spec_breaks_is_never_claimed_reachable(bound: Bound) -> None:
    can, cannot = reachable(bound)
    for inv in NOT_BY_ANY_SPEC:
        assert inv not in can and cannot[inv] is None


def test_no_fault_at_a_named_bound_fires_a_rule_no_spec_breaks() -> None:
    assert not [inv for inv in EXPLORABLE if fired(inv) & set(NOT_BY_ANY_SPEC)]


def test_reachable_splits_every_invariant_and_names_a_bound_that_meets_its_needs() -> None:
    bound = Bound(requests=1, stages=1, families=BASIC)
    can, cannot = reachable(bound)
    assert sorted((*can, *cannot)) == MONITORED and not set(can) & set(cannot)
    assert all(NEEDS[inv].met_by(b) for inv, b in cannot.items() if b is not None)


def test_what_the_default_bound_cannot_make_fire() -> None:
    cannot = reachable(Bound())[1]
    assert sorted(cannot) == sorted(NOT_AT_DEFAULT), {inv: NEEDS[inv].why for inv in cannot}
    assert sorted(inv for inv, b in cannot.items() if b is None) == NOT_BY_ANY_SPEC
