"""Each monitor check, disabled in turn, lets its negative scenarios through: no negative test passes without it.

The monitor reports every broken invariant through ``Judge.fail``, which names the check; disabling a
check here drops its reports there (its rule still runs and keeps its facts: the monitor has no seam
that skips one check's predicate). For each check of ``CHECKS``, every negative scenario of its
invariant (``test_invariants_negative.FAULTS``) that reports it with the check enabled must not report
it once disabled, and ``test_fault_trips_exactly_its_invariant`` would then fail on it. A check with no
scenario that reports it (a check added without a negative test) fails here.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from omni_fsm.invariants import CHECKS, check_history
from omni_fsm.invariants.judge import Judge

from . import test_invariants_negative as negative

Fault = Callable[[], negative.Fault]


def scenarios_of(invariant: str) -> list[tuple[str, Fault]]:
    """Return the negative scenarios marked as covering ``invariant``, by id."""
    return [(str(param.id), param.values[0]) for param in negative.FAULTS
            if any(mark.name == "covers" and invariant in mark.args for mark in param.marks)]  # fmt: skip


def reported(history: negative.History) -> set[str]:
    """Return the names of the checks the monitor reports on ``history``."""
    p = history.pipeline
    return {v.check for v in check_history(p.kinds, p.final, history.steps, p.capacity, history.complete)}


def disable(monkeypatch: pytest.MonkeyPatch, check: str) -> None:
    """Make the monitor drop every report of ``check`` (the others are reported as before)."""
    report = Judge.fail

    def fail(self: Judge, name: str, rid: int | None, message: str) -> None:
        if name != check:
            report(self, name, rid, message)

    monkeypatch.setattr(Judge, "fail", fail)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_disabling_a_check_lets_its_negative_scenarios_through(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    invariant = CHECKS[check].invariant
    faulty = {fault_id: fault()[1] for fault_id, fault in scenarios_of(invariant)}
    tripping = [fault_id for fault_id, history in faulty.items() if check in reported(history)]
    assert tripping, f"{check} ({invariant}): no negative scenario reports it (of {sorted(faulty) or 'none'})"
    disable(monkeypatch, check)
    for fault_id in tripping:
        history = faulty[fault_id]
        assert check not in reported(history), f"{fault_id}: still reported with {check} disabled"
        assert history.violations() != {invariant}, f"{fault_id}: its negative test still passes without {check}"


def test_disabling_a_check_silences_only_that_check(monkeypatch: pytest.MonkeyPatch) -> None:
    silenced = "terminal_frees_cache"
    others = {str(param.id): param.values[0]()[1] for param in negative.FAULTS
              if not any(CHECKS[silenced].invariant in mark.args for mark in param.marks)}  # fmt: skip
    before = {fault_id: reported(history) for fault_id, history in others.items()}
    disable(monkeypatch, silenced)
    assert {fault_id: reported(history) for fault_id, history in others.items()} == before
    assert all(before.values())
