"""Single-point faults of every kind, each caught by the bound of the sweep (``specs/sweep.toml``) named for it.

A fault is one change to what decides a step, made as a ``Spec`` variant: a row's target, a row's guard, the
terminal effects, an effect's body, a guard's body, the slot policy (``holds_slot``), a fan-out. ``Fault.spec()``
is a context manager that yields the variant (``with fault.spec() as spec: explore(bound, spec)``).

Guard and effect bodies: ``Spec`` carries its guard and effect functions (``guards``, ``effects``,
``engine_effects``), so the variant carries the replacement; nothing global is touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import attrs

from omni_fsm import ON_TERMINAL, SPEC, Effect, ReqState, Row, Spec
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.spec import effects as fx
from omni_fsm.spec.effects import FanOut, Reach
from omni_fsm.spec.vocabulary import HOLDS_SLOT, StopKind

from .faults import edit_rows

S = ReqState
#: The kinds of single-point fault, each a part of what decides a step.
KINDS = ("row-target", "row-guard", "terminal-effects", "effect-body", "guard-body", "slot-policy", "fan-out")


@attrs.frozen
class Fault:
    """One single-point fault: its kind, the sweep bound that catches it, and what that bound reports first."""

    name: str
    kind: str
    bound: str  #: the name of the bound of ``specs/sweep.toml`` that catches it
    caught_as: frozenset[str]  #: the invariants (``LIVENESS``: the liveness check) that bound reports it by
    make: Callable[[], Spec | ContextManager[Spec]]
    doc: str

    def spec(self) -> ContextManager[Spec]:
        """Return a context manager that yields the faulty ``Spec`` (and undoes any swap when it ends)."""
        made = self.make()
        return contextlib.nullcontext(made) if isinstance(made, Spec) else made


FAULTS: dict[str, Fault] = {}


def fault(kind: str, bound: str, *caught_as: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register the decorated function as a fault of ``kind`` that ``bound`` catches as ``caught_as``."""
    assert kind in KINDS, kind

    def register(make: Callable[[], Any]) -> Callable[[], Any]:
        FAULTS[make.__name__] = Fault(make.__name__, kind, bound, frozenset(caught_as), make,
                                      (make.__doc__ or "").strip())  # fmt: skip
        return make

    return register


# -- carrying a replaced guard or effect function ----------------------------------------------------------


def with_guard(name: str, body: Callable[[Any, Any, Any], bool]) -> ContextManager[Spec]:
    """Return ``SPEC`` with the guard ``name`` replaced by ``body`` (see the module's note)."""
    return contextlib.nullcontext(attrs.evolve(SPEC, guards={**SPEC.guards, name: body}))


def with_effect(effect: Effect, body: Callable[..., None], engine: bool = False) -> ContextManager[Spec]:
    """Return ``SPEC`` with the request (or engine) effect ``effect`` doing ``body`` instead (see the module's note)."""
    field = "engine_effects" if engine else "effects"
    return contextlib.nullcontext(attrs.evolve(SPEC, **{field: {**getattr(SPEC, field), effect: body}}))


def _retarget(pick: Callable[[Row], bool], target: Any, table: str = "rows") -> Spec:
    return edit_rows(pick, lambda r: [attrs.evolve(r, target=target)], table=table)  # type: ignore[arg-type]


def _row(source: ReqState, event: type, when: tuple[str, ...] | None = None) -> Callable[[Row], bool]:
    return lambda r: r.source is source and r.event is event and (when is None or r.when == when)


def _fan_out(effect: Effect, changed: FanOut) -> Spec:
    fan_out: Mapping[Effect, FanOut] = {**SPEC.fan_out, effect: changed}
    return attrs.evolve(SPEC, fan_out=fan_out)


# -- a row's target ---------------------------------------------------------------------------------------


@fault("row-target", "default", "AR-INV-001")
def failed_abort_of_a_grammar_wait_resumes_running() -> Spec:
    """A failed abort of a request parked for its grammar puts it back running, not parked."""
    return _retarget(_row(S.ABORTING, ev.AbortFailed, ("abort_resumes_waiting_for_grammar",)), S.RUNNING)


@fault("row-target", "abort-race", "ORCH-INV-103", "ORCH-INV-207")
def finish_during_an_abort_ends_stopped() -> Spec:
    """A stage's finish that arrives while the physical abort is in flight ends the request as stopped."""
    return _retarget(_row(S.ABORTING, ev.StageFinished), S.FINISHED_STOPPED)


@fault("row-target", "companions", "AR-INV-001")
def companion_gate_opens_to_running() -> Spec:
    """The last companion's end forwards the request to the next stage already running (never scheduled)."""
    return _retarget(_row(S.STAGE_DONE, ev.CompanionEnded, ("companion_ok", "last_companion")), S.RUNNING)


@fault("row-target", "final-stages", "AR-INV-001")
def earlier_final_stage_forwards_running() -> Spec:
    """A finish at an earlier final-output stage forwards the request to the next stage already running."""
    return _retarget(lambda r: r.source is S.RUNNING and r.event is ev.StageFinished
                     and r.when == ("final_output_stage",), S.RUNNING)


@fault("row-target", "samples", "ORCH-INV-101")
def aborted_samples_end_their_parent_stopped() -> Spec:
    """An aborted n>1 parent whose samples all ended aborted commits its abort but ends as stopped."""
    return _retarget(_row(S.ABORTING_CHILDREN, ev.ChildEnded, ("last_child", "children_fold_to_finished_aborted")),
                     S.FINISHED_STOPPED)


# -- a row's guard ----------------------------------------------------------------------------------------


def _guards(pick: Callable[[Row], bool], when: tuple[str, ...], table: str = "rows") -> Spec:
    return edit_rows(pick, lambda r: [attrs.evolve(r, when=when)], table=table)  # type: ignore[arg-type]


@fault("row-guard", "abort-race", "ORCH-INV-109")
def preempted_rescheduled_without_a_free_slot() -> Spec:
    """A preempted request is scheduled again whether or not its stage has a slot free."""
    return _guards(_row(S.PREEMPTED, ev.Scheduled), ("ar_stage",))


@fault("row-guard", "companions", "ORCH-INV-204")
def a_lost_last_companion_opens_the_gate() -> Spec:
    """The last companion's end forwards the request even when that companion failed."""
    return _guards(_row(S.STAGE_DONE, ev.CompanionEnded, ("companion_ok", "last_companion")), ("last_companion",))


@fault("row-guard", "samples", "ORCH-INV-203")
def a_samples_failed_abort_resumes_it() -> Spec:
    """A sample whose physical abort failed resumes (as a client would), though its parent's abort stands."""
    return _guards(_row(S.ABORTING, ev.AbortFailed, ("cannot_resume",)), ("companions_pending",))


@fault("row-guard", "default", "ORCH-INV-207")
def every_stage_ends_the_request() -> Spec:
    """A stop at any stage ends the request (the row forgets it is for the last stage)."""
    return _guards(_row(S.RUNNING, ev.StageFinished, ("stopped", "last_stage")), ("stopped",))


# -- the terminal effects ---------------------------------------------------------------------------------


def _on_terminal(*effects: Effect) -> Spec:
    return attrs.evolve(SPEC, on_terminal=effects)


@fault("terminal-effects", "samples", "ORCH-INV-203")
def samples_never_tell_their_parent() -> Spec:
    """A sample that ends never tells its n>1 parent, which then never ends."""
    return _on_terminal(*(e for e in ON_TERMINAL if e is not Effect.NOTIFY_PARENT))


@fault("terminal-effects", "abort-race", "ORCH-INV-106")
def overtaken_aborts_never_answered() -> Spec:
    """A request that ends otherwise while an abort of it is in flight never answers that abort call."""
    return _on_terminal(*(e for e in ON_TERMINAL if e is not Effect.ANSWER_OPEN_ABORTS))


@fault("terminal-effects", "default", "ORCH-INV-206")
def every_end_fails_the_others() -> Spec:
    """Entering a terminal state fails every other open request too."""
    return _on_terminal(*ON_TERMINAL, Effect.FAIL_ALL_OPEN)


@fault("terminal-effects", "default", "ORCH-INV-207")
def terminal_sent_last() -> Spec:
    """The terminal message is sent after the abort answers and the record's release."""
    return _on_terminal(*(e for e in ON_TERMINAL if e is not Effect.EMIT_TERMINAL), Effect.EMIT_TERMINAL)


# -- an effect's body -------------------------------------------------------------------------------------


def _forward_keeping_the_prefix(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    src = rec.stage
    rec.stage = src + 1  # the tokens of the stage it left are kept as this stage's prefix
    out.append(ob.Forwarded(rec.rid, src, src + 1))
    out.append(ob.Dispatched(rec.rid, src + 1))


@fault("effect-body", "default", "ORCH-INV-200")
def forward_keeps_the_prefix() -> ContextManager[Spec]:
    """A forward keeps the tokens generated at the stage it leaves as the next stage's prefix."""
    return with_effect(Effect.FORWARD, _forward_keeping_the_prefix)


def _answer_rpc_as_ok(ctx: Any, event: Any, out: Any) -> None:
    method = ctx.engine.pending_rpcs.pop(event.call_id)[0]
    out.append(ob.RpcAnswered(event.call_id, method, True, None))


@fault("effect-body", "default", "ORCH-INV-205")
def worker_error_answered_as_success() -> ContextManager[Spec]:
    """A control RPC a worker raised in is answered as a success (the engine effect's body)."""
    return with_effect(Effect.ANSWER_RPC_ERROR, _answer_rpc_as_ok, engine=True)


def _emit_partial_as_own(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    out.append(ob.Emitted(rec.rid, rec.stage, event.tokens, rec.tokens))  # a sample's outputs under its own id


@fault("effect-body", "samples", "ORCH-INV-104")
def samples_stream_under_their_own_id() -> ContextManager[Spec]:
    """A sample's outputs reach the client under the sample's id, not its parent's."""
    return with_effect(Effect.EMIT_PARTIAL, _emit_partial_as_own)


def _ack_abort_unowed(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    out.append(ob.AbortRequested(rec.rid, fx.abort_caller(event), event.parent))  # the caller is not remembered


@fault("effect-body", "default", "ORCH-INV-106")
def abort_caller_forgotten() -> ContextManager[Spec]:
    """An accepted abort does not remember its caller, who is never answered."""
    return with_effect(Effect.ACK_ABORT, _ack_abort_unowed)


def _spawn_no_companion(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    return None  # the companions the request counts on are never made


@fault("effect-body", "companions", "LIVENESS")
def companions_never_spawned() -> ContextManager[Spec]:
    """A request with companions never spawns them, and waits for them for ever."""
    return with_effect(Effect.SPAWN_COMPANIONS, _spawn_no_companion)


# -- a guard's body ---------------------------------------------------------------------------------------


@fault("guard-body", "abort-race", "ORCH-INV-109")
def slot_free_off_by_one() -> ContextManager[Spec]:
    """``slot_free`` holds while the stage's slots are all taken, up to the capacity itself."""
    return with_guard("slot_free", lambda record, event, engine: engine.slots_used[record.stage] <= engine.capacity)


@fault("guard-body", "companions", "LIVENESS")
def no_companion_is_the_last() -> ContextManager[Spec]:
    """``last_companion`` asks for none outstanding after this one ends, before it was counted."""
    return with_guard("last_companion", lambda record, event, engine: record.companions_left == 0)


@fault("guard-body", "default", "ORCH-INV-103")
def a_length_cap_counts_as_a_stop() -> ContextManager[Spec]:
    """``stopped`` holds for a length cap too: a request capped by its length ends as stopped."""
    return with_guard("stopped", lambda record, event, engine: event.stop in (StopKind.STOP, StopKind.LENGTH))


def _guards_swapped(bodies: Mapping[str, Callable[[Any, Any, Any], bool]]) -> ContextManager[Spec]:
    return contextlib.nullcontext(attrs.evolve(SPEC, guards={**SPEC.guards, **bodies}))


@fault("guard-body", "samples", "ORCH-INV-203")
def samples_resume_after_a_failed_abort() -> ContextManager[Spec]:
    """``cannot_resume`` forgets that a dependent's abort is its parent's: a sample's failed abort resumes it."""
    return with_guard("cannot_resume", lambda record, event, engine: record.companions_left > 0)


@fault("guard-body", "diffusion", "ORCH-INV-201")
def every_stage_is_autoregressive() -> ContextManager[Spec]:
    """``ar_stage`` holds for a diffusion stage too: it can be preempted and parked."""
    return with_guard("ar_stage", lambda record, event, engine: True)


@fault("guard-body", "default", "ORCH-INV-207")
def the_stage_before_the_last_is_the_last() -> ContextManager[Spec]:
    """``last_stage`` holds one stage early: a request ends before its last stage ran."""
    return with_guard("last_stage", lambda record, event, engine: record.stage >= record.last_stage - 1)


@fault("guard-body", "companions", "ORCH-INV-204")
def a_lost_companion_counts_as_done() -> ContextManager[Spec]:
    """``companion_ok`` holds for a companion that failed too."""
    return with_guard("companion_ok", lambda record, event, engine: True)


# -- the slot policy --------------------------------------------------------------------------------------


def _holding(*states: ReqState, without: tuple[ReqState, ...] = ()) -> Spec:
    return attrs.evolve(SPEC, holds_slot=(HOLDS_SLOT | set(states)) - set(without))


@fault("slot-policy", "default", "AR-INV-200")
def length_capped_keeps_its_slot() -> Spec:
    """A request capped by its length still holds its stage's slot when its state is dropped."""
    return _holding(S.FINISHED_LENGTH_CAPPED)


@fault("slot-policy", "abort-race", "AR-INV-001")
def running_holds_no_slot() -> Spec:
    """A running request holds no slot: the stage schedules more than it has."""
    return _holding(without=(S.RUNNING,))


@fault("slot-policy", "abort-race", "AR-INV-001")
def preempted_keeps_its_slot() -> Spec:
    """A preempted request keeps its slot (upstream, preemption frees it for another request)."""
    return _holding(S.PREEMPTED)


@fault("slot-policy", "abort-race", "ORCH-INV-109")
def a_grammar_wait_holds_its_slot() -> Spec:
    """A request parked for its grammar holds a slot (upstream, a parked request holds none)."""
    return _holding(S.WAITING_FOR_GRAMMAR)


@fault("slot-policy", "default", "AR-INV-200")
def an_error_keeps_its_slot() -> Spec:
    """A request that ended in error still holds its stage's slot when its state is dropped."""
    return _holding(S.FINISHED_ERROR)


@fault("slot-policy", "default", "ORCH-INV-109")
def waiting_holds_a_slot() -> Spec:
    """A request waiting to be scheduled already holds a slot: the queue takes what only running requests may."""
    return _holding(S.WAITING)


# -- a fan-out --------------------------------------------------------------------------------------------


@fault("fan-out", "default", "ORCH-INV-210")
def engine_death_fails_only_dependents() -> Spec:
    """The engine's death reaches only the dependents of nobody: the open requests stay open."""
    return _fan_out(Effect.FAIL_ALL_OPEN, FanOut(Reach.DEPENDENTS, ev.EngineFailed))


@fault("fan-out", "default", "ORCH-INV-211")
def shutdown_fails_open_requests() -> Spec:
    """A shutdown ends the open requests as failed, not aborted."""
    return _fan_out(Effect.ABORT_ALL_OPEN, FanOut(Reach.EVERY_OPEN, ev.EngineFailed))


@fault("fan-out", "abort-race", "LIVENESS")
def held_requests_never_admitted() -> Spec:
    """Resuming the scheduler admits none of the requests held while it was paused."""
    return _fan_out(Effect.ADMIT_HELD, FanOut(Reach.DEPENDENTS, ev.Admit))


@fault("fan-out", "companions", "ORCH-INV-106")
def companion_abort_owed_to_nobody() -> Spec:
    """A parent's abort of its companions is sent as nobody's call: the answer owed to the parent never comes."""
    return _fan_out(Effect.ABORT_COMPANIONS, FanOut(Reach.DEPENDENTS, ev.Abort))


@fault("fan-out", "samples", "ORCH-INV-203")
def parent_abort_reaches_the_held() -> Spec:
    """An n>1 parent's abort reaches the requests held while paused, not its samples."""
    return _fan_out(Effect.ABORT_CHILDREN, FanOut(Reach.HELD, ev.Abort, by_parent=True))


__all__ = ["FAULTS", "KINDS", "Fault", "with_effect", "with_guard"]
