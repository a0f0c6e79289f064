"""Structural checks on the lifecycle table itself (h2-style): what must hold for any valuation.

``NEW`` is transient: the record exists only while its own ``Submit`` is handled, so the rows
"from every live state" start at ``PENDING``.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import pytest

from omni_fsm import ENGINE_TERMINAL, LIVE, SPEC, TERMINAL, Effect, EngineState, ReqState
from omni_fsm import events as ev
from omni_fsm.spec.guards import GUARDS
from omni_fsm.spec.table import ON_TERMINAL
from omni_fsm.spec.vocabulary import BOUND as ABORTABLE_BOUND

OPEN = sorted(LIVE - {ReqState.NEW}, key=lambda s: s.name)
#: States an abort ends (or keeps) without a physical abort at a stage: the explicit rows.
ABORT_WITHOUT_STAGE = {
    ReqState.PENDING: ReqState.FINISHED_ABORTED,
    ReqState.STAGE_DONE: ReqState.FINISHED_ABORTED,
    ReqState.AWAITING_CHILDREN: ReqState.ABORTING_CHILDREN,
    ReqState.ABORTING_CHILDREN: ReqState.ABORTING_CHILDREN,
    ReqState.ABORTING: ReqState.ABORTING,
}
#: Effects only the control plane carries out; on a request row they would silently do nothing.
CONTROL_PLANE_EFFECTS = {e for row in SPEC.engine_rows for e in row.effects}
LIVE_ENGINE = [s for s in EngineState if s not in ENGINE_TERMINAL]


def rows_for(state: Any, event_type: type[ev.Event], rows: tuple[Any, ...] = SPEC.rows) -> list[Any]:
    return [r for r in rows if r.source is state and r.event is event_type]


def unguarded(state: Any, event_type: type[ev.Event], rows: tuple[Any, ...] = SPEC.rows) -> Any:
    """Return the row that takes ``event_type`` in ``state`` whatever the guards say, else ``None``."""
    return next((r for r in rows_for(state, event_type, rows) if not r.when and not r.unless), None)


def pairs_with_rows(rows: tuple[Any, ...]) -> list[tuple[Any, type[ev.Event]]]:
    return list(dict.fromkeys((r.source, r.event) for r in rows))


def pair_id(value: Any) -> str:
    return value.name if hasattr(value, "name") else value.__name__


# -- every live request accepts the events that end it from outside -------------------------------


@pytest.mark.parametrize("state", OPEN, ids=pair_id)
def test_abort_accepted_in_every_live_state(state: ReqState) -> None:
    row = unguarded(state, ev.Abort)
    assert row is not None, f"{state.name} has no unguarded Abort row"
    assert row.target is ABORT_WITHOUT_STAGE.get(state, ReqState.ABORTING)


@pytest.mark.parametrize("state", sorted(ABORTABLE_BOUND, key=lambda s: s.name), ids=pair_id)
def test_abort_of_a_bound_request_asks_the_stage_and_commits_nothing(state: ReqState) -> None:
    (row,) = rows_for(state, ev.Abort)
    assert Effect.SEND_ABORT in row.effects and Effect.REMEMBER_RESUME in row.effects
    assert Effect.COMMIT_ABORT not in row.effects


@pytest.mark.parametrize("state", sorted(ABORTABLE_BOUND, key=lambda s: s.name), ids=pair_id)
def test_failed_abort_resumes_every_interrupted_state(state: ReqState) -> None:
    targets = {r.target for r in rows_for(ReqState.ABORTING, ev.AbortFailed)}
    assert state in targets


@pytest.mark.parametrize("state", OPEN, ids=pair_id)
def test_engine_failure_accepted_in_every_live_state(state: ReqState) -> None:
    row = unguarded(state, ev.EngineFailed)
    assert row is not None and row.target is ReqState.FAILED_FATAL


@pytest.mark.parametrize("state", OPEN, ids=pair_id)
def test_shutdown_abort_accepted_in_every_live_state(state: ReqState) -> None:
    row = unguarded(state, ev.ShutdownAbort)
    assert row is not None and row.target is ReqState.FINISHED_ABORTED


# -- terminal states ---------------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(TERMINAL, key=lambda s: s.name), ids=pair_id)
def test_no_row_leaves_a_terminal_state(state: ReqState) -> None:
    assert [r.label() for r in SPEC.rows if r.source is state] == []


def test_terminal_states_never_hold_a_slot() -> None:
    assert SPEC.holds_slot & TERMINAL == frozenset()


def test_commit_abort_only_on_rows_into_finished_aborted() -> None:
    wrong = [(r.source.name, r.label()) for r in SPEC.rows
             if Effect.COMMIT_ABORT in r.effects and r.target is not ReqState.FINISHED_ABORTED]  # fmt: skip
    assert wrong == []


def test_terminal_entry_ends_by_releasing_the_record() -> None:
    assert SPEC.on_terminal == ON_TERMINAL
    assert SPEC.on_terminal[-1] is Effect.RELEASE and SPEC.on_terminal[0] is Effect.EMIT_TERMINAL


# -- names, vocabularies, reachability ---------------------------------------------------------


@pytest.mark.parametrize("row", SPEC.rows + SPEC.engine_rows, ids=lambda r: f"{r.source.name}:{r.label()}")
def test_every_rows_guards_exist(row: Any) -> None:
    assert [g for g in (*row.when, *row.unless) if g not in GUARDS] == []


@pytest.mark.parametrize("pair", pairs_with_rows(SPEC.rows) + pairs_with_rows(SPEC.engine_rows),
                         ids=lambda p: f"{p[0].name}-{p[1].__name__}")  # fmt: skip
def test_last_row_of_every_pair_is_unguarded_or_its_guards_are_named(pair: tuple[Any, type[ev.Event]]) -> None:
    rows = SPEC.rows if isinstance(pair[0], ReqState) else SPEC.engine_rows
    last = rows_for(*pair, rows)[-1]
    guards = {g for r in rows_for(*pair, rows) for g in (*r.when, *r.unless)}
    assert (not last.when and not last.unless) or guards <= GUARDS.keys()


@pytest.mark.parametrize("pair", pairs_with_rows(SPEC.rows) + pairs_with_rows(SPEC.engine_rows),
                         ids=lambda p: f"{p[0].name}-{p[1].__name__}")  # fmt: skip
def test_no_row_is_shadowed_by_an_unguarded_row_before_it(pair: tuple[Any, type[ev.Event]]) -> None:
    rows = rows_for(*pair, SPEC.rows if isinstance(pair[0], ReqState) else SPEC.engine_rows)
    dead = [r.label() for i, r in enumerate(rows) if any(not (p.when or p.unless) for p in rows[:i])]
    assert dead == []


def test_request_rows_use_request_vocabulary_only() -> None:
    assert all(isinstance(r.source, ReqState) and isinstance(r.target, ReqState) for r in SPEC.rows)
    assert {r.event for r in SPEC.rows} <= set(ev.REQUEST_EVENTS)


def test_engine_rows_use_engine_vocabulary_only() -> None:
    assert all(isinstance(r.source, EngineState) and isinstance(r.target, EngineState) for r in SPEC.engine_rows)
    assert {r.event for r in SPEC.engine_rows} <= set(ev.ENGINE_EVENTS)


def test_request_rows_use_no_control_plane_effects() -> None:
    assert [r.label() for r in SPEC.rows if CONTROL_PLANE_EFFECTS & set(r.effects)] == []


def _reachable(start: Any, rows: tuple[Any, ...]) -> set[Any]:
    seen, todo = {start}, deque([start])
    while todo:
        state = todo.popleft()
        for row in rows:
            if row.source is state and row.target not in seen:
                seen.add(row.target)
                todo.append(row.target)
    return seen


@pytest.mark.parametrize("state", list(ReqState), ids=pair_id)
def test_every_state_is_reachable_from_new(state: ReqState) -> None:
    assert state is ReqState.NEW or state in {r.target for r in SPEC.rows}
    assert state in _reachable(ReqState.NEW, SPEC.rows)


@pytest.mark.parametrize("state", OPEN, ids=pair_id)
def test_every_live_state_can_end(state: ReqState) -> None:
    assert _reachable(state, SPEC.rows) & TERMINAL


@pytest.mark.parametrize("state", list(EngineState), ids=pair_id)
def test_every_engine_state_is_reachable_from_running(state: EngineState) -> None:
    assert state in _reachable(EngineState.RUNNING, SPEC.engine_rows)


# -- the control plane -----------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "event_type"), list(itertools.product(LIVE_ENGINE, (ev.EngineDied, ev.Shutdown))),
                         ids=pair_id)  # fmt: skip
def test_engine_death_and_shutdown_accepted_in_every_live_engine_state(
    state: EngineState, event_type: type[ev.Event]
) -> None:
    row = unguarded(state, event_type, SPEC.engine_rows)
    assert row is not None and row.target in ENGINE_TERMINAL


@pytest.mark.parametrize("state", sorted(ENGINE_TERMINAL, key=lambda s: s.name), ids=pair_id)
def test_a_stopped_or_dead_engine_only_shuts_down(state: EngineState) -> None:
    assert {(r.event, r.target) for r in SPEC.engine_rows if r.source is state} == {(ev.Shutdown, EngineState.STOPPED)}
