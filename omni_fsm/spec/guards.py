"""Named guards: pure predicates over (record, event, engine) that select a table row.

A guard never mutates anything and never consults the table; the table names guards by their
names, so a row reads as ``(state, event type, guards) -> next state, effects``. Each guard is
one typed function, written once; ``GUARDS`` maps every name a row may use to its function, and
``SPEC`` carries it (the core's selection and the ``transitions`` reference machine call the guards a
``Spec`` carries: a variant with another function for a name runs that one).
Three families are made over a closed vocabulary (``children_fold_to_*``, ``rpc_is_*``,
``abort_resumes_*``), one function per member, each named as the rows name it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from omni_fsm.spec.record import Engine, Record
from omni_fsm.spec.vocabulary import (
    SEVERITY,
    TERMINAL,
    ControlMethod,
    EngineState,
    ReqState,
    Role,
    StageKind,
    StopKind,
)

Guard = Callable[[Any, Any, Engine], bool]

# The members the guards compare with, bound once: the guards run on every event, and on Python 3.11 reading
# ``Kind.MEMBER`` passes through ``EnumType.__getattr__``'s hook, about ten times the cost of a module global.
_RUNNING, _PAUSED, _SLEEPING = EngineState.RUNNING, EngineState.PAUSED, EngineState.SLEEPING
_AR, _CLIENT, _COMPANION = StageKind.AR, Role.CLIENT, Role.COMPANION
_IGNORED, _STOP, _LENGTH, _REPETITION = StopKind.IGNORED, StopKind.STOP, StopKind.LENGTH, StopKind.REPETITION


def fold_outcome(worst: ReqState | None, outcome: ReqState) -> ReqState:
    """Return the more severe of a parent's worst child outcome so far and a new one."""
    if worst is None or SEVERITY[outcome] > SEVERITY[worst]:
        return outcome
    return worst


# -- the engine's control plane ------------------------------------------------------------


def engine_running(record: Record, event: Any, engine: Engine) -> bool:
    """The engine admits work."""
    return engine.state is _RUNNING


def engine_paused(record: Record, event: Any, engine: Engine) -> bool:
    """Admission is held (``pause_scheduler``)."""
    return engine.state is _PAUSED


def engine_sleeping(record: Record, event: Any, engine: Engine) -> bool:
    """The engine sleeps: a submit is refused."""
    return engine.state is _SLEEPING


def wakes_every_tag(record: Any, event: Any, engine: Engine) -> bool:
    """The answered ``wake_up`` leaves nothing asleep (no tags or ``*``: everything)."""
    call = engine.pending_rpcs.get(event.call_id)
    tags = call[2] if call else frozenset()
    return not tags or "*" in tags or tags >= engine.sleep_tags


# -- the pipeline and the stage -------------------------------------------------------------


def slot_free(record: Record, event: Any, engine: Engine) -> bool:
    """The current stage has a running slot free."""
    return engine.slots_used[record.stage] < engine.capacity


def ar_stage(record: Record, event: Any, engine: Engine) -> bool:
    """The current stage is autoregressive (diffusion stages have no preemption nor parking)."""
    return engine.kinds[record.stage] is _AR


def last_stage(record: Record, event: Any, engine: Engine) -> bool:
    """The current stage is the one whose finish ends the request."""
    return record.stage >= record.last_stage


def final_output_stage(record: Record, event: Any, engine: Engine) -> bool:
    """The current stage streams to the client (never for a companion, which the client never sees)."""
    return engine.final[record.stage] and record.role is not _COMPANION


# -- what the request owns and has made ------------------------------------------------------


def parallel_parent(record: Record, event: Any, engine: Engine) -> bool:
    """An ``n>1`` request: its samples (the children) do the work."""
    return record.children_left > 0


def companions_pending(record: Record, event: Any, engine: Engine) -> bool:
    """Some CFG companion has not finished yet."""
    return record.companions_left > 0


def last_companion(record: Record, event: Any, engine: Engine) -> bool:
    """The companion that ended was the last one outstanding."""
    return record.companions_left == 1


def last_child(record: Record, event: Any, engine: Engine) -> bool:
    """The child that ended was the last one open."""
    return record.children_left == 1


def nothing_generated(record: Record, event: Any, engine: Engine) -> bool:
    """The current stage has produced no token yet."""
    return record.tokens == 0


def cannot_resume(record: Record, event: Any, engine: Engine) -> bool:
    """A failed abort cannot resume: a dependent (its parent's abort), or a parent whose companion was lost or is
    being aborted with it (nothing to resume with)."""
    return record.role is not _CLIENT or record.worst is ReqState.FINISHED_ERROR or record.companions_left > 0


# -- what the event says ----------------------------------------------------------------------


def companion_ok(record: Record, event: Any, engine: Engine) -> bool:
    """The companion that ended finished normally."""
    return bool(event.ok)


def prompt_ignored(record: Record, event: Any, engine: Engine) -> bool:
    """The stage ignored the prompt (too long for the model): nothing generated."""
    return event.stop is _IGNORED


def stopped(record: Record, event: Any, engine: Engine) -> bool:
    """The stage stopped on a stop token or string."""
    return event.stop is _STOP


def length_capped(record: Record, event: Any, engine: Engine) -> bool:
    """The stage stopped at its length cap."""
    return event.stop is _LENGTH


def repetition(record: Record, event: Any, engine: Engine) -> bool:
    """The stage stopped on repetition."""
    return event.stop is _REPETITION


# -- the families: one named guard per member of a closed vocabulary ------------------------------


def children_fold_to(state: ReqState) -> Guard:
    """Return the guard 'the children's outcomes, with this one, fold to ``state``'."""

    def guard(record: Record, event: Any, engine: Engine) -> bool:
        return fold_outcome(record.worst, event.outcome) is state

    guard.__name__ = guard.__qualname__ = f"children_fold_to_{state.name.lower()}"
    return guard


def rpc_is(method: ControlMethod) -> Guard:
    """Return the guard 'the answered control RPC is ``method``'."""

    def guard(record: Any, event: Any, engine: Engine) -> bool:
        call = engine.pending_rpcs.get(event.call_id)
        return call is not None and call[0] is method

    guard.__name__ = guard.__qualname__ = f"rpc_is_{method.value}"
    return guard


def resumes(state: ReqState) -> str:
    """Return the name of the guard 'the interrupted abort resumes ``state``' (one per state: ``GUARDS``)."""
    return f"abort_resumes_{state.name.lower()}"


def abort_resumes(state: ReqState) -> Guard:
    """Return the guard 'the abort in flight interrupted ``state``' (restored if the abort fails)."""

    def guard(record: Record, event: Any, engine: Engine) -> bool:
        return record.resume is state

    guard.__name__ = guard.__qualname__ = resumes(state)
    return guard


_PLAIN: tuple[Guard, ...] = (
    engine_running, engine_paused, engine_sleeping, wakes_every_tag, slot_free, ar_stage, last_stage,
    final_output_stage, parallel_parent, companions_pending, last_companion, last_child, nothing_generated,
    cannot_resume, companion_ok, prompt_ignored, stopped, length_capped, repetition,
)
_FAMILIES: tuple[Guard, ...] = (
    *(children_fold_to(state) for state in sorted(TERMINAL, key=lambda s: s.name)),
    *(rpc_is(method) for method in ControlMethod),
    *(abort_resumes(state) for state in ReqState),
)
#: guard name -> its function: every name a row may use
GUARDS: dict[str, Guard] = {guard.__name__: guard for guard in (*_PLAIN, *_FAMILIES)}


def check_guard_names(names: set[str], guards: Mapping[str, Guard] = GUARDS) -> None:
    """Raise ``KeyError`` naming the first of ``names`` that ``guards`` does not name."""
    for name in sorted(names):
        if name not in guards:
            raise KeyError(f"unknown guard {name!r}")


__all__ = ["GUARDS", "Guard", "Record", "abort_resumes", "check_guard_names", "children_fold_to", "fold_outcome",
           "resumes", "rpc_is"]  # fmt: skip
