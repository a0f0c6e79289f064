"""The ``Spec`` carries everything that decides a step, and the core runs what it carries: a variant that edits
any one part (a row, a guard, an effect, an engine effect, the terminal effects, the slot policy, a fan-out) changes
the next ``handle`` at once, with nothing to regenerate. So does an edit to a function the default ``SPEC`` carries
(the edit-and-run loop tells the truth)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pytest

from omni_fsm import SPEC, ControlMethod, Lifecycle, LifecycleError, ReqState, Spec, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.spec.effects import EFFECTS, Effect, FanOut, Reach
from omni_fsm.spec.guards import GUARDS

AR = StageKind.AR
SLEEP = (ev.Control(1, ControlMethod.SLEEP), ev.RpcDone(1))
#: a parent's abort reaches its companions as a shutdown instead (they end without an abort of their own)
SHUT_DOWN_INSTEAD = FanOut(Reach.DEPENDENTS, ev.ShutdownAbort)


def run(spec: Spec, events: Iterable[ev.Event]) -> list[list[ob.Observation]]:
    """Return each event's observations on a fresh one-stage core running ``spec``."""
    lc = Lifecycle((AR,), (True,), 4, spec=spec)
    return [lc.handle(e) for e in events]


def last(spec: Spec, events: tuple[ev.Event, ...]) -> Any:
    """Return the last event's observations, or the ``LifecycleError`` it raised (as its message)."""
    lc = Lifecycle((AR,), (True,), 4, spec=spec)
    for e in events[:-1]:
        lc.handle(e)
    try:
        return lc.handle(events[-1])
    except LifecycleError as exc:
        return str(exc)


def nothing(*args: Any) -> None:
    """An effect that does nothing."""


def variant_rows() -> Spec:
    """The submit of a running engine goes to WAITING without being dispatched."""
    rows = tuple(attrs.evolve(r, effects=(Effect.SPAWN_COMPANIONS,))
                 if r.source is ReqState.NEW and r.target is ReqState.WAITING else r for r in SPEC.rows)  # fmt: skip
    return attrs.evolve(SPEC, rows=rows)


def variant_engine_rows() -> Spec:
    """A control call of a running engine is never sent."""
    rows = tuple(attrs.evolve(r, effects=()) if r.event is ev.Control else r for r in SPEC.engine_rows)
    return attrs.evolve(SPEC, engine_rows=rows)


CASES: dict[str, tuple[Callable[[], Spec], tuple[ev.Event, ...]]] = {
    "rows": (variant_rows, (ev.Submit(0),)),
    "engine_rows": (variant_engine_rows, (ev.Control(1, ControlMethod.PAUSE_SCHEDULER),)),
    "guards": (lambda: attrs.evolve(SPEC, guards={**SPEC.guards, "engine_sleeping": lambda r, e, g: False}),
               (*SLEEP, ev.Submit(0))),
    "effects": (lambda: attrs.evolve(SPEC, effects={**SPEC.effects, Effect.DISPATCH: nothing}), (ev.Submit(0),)),
    "engine_effects": (lambda: attrs.evolve(SPEC, engine_effects={**SPEC.engine_effects, Effect.SEND_RPC: nothing}),
                       (ev.Control(1, ControlMethod.PAUSE_SCHEDULER),)),
    "on_terminal": (lambda: attrs.evolve(SPEC, on_terminal=SPEC.on_terminal[1:]),
                    (ev.Submit(0), ev.Scheduled(0, 0), ev.StageFinished(0, 0))),
    "holds_slot": (lambda: attrs.evolve(SPEC, holds_slot=SPEC.holds_slot - {ReqState.RUNNING}),
                   (ev.Submit(0), ev.Scheduled(0, 0))),
    "fan_out": (lambda: attrs.evolve(SPEC, fan_out={**SPEC.fan_out, Effect.ABORT_COMPANIONS: SHUT_DOWN_INSTEAD}),
                (ev.Submit(0, companions=1), ev.Abort(0))),
}  # fmt: skip


def test_every_part_that_decides_a_step_has_a_case() -> None:
    assert {f.name for f in attrs.fields(Spec)} - {"name"} == set(CASES)


@pytest.mark.parametrize("part", CASES)
def test_a_variant_of_one_part_changes_the_next_handle(part: str) -> None:
    make, events = CASES[part]
    variant = make()
    assert getattr(variant, part) != getattr(SPEC, part) and variant is not SPEC
    assert last(variant, events) != last(SPEC, events), part
    assert run(SPEC, events) == run(attrs.evolve(SPEC), events)  # an unchanged copy runs as SPEC does


def test_the_issue_s_guard_edit_refuses_a_sleeping_engine_s_submit() -> None:
    """``engine_sleeping`` made to say ``False``: no row takes the submit of a sleeping engine any more."""
    variant = attrs.evolve(SPEC, guards={**SPEC.guards, "engine_sleeping": lambda record, event, engine: False})
    assert [type(o) for o in last(SPEC, (*SLEEP, ev.Submit(0)))] == [ob.Submitted, ob.Emitted, ob.Released]
    assert last(variant, (*SLEEP, ev.Submit(0))) == "request 0 in state NEW: no transition for Submit(rid=0, n=1, " \
                                                    "companions=0, request_id=None)"


def test_an_edit_to_a_function_spec_carries_reaches_the_default_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an edit to ``guards.py`` or ``effects.py`` does, in one process: the default core runs it."""
    before = Lifecycle((AR,), (True,)).handle(ev.Submit(0))
    assert ob.Dispatched(0, 0) in before
    monkeypatch.setitem(EFFECTS, Effect.DISPATCH, nothing)
    monkeypatch.setitem(GUARDS, "engine_sleeping", lambda record, event, engine: False)
    assert SPEC.effects is EFFECTS and SPEC.guards is GUARDS
    assert Lifecycle((AR,), (True,)).handle(ev.Submit(0)) == [o for o in before if o != ob.Dispatched(0, 0)]
    assert isinstance(last(SPEC, (*SLEEP, ev.Submit(0))), str)
