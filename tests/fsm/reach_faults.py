"""One fault per explorable invariant (``BREAKS``): a ``Spec`` that breaks it at the bound ``NEEDS`` names.

Each differs from ``SPEC`` in one place: a row retargeted, an effect taken from or added to some rows,
a row added, the terminal cleanup or the states that hold a slot changed. The historic-bug faults of
``faults`` are reused where they break the invariant at that bound.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from omni_fsm import ON_TERMINAL, SPEC, Effect, ReqState, Row, Spec
from omni_fsm import events as ev

from . import faults
from .faults import edit_rows

S = ReqState


def _drop(effect: Effect) -> Callable[[Row], list[Row]]:
    return lambda r: [attrs.evolve(r, effects=tuple(e for e in r.effects if e is not effect))]


def _plain_output(r: Row) -> bool:
    """A running request's output at a stage that streams nothing to the client (the unguarded row)."""
    return r.source is S.RUNNING and r.event is ev.StageOutput and not r.when


def forward_on_output() -> Spec:
    """An output at a non-final stage forwards the request, before its stage finished it."""
    return edit_rows(_plain_output, lambda r: [attrs.evolve(r, target=S.WAITING,
                                                            effects=(Effect.ACCUMULATE, Effect.FORWARD))])


def forward_past_the_last_stage() -> Spec:
    """A stop at the last stage forwards the request to a stage the pipeline does not have."""
    return edit_rows(lambda r: r.source is S.RUNNING and r.event is ev.StageFinished and "last_stage" in r.when
                     and "stopped" in r.when,
                     lambda r: [attrs.evolve(r, target=S.STAGE_DONE, effects=(Effect.FORWARD,))])


def terminal_never_sent() -> Spec:
    """Entering a terminal state sends the client nothing."""
    return attrs.evolve(SPEC, on_terminal=tuple(e for e in ON_TERMINAL if e is not Effect.EMIT_TERMINAL))


def message_after_terminal() -> Spec:
    """The terminal is followed by a stage-final message: the terminal is not the last."""
    return attrs.evolve(SPEC, on_terminal=(Effect.EMIT_TERMINAL, Effect.EMIT_STAGE_FINAL, *ON_TERMINAL[1:]))


def every_output_streamed() -> Spec:
    """Every output is streamed under its maker's id: a companion's, a diffusion stage's partial one."""
    return edit_rows(_plain_output, lambda r: [attrs.evolve(r, effects=(Effect.ACCUMULATE, Effect.EMIT_PARTIAL))])


def parent_ends_on_first_child() -> Spec:
    """An n>1 parent ends when its first child ends, not its last."""
    return edit_rows(lambda r: r.source is S.AWAITING_CHILDREN and r.event is ev.ChildEnded
                     and "last_child" in r.unless, lambda r: [attrs.evolve(r, target=S.FINISHED_STOPPED)])


def rpc_result_unanswered() -> Spec:
    """A control RPC completes but its caller is never answered."""
    return edit_rows(lambda r: r.event is ev.RpcDone, _drop(Effect.ANSWER_RPC), table="engine_rows")


def admitted_while_paused() -> Spec:
    """A submit while the scheduler is paused is dispatched instead of held."""
    return edit_rows(lambda r: r.source is S.NEW and r.event is ev.Submit and r.when == ("engine_paused",),
                     lambda r: [attrs.evolve(r, target=S.WAITING,
                                             effects=(Effect.DISPATCH, Effect.SPAWN_COMPANIONS))])


def scheduled_without_a_free_slot() -> Spec:
    """A waiting request is scheduled whether or not its stage has a slot free."""
    return edit_rows(lambda r: r.source is S.WAITING and r.event is ev.Scheduled,
                     lambda r: [attrs.evolve(r, when=tuple(w for w in r.when if w != "slot_free"))])


def streamed_output_counted_twice() -> Spec:
    """A final-output AR stage adds each streamed output to its prefix twice: an abort delivers a wrong prefix.

    (Leaving the output out of the prefix would break the rule too, but the explorer bounds outputs by the
    prefix: it would never stop.)
    """
    return edit_rows(lambda r: r.source is S.RUNNING and r.event is ev.StageOutput and "final_output_stage" in r.when,
                     lambda r: [attrs.evolve(r, effects=(Effect.ACCUMULATE, *r.effects))])


def forward_before_companions() -> Spec:
    """A running request whose companions are still out forwards anyway (no wait in STAGE_DONE)."""
    return edit_rows(lambda r: r.source is S.RUNNING and "companions_pending" in r.when, lambda r: [])


def stage_failure_fails_every_request() -> Spec:
    """A request's stage failure fails every open request, not only its own."""
    return edit_rows(lambda r: r.event is ev.StageFailed,
                     lambda r: [attrs.evolve(r, effects=(*r.effects, Effect.FAIL_ALL_OPEN))])


def first_final_stage_ends() -> Spec:
    """A finish at an earlier final-output stage ends the request there (its message is terminal)."""
    return edit_rows(lambda r: r.source is S.RUNNING and r.event is ev.StageFinished
                     and r.when == ("final_output_stage",),
                     lambda r: [attrs.evolve(r, target=S.FINISHED_STOPPED, effects=())])


def abort_done_ignored() -> Spec:
    """The physical abort succeeds but the request stays aborting."""
    return edit_rows(lambda r: r.source is S.ABORTING and r.event is ev.AbortDone,
                     lambda r: [attrs.evolve(r, target=S.ABORTING, effects=())])


def shutdown_leaves_requests_open() -> Spec:
    """A shutdown stops the engine but ends no open request."""
    return edit_rows(lambda r: r.event is ev.Shutdown and Effect.ABORT_ALL_OPEN in r.effects,
                     _drop(Effect.ABORT_ALL_OPEN), table="engine_rows")


def runtimes_stop_first() -> Spec:
    """A shutdown stops the runtimes before the orchestrator."""
    swap = {Effect.STOP_ORCHESTRATOR: Effect.STOP_RUNTIMES, Effect.STOP_RUNTIMES: Effect.STOP_ORCHESTRATOR}
    return edit_rows(lambda r: r.event is ev.Shutdown and Effect.STOP_RUNTIMES in r.effects,
                     lambda r: [attrs.evolve(r, effects=tuple(swap.get(e, e) for e in r.effects))],
                     table="engine_rows")  # fmt: skip


def preempted_while_waiting() -> Spec:
    """A request never scheduled can be preempted (upstream: WAITING never moves to PREEMPTED)."""
    added = Row(S.WAITING, ev.Preempted, S.PREEMPTED, when=("ar_stage",))
    return edit_rows(lambda r: r.source is S.WAITING and r.event is ev.Scheduled, lambda r: [r, added])


def scheduling_dispatches_again() -> Spec:
    """Scheduling a waiting request dispatches it to its stage again, not through a forward."""
    return edit_rows(lambda r: r.source is S.WAITING and r.event is ev.Scheduled,
                     lambda r: [attrs.evolve(r, effects=(Effect.DISPATCH,))])


def submit_never_dispatched() -> Spec:
    """A submit makes the request wait at its first stage without dispatching it there."""
    return edit_rows(lambda r: r.source is S.NEW and r.event is ev.Submit and r.when == ("engine_running",),
                     _drop(Effect.DISPATCH))


def length_cap_reported_as_stop() -> Spec:
    """A running request capped by its length ends as stopped: its terminal's reason is not the one reported."""
    return edit_rows(lambda r: r.source is S.RUNNING and r.target is S.FINISHED_LENGTH_CAPPED,
                     lambda r: [attrs.evolve(r, target=S.FINISHED_STOPPED)])


def stop_keeps_its_slot() -> Spec:
    """A request that stopped still holds its stage's slot when its state is dropped."""
    return attrs.evolve(SPEC, holds_slot=SPEC.holds_slot | {S.FINISHED_STOPPED})


#: Per explorable invariant of ``NEEDS``, a fault that breaks it at ``NEEDS[inv].bound()``.
BREAKS: dict[str, Callable[[], Spec]] = {
    "ORCH-INV-001": forward_on_output,
    "ORCH-INV-002": forward_past_the_last_stage,
    "ORCH-INV-100": faults.b6_zombie_after_abort,
    "ORCH-INV-101": terminal_never_sent,
    "ORCH-INV-102": message_after_terminal,
    "ORCH-INV-103": length_cap_reported_as_stop,
    "ORCH-INV-104": every_output_streamed,
    "ORCH-INV-105": parent_ends_on_first_child,
    "ORCH-INV-106": rpc_result_unanswered,
    "ORCH-INV-108": admitted_while_paused,
    "ORCH-INV-109": scheduled_without_a_free_slot,
    "ORCH-INV-200": streamed_output_counted_twice,
    "ORCH-INV-201": every_output_streamed,
    "ORCH-INV-202": faults.b8_commit_before_physical_abort,
    "ORCH-INV-203": faults.b1_parent_abort_misses_children,
    "ORCH-INV-204": forward_before_companions,
    "ORCH-INV-205": faults.b11_rpc_worker_error_kills_the_engine,
    "ORCH-INV-206": stage_failure_fails_every_request,
    "ORCH-INV-207": first_final_stage_ends,
    "ORCH-INV-208": faults.b7_terminal_keeps_state,
    "ORCH-INV-209": abort_done_ignored,
    "ORCH-INV-210": faults.b9_engine_death_leaves_requests_open,
    "ORCH-INV-211": shutdown_leaves_requests_open,
    "ORCH-INV-300": runtimes_stop_first,
    "AR-INV-001": preempted_while_waiting,
    "AR-INV-002": scheduling_dispatches_again,
    "AR-INV-003": submit_never_dispatched,
    "AR-INV-200": stop_keeps_its_slot,
}
