"""Named guards: pure predicates over (record, event, engine) that select a table row.

A guard never mutates anything and never consults the table; the table names guards by these
keys, so a row reads as ``(state, event type, guard) -> next state, effects``. Each guard is
written once, as an expression (``GUARD_SOURCES``): the compiled selectors inline it, and
``GUARDS`` holds it as a function for the ``transitions`` reference machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from omni_fsm.spec.record import Engine, Record
from omni_fsm.spec.vocabulary import SEVERITY, TERMINAL, ControlMethod, EngineState, ReqState, Role, StageKind, StopKind

Guard = Callable[[Any, Any, Engine], bool]


def fold_outcome(worst: ReqState | None, outcome: ReqState) -> ReqState:
    """Return the more severe of a parent's worst child outcome so far and a new one."""
    if worst is None or SEVERITY[outcome] > SEVERITY[worst]:
        return outcome
    return worst


def _pending_method(ev: Any, eng: Engine) -> ControlMethod | None:
    call = eng.pending_rpcs.get(ev.call_id)
    return call[0] if call else None


def _pending_tags(ev: Any, eng: Engine) -> frozenset[str]:
    call = eng.pending_rpcs.get(ev.call_id)
    return call[2] if call else frozenset()


def _wakes_all(tags: frozenset[str], sleeping: frozenset[str]) -> bool:
    """Return whether waking ``tags`` (empty or ``*``: everything) leaves nothing asleep."""
    return not tags or "*" in tags or tags >= sleeping


#: guard name -> a Python expression over ``r`` (the record), ``e`` (the event) and ``g`` (the
#: engine), evaluated in ``NAMESPACE``. The compiled selectors inline these expressions; ``GUARDS``
#: holds the same expressions as functions (the reference machine's conditions).
GUARD_SOURCES: dict[str, str] = {
    "engine_running": "g.state is EngineState.RUNNING",
    "engine_paused": "g.state is EngineState.PAUSED",
    "engine_sleeping": "g.state is EngineState.SLEEPING",
    "parallel_parent": "r.children_left > 0",
    "slot_free": "g.slots_used[r.stage] < g.capacity",
    "ar_stage": "g.kinds[r.stage] is StageKind.AR",
    "last_stage": "r.stage >= r.last_stage",
    "final_output_stage": "g.final[r.stage] and r.role is not Role.COMPANION",
    "companions_pending": "r.companions_left > 0",
    "last_companion": "r.companions_left == 1",
    "companion_ok": "e.ok",
    "last_child": "r.children_left == 1",
    # a dependent, or a parent whose companion was lost or is being aborted with it (T2: nothing to resume with)
    "cannot_resume": "r.role is not Role.CLIENT or r.worst is ReqState.FINISHED_ERROR or r.companions_left > 0",
    "prompt_ignored": "e.stop is StopKind.IGNORED",
    "nothing_generated": "r.tokens == 0",
    "stopped": "e.stop is StopKind.STOP",
    "length_capped": "e.stop is StopKind.LENGTH",
    "repetition": "e.stop is StopKind.REPETITION",
    "wakes_every_tag": "_wakes_all(_pending_tags(e, g), g.sleep_tags)",
}
for _state in TERMINAL:
    _fold = f"fold_outcome(r.worst, e.outcome) is ReqState.{_state.name}"
    GUARD_SOURCES[f"children_fold_to_{_state.name.lower()}"] = _fold
for _method in ControlMethod:
    GUARD_SOURCES[f"rpc_is_{_method.value}"] = f"_pending_method(e, g) is ControlMethod.{_method.name}"
#: the Enums the expressions may name (each member is also a plain name: ``ReqState_RUNNING``)
_ENUMS = (EngineState, StageKind, Role, ReqState, StopKind, ControlMethod)
#: what the expressions may name
NAMESPACE: dict[str, Any] = {
    "fold_outcome": fold_outcome, "_pending_method": _pending_method, "_pending_tags": _pending_tags,
    "_wakes_all": _wakes_all,
}  # fmt: skip
for _enum in _ENUMS:
    NAMESPACE[_enum.__name__] = _enum
    NAMESPACE.update({f"{_enum.__name__}_{m.name}": m for m in _enum})
_MEMBER = re.compile(rf"\b({'|'.join(e.__name__ for e in _ENUMS)})\.([A-Z_]+)\b")


def inlined(name: str) -> str:
    """Return guard ``name``'s expression with enum members as plain names of ``NAMESPACE`` (fewer lookups)."""
    return _MEMBER.sub(r"\1_\2", GUARD_SOURCES[name])


def _compile(name: str) -> Guard:
    guard: Guard = eval(f"lambda r, e, g: {inlined(name)}", NAMESPACE)  # the expressions above, nothing else
    return guard


GUARDS: dict[str, Guard] = {name: _compile(name) for name in GUARD_SOURCES}


def resumes(state: ReqState) -> str:
    """Return the name of the guard 'the interrupted abort resumes ``state``' (one per state, below)."""
    return f"abort_resumes_{state.name.lower()}"


for _state in ReqState:
    GUARD_SOURCES[resumes(_state)] = f"r.resume is ReqState.{_state.name}"
    GUARDS[resumes(_state)] = _compile(resumes(_state))


def check_guard_names(names: set[str]) -> None:
    """Raise ``KeyError`` naming the first unknown guard."""
    for name in sorted(names):
        if name not in GUARDS:
            raise KeyError(f"unknown guard {name!r}")


__all__ = ["GUARDS", "GUARD_SOURCES", "NAMESPACE", "Guard", "Record", "check_guard_names", "fold_outcome", "inlined",
           "resumes"]  # fmt: skip
