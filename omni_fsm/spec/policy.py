"""What happens around the table: every decision the core takes before a row is selected, when none is,
and how slots move. With ``table.py`` this is the whole of what decides a transition or a drop; the core
(``omni_fsm.engine``) executes it and decides nothing of its own.

- **Intake** (``INTAKE``), per event type: whether it is about one request or the engine; which one may
  create a request (``Submit``); which runtime reports are about one stage, and so stale unless that is the
  request's current stage and its state is ``STAGE_LIVE``; which control-plane events carry a call id that
  must be new (``Control``) or in flight (an answer). An event for an id the core does not track is dropped
  and counted as unknown (silently when the core's own fan-out reaches a dependent that already ended).
- **Admission** (``admission_problem``): the id rules of a new request.
- **Misses** (``MISS_POLICY``): anything not in the table is handled by the event's origin; a runtime report
  becomes ``MISS_REWRITE`` for the request (after a ``Rejected``), an engine-wide one is dropped as stale.
- **Slots** (``slot_plan``): a record occupies one slot of its current stage exactly while its state (while
  aborting: the state the abort interrupted) is in the spec's ``holds_slot``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec.effects import Effect
from omni_fsm.spec.vocabulary import BOUND, TERMINAL, IdentityHashedEnum, ReqState


class Miss(IdentityHashedEnum):
    """What the core does with an event the table has no row for; the value says it in words."""

    REFUSE = ("API misuse: one typed error (LifecycleError) naming the request, the state and the event,"
              " and nothing changes")  # fmt: skip
    FAIL_REQUEST = ("the request fails (handled as StageFailed: finish reason error); an engine-wide"
                    " report is dropped and counted as stale")  # fmt: skip
    BUG = "a bug of the core (InternalError)"


#: What happens to an event the table has no row for, by the event's ``ORIGIN`` (the core
#: dispatches on it; the diagrams print it). A runtime report for an id no longer tracked, or
#: for a stage the request is not bound to, never reaches the table: it is dropped and counted.
MISS_POLICY: dict[ev.Origin, Miss] = {ev.CLIENT: Miss.REFUSE, ev.RUNTIME: Miss.FAIL_REQUEST, ev.INTERNAL: Miss.BUG}
#: The event a runtime report with no row becomes for its request (``Miss.FAIL_REQUEST``).
MISS_REWRITE: type[ev.StageEvent] = ev.StageFailed

#: Live states whose runtime reports about the current stage are judged by the table (bound, or aborting).
STAGE_LIVE: frozenset[ReqState] = BOUND | {ReqState.ABORTING}
#: The state a spawned dependent's record waits in until its parent's fan-out submits it.
SPAWNED = ReqState.NEW


class CallId(IdentityHashedEnum):
    """What a control-plane event's call id must be."""

    NONE = "no call id"
    NEW = "a call id not in flight (else the call is refused)"
    IN_FLIGHT = "a call id in flight (else the answer is dropped and counted as unknown)"


@attrs.frozen
class Intake:
    """What the core does with one event type before the table."""

    per_request: bool  #: about one request (``rid``); else about the engine
    admits: bool = False  #: an id the core does not track becomes a new request
    stage_scoped: bool = False  #: a report about one stage: stale unless the request's current one, STAGE_LIVE
    call_id: CallId = CallId.NONE


def _intake(event: type[ev.Event]) -> Intake:
    if issubclass(event, ev.RequestEvent):
        return Intake(True, admits=event is ev.Submit, stage_scoped=issubclass(event, ev.StageEvent))
    rule = {ev.Control: CallId.NEW, ev.RpcDone: CallId.IN_FLIGHT, ev.RpcFailed: CallId.IN_FLIGHT}
    return Intake(False, call_id=rule.get(event, CallId.NONE))


#: event type -> its intake; an event type not here is no event of the lifecycle (``TypeError``)
INTAKE: Mapping[type[ev.Event], Intake] = {e: _intake(e) for e in (*ev.REQUEST_EVENTS, *ev.ENGINE_EVENTS)}


def admission_problem(event: ev.Submit, reserved_by: int | None = None) -> str | None:
    """Return why a client's new request is refused (its ids, its fan-out), or ``None``; ``reserved_by``: the
    tracked request that owns ``event.rid`` as one of its dependents' ids, if any."""
    if event.rid < 0:
        return "request ids are non-negative"
    if reserved_by is not None:
        return f"id reserved for a dependent of request {reserved_by}"
    if event.n < 1 or event.companions < 0 or (event.n > 1 and event.companions > 0):
        return "need n >= 1, companions >= 0, not both"
    return None


# -- slots -----------------------------------------------------------------------------------------

#: States in which the slot follows the state an abort interrupted (``Record.resume``).
INTERRUPTING: frozenset[ReqState] = frozenset({ReqState.ABORTING})
#: Effects that move a request to another stage (it frees its slot there and may take one here).
MOVES_STAGE: frozenset[Effect] = frozenset({Effect.FORWARD})


def holds_slot(state: ReqState, resume: ReqState | None, holding: frozenset[ReqState]) -> bool:
    """Return whether a record in ``state`` holds a slot (while aborting: as the state it interrupted)."""
    return (resume if state in INTERRUPTING else state) in holding


def slot_moves(held: bool, holds: bool, moved: bool) -> tuple[bool, bool]:
    """Return whether a move frees the slot it held and takes one (a move to another stage does both)."""
    return held and (moved or not holds), holds and (moved or not held)


@attrs.frozen
class SlotPlan:
    """What a row does to slots and whether it ends the request, known when the table is built."""

    terminal: bool
    #: frees / takes a slot; ``None``: the row leaves or enters an aborting state, decided when it fires
    free: bool | None
    take: bool | None


def slot_plan(source: ReqState, target: ReqState, effects: tuple[Effect, ...],
              holding: frozenset[ReqState]) -> SlotPlan:
    """Return the slot moves of a row ``source -> target / effects`` under ``holding``."""
    terminal = target in TERMINAL
    if source in INTERRUPTING or target in INTERRUPTING:
        return SlotPlan(terminal, None, None)
    moved = not MOVES_STAGE.isdisjoint(effects)
    return SlotPlan(terminal, *slot_moves(source in holding, target in holding, moved))


def row_problem(effects: tuple[Effect, ...], resume_to: ReqState | None) -> str | None:
    """Return what is wrong with a request row's ``FOLLOW_INTERRUPTED``, or ``None``."""
    if Effect.FOLLOW_INTERRUPTED in effects and resume_to not in BOUND:
        return f"FOLLOW_INTERRUPTED must say a bound state to move to, not {resume_to!r}"
    return None


__all__ = ["INTAKE", "INTERRUPTING", "MISS_POLICY", "MISS_REWRITE", "MOVES_STAGE", "SPAWNED", "STAGE_LIVE", "CallId",
           "Intake", "Miss", "SlotPlan", "admission_problem", "holds_slot", "row_problem", "slot_moves",
           "slot_plan"]  # fmt: skip
