"""Named guards: pure predicates over (record, event, engine) that select a table row.

A guard never mutates anything and never consults the table; the table names guards by these
keys, so a row reads as ``(state, event type, guard) -> next state, effects``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_fsm._record import Engine, Record
from omni_fsm._vocab import SEVERITY, TERMINAL, ControlMethod, EngineState, ReqState, Role, StageKind, StopKind

Guard = Callable[[Any, Any, Engine], bool]


def fold_outcome(worst: ReqState | None, outcome: ReqState) -> ReqState:
    """Return the more severe of a parent's worst child outcome so far and a new one."""
    if worst is None or SEVERITY[outcome] > SEVERITY[worst]:
        return outcome
    return worst


def _pending_method(ev: Any, eng: Engine) -> ControlMethod | None:
    call = eng.pending_rpcs.get(ev.call_id)
    return call[0] if call else None


def _wakes_all(tags: frozenset[str], sleeping: frozenset[str]) -> bool:
    """Return whether waking ``tags`` (empty or ``*``: everything) leaves nothing asleep."""
    return not tags or "*" in tags or tags >= sleeping


GUARDS: dict[str, Guard] = {
    "engine_running": lambda r, e, g: g.state is EngineState.RUNNING,
    "engine_paused": lambda r, e, g: g.state is EngineState.PAUSED,
    "engine_sleeping": lambda r, e, g: g.state is EngineState.SLEEPING,
    "parallel_parent": lambda r, e, g: r.children_left > 0,
    "slot_free": lambda r, e, g: g.slots_used[r.stage] < g.capacity,
    "ar_stage": lambda r, e, g: g.kinds[r.stage] is StageKind.AR,
    "last_stage": lambda r, e, g: r.stage >= r.last_stage,
    "final_output_stage": lambda r, e, g: g.final[r.stage] and r.role is not Role.COMPANION,
    "companions_pending": lambda r, e, g: r.companions_left > 0,
    "last_companion": lambda r, e, g: r.companions_left == 1,
    "companion_ok": lambda r, e, g: e.ok,
    "last_child": lambda r, e, g: r.children_left == 1,
    "cannot_resume": lambda r, e, g: r.role is not Role.CLIENT or r.worst is ReqState.FINISHED_ERROR,
    "prompt_ignored": lambda r, e, g: e.stop is StopKind.IGNORED,
    "nothing_generated": lambda r, e, g: r.tokens == 0,
    "stopped": lambda r, e, g: e.stop is StopKind.STOP,
    "length_capped": lambda r, e, g: e.stop is StopKind.LENGTH,
    "repetition": lambda r, e, g: e.stop is StopKind.REPETITION,
    "wakes_every_tag": lambda r, e, g: _wakes_all(g.pending_rpcs[e.call_id][2], g.sleep_tags),
}
def _folds_to(state: ReqState) -> Guard:
    return lambda r, e, g: fold_outcome(r.worst, e.outcome) is state


def _rpc_is(method: ControlMethod) -> Guard:
    return lambda r, e, g: _pending_method(e, g) is method


def _resumes(state: ReqState) -> Guard:
    return lambda r, e, g: r.resume is state


for _state in TERMINAL:
    GUARDS[f"children_fold_to_{_state.name.lower()}"] = _folds_to(_state)
for _method in ControlMethod:
    GUARDS[f"rpc_is_{_method.value}"] = _rpc_is(_method)


def resumes(state: ReqState) -> str:
    """Return the name of the guard 'the interrupted abort resumes ``state``'."""
    name = f"abort_resumes_{state.name.lower()}"
    if name not in GUARDS:
        GUARDS[name] = _resumes(state)
    return name


def check_guard_names(names: set[str]) -> None:
    """Raise ``KeyError`` naming the first unknown guard."""
    for name in sorted(names):
        if name not in GUARDS:
            raise KeyError(f"unknown guard {name!r}")


__all__ = ["GUARDS", "Guard", "Record", "check_guard_names", "fold_outcome", "resumes"]
