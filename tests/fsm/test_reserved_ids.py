"""A request owns its dependents' ids from its admission until it is released: a client cannot take one."""

from __future__ import annotations

import pytest

from omni_fsm import ControlMethod, Lifecycle, LifecycleError, StageKind
from omni_fsm import events as ev


def test_an_id_reserved_for_a_held_parents_samples_is_refused_and_nothing_changes() -> None:
    lc = Lifecycle([StageKind.AR], [True])
    lc.handle(ev.Control(1, ControlMethod.PAUSE_SCHEDULER))
    lc.handle(ev.RpcDone(1))
    lc.handle(ev.Submit(5, n=3))  # held: its samples 6, 7, 8 are not spawned yet
    before = lc.snapshot()
    with pytest.raises(LifecycleError, match="reserved for a dependent of request 5"):
        lc.handle(ev.Submit(6))
    assert lc.snapshot() == before
    lc.handle(ev.Control(2, ControlMethod.RESUME_SCHEDULER))
    out = lc.handle(ev.RpcDone(2))  # the parent is admitted and spawns its samples
    assert {o.rid for o in out if type(o).__name__ == "Submitted"} == {6, 7, 8}
    assert lc.reserved == {}  # spawned: tracked records now, as a restored core sees them
    with pytest.raises(LifecycleError, match="id already tracked"):
        lc.handle(ev.Submit(6))


def test_a_released_parents_ids_are_free_again() -> None:
    lc = Lifecycle([StageKind.AR], [True])
    lc.handle(ev.Control(1, ControlMethod.PAUSE_SCHEDULER))
    lc.handle(ev.RpcDone(1))
    lc.handle(ev.Submit(0, companions=1))
    assert lc.reserved == {1: 0}
    lc.handle(ev.Abort(0))  # a held request ends at once
    assert lc.state_of(0) is None and lc.reserved == {}
    lc.handle(ev.Submit(1))
    assert lc.state_of(1) is not None


def test_an_admitted_parents_dependents_are_tracked_not_reserved() -> None:
    lc = Lifecycle([StageKind.AR], [True])
    lc.handle(ev.Submit(0, n=2))
    assert lc.reserved == {} and lc.state_of(1) is not None and lc.state_of(2) is not None
    with pytest.raises(LifecycleError, match="id already tracked"):
        lc.handle(ev.Submit(1))


def test_a_submit_that_ends_at_once_reserves_nothing() -> None:
    lc = Lifecycle([StageKind.AR], [True])
    lc.handle(ev.Control(1, ControlMethod.SLEEP))
    lc.handle(ev.RpcDone(1))
    lc.handle(ev.Submit(0, n=2))  # asleep: it ends failed at once
    assert lc.reserved == {} and lc.records == {}


def test_restore_rebuilds_the_reservations() -> None:
    lc = Lifecycle([StageKind.AR], [True])
    lc.handle(ev.Control(1, ControlMethod.PAUSE_SCHEDULER))
    lc.handle(ev.RpcDone(1))
    lc.handle(ev.Submit(0, n=2))
    snap, reserved = lc.snapshot(), dict(lc.reserved)
    other = Lifecycle([StageKind.AR], [True])
    other.restore(snap)
    assert other.reserved == reserved == {1: 0, 2: 0}
