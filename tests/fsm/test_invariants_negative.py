"""Each checked invariant trips on a named fault, and only that invariant does.

A fault starts from a valid history (the real core run on a short event sequence, which the
monitor judges clean) and injects one wrong observation: added, dropped, reordered or altered.
The faulty history must make exactly the invariant of its ``covers`` mark fail, with a message that names the
facts that broke it (``SAID``). Where the fault
leaves a request open for good, the faulty history is judged as a prefix (``complete=False``):
the end-of-history rules would only repeat the consequence. Historic bugs are named (B1..B13).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from omni_fsm import ControlMethod, EngineState, Outcome, StopKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import check_history
from omni_fsm.registry import load_registry, safe_change_topics_covered
from omni_fsm.registry.traceability import discover_tests

from .histories import (  # noqa: F401  the suite's vocabulary
    AR,
    AR_AR_DIFF,
    AR_THEN_DIFF,
    DIFF,
    ONE_AR,
    ONE_DIFF,
    TWO_FINAL,
    History,
    Pipeline,
    R,
    Step,
    about,
    retouch,
    run,
    terminal,
)

ROOT = Path(__file__).resolve().parents[2]


# -- valid baselines ---------------------------------------------------------------------------------


def success_ar_ar_diff() -> History:
    return run(AR_AR_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
               ev.Scheduled(1, 1), ev.StageOutput(1, 1, 3), ev.StageFinished(1, 1), ev.Scheduled(1, 2),
               ev.StageOutput(1, 2), ev.StageFinished(1, 2))  # fmt: skip


def success_one_ar() -> History:
    return run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0))


def abort_one_ar() -> History:
    return run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1), ev.AbortDone(1, 0))


def two_samples() -> History:
    return run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.StageOutput(2, 0),
               ev.StageFinished(2, 0), ev.StageFinished(3, 0))  # fmt: skip


def with_companion() -> History:
    return run(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0),
               ev.StageFinished(1, 0), ev.StageFinished(2, 0), ev.Scheduled(1, 1), ev.StageFinished(1, 1))  # fmt: skip


# -- the faults: each returns (valid baseline, faulty history) ------------------------------------------

Fault = tuple[History, History]


def forward_before_stage_finished() -> Fault:
    base = success_ar_ar_diff()
    return base, base.with_step(base.at(ev.StageFinished(1, 0)), ev.StageOutput(1, 0, 1), keep_event=False)


def forward_skips_a_stage() -> Fault:
    base = success_ar_ar_diff()
    i = base.at(ev.StageFinished(1, 0))
    skipped = base.with_step(i, outputs=[ob.Forwarded(1, 0, 2), ob.Dispatched(1, 2), ob.SlotFreed(1, 0)])
    return base, attrs.evolve(skipped, steps=(*skipped.steps[: i + 1], *skipped.steps[base.at(ev.Scheduled(1, 2)) :]))


def dispatch_after_terminal() -> Fault:
    base = success_one_ar()
    return base, base.then(None, [ob.Dispatched(1, 0)])


def zombie_rescheduled_after_abort() -> Fault:  # B6: the freed request is put back into the running set
    base = abort_one_ar()
    return base, base.then(None, [ob.Dispatched(1, 0), ob.SlotTaken(1, 0)])


def second_terminal_after_abort() -> Fault:
    base = abort_one_ar()
    again = ob.Emitted(1, 0, 0, 2, finished=True, outcome=Outcome.ABORTED, reason=R.ABORT)
    return base, base.then(None, [again])


def terminal_never_reaches_consumer() -> Fault:  # B8
    base = abort_one_ar()
    return base, base.without(base.at(ev.AbortDone(1, 0)), terminal)



def stage_abort_ends_request_failed() -> Fault:
    """The stage ended the request itself, as aborted (StageAborted), and the client was told it failed: a terminal
    whose outcome is not the one its cause calls for, provable at that step."""
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageAborted(1, 0))
    i = base.at(ev.StageAborted(1, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, outcome=Outcome.FAILED,
                                                   reason=R.ERROR, cumulative=0))


def parent_finishes_after_sample_failed() -> Fault:
    """An n>1 parent's outcome is the worst of its samples': its last sample failed, yet it ends finished."""
    base = run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.StageFinished(2, 0),
               ev.StageFailed(3, 0))  # fmt: skip
    i = base.at(ev.StageFailed(3, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, outcome=Outcome.FINISHED,
                                                   reason=R.STOP))


def abort_done_ends_request_as_finished() -> Fault:
    """The physical abort succeeded, the request ended in that step, but as finished: a terminal that does not
    agree with what ended it, provable at that step."""
    base = abort_one_ar()
    i = base.at(ev.AbortDone(1, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, outcome=Outcome.FINISHED,
                                                   reason=R.STOP))


def earlier_stage_message_after_later_stage() -> Fault:
    base = run(TWO_FINAL, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
               ev.Scheduled(1, 1), ev.StageOutput(1, 1), ev.StageFinished(1, 1))  # fmt: skip
    i = base.at(ev.StageOutput(1, 1))
    return base, base.with_step(i, outputs=[*base.outputs(i), ob.Emitted(1, 0, 1, 3)])


def message_after_terminal() -> Fault:
    base = success_one_ar()
    return base, base.then(None, [ob.Emitted(1, 0, 1, 3)])


def empty_final_without_reason() -> Fault:  # B13
    base = run(ONE_AR, ev.Submit(1), ev.StageFinished(1, 0, StopKind.IGNORED))
    i = base.at(ev.StageFinished(1, 0, StopKind.IGNORED))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, reason=None))


def terminal_without_outcome() -> Fault:
    base = success_one_ar()
    i = base.at(ev.StageFinished(1, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, outcome=None))



def length_finish_ends_as_stop() -> Fault:  # B13 area: a synthesized stop terminal
    """The stage reported the request finished by its length cap; the terminal says it stopped."""
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2),
               ev.StageFinished(1, 0, StopKind.LENGTH))
    i = base.at(ev.StageFinished(1, 0, StopKind.LENGTH))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, reason=R.STOP))


def sample_length_finish_ends_as_stop() -> Fault:
    """A sample's end message says stop where its stage reported the length cap."""
    base = run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0),
               ev.StageFinished(2, 0, StopKind.LENGTH), ev.StageFinished(3, 0))  # fmt: skip
    i = base.at(ev.StageFinished(2, 0, StopKind.LENGTH))
    outputs = retouch(base.outputs(i), lambda o: isinstance(o, ob.Emitted) and o.sample == 0 and o.outcome is not None,
                      reason=R.STOP)
    return base, base.with_step(i, outputs=outputs)


def child_message_addressed_to_child() -> Fault:
    base = two_samples()
    i = base.at(ev.StageOutput(2, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), lambda o: isinstance(o, ob.Emitted), rid=2))


def companion_visible_to_client() -> Fault:
    base = with_companion()
    i = base.at(ev.StageFinished(2, 0))
    return base, base.with_step(i, outputs=[*base.outputs(i), ob.Emitted(2, 0, 0, 0, stage_final=True, reason=R.STOP)])


def parent_ends_before_last_child() -> Fault:  # B1: children finishing apart merged wrongly
    base = two_samples()
    i = base.at(ev.StageFinished(3, 0))
    freed, sample_end, child_released, parent_end, parent_released = base.outputs(i)
    return base, base.with_step(i, outputs=[freed, sample_end, parent_end, child_released, parent_released])


def rpc_answered_twice() -> Fault:  # B10: a late duplicate completion
    base = run(ONE_AR, ev.Control(1, ControlMethod.WAKE_UP), ev.RpcDone(1))
    answer = ob.RpcAnswered(1, ControlMethod.WAKE_UP, True)
    return base, base.with_step(1, outputs=[answer, answer])


def rpc_answers_swapped() -> Fault:
    wake, resume = ControlMethod.WAKE_UP, ControlMethod.RESUME_SCHEDULER
    base = run(ONE_AR, ev.Control(1, wake), ev.Control(2, resume), ev.RpcDone(1), ev.RpcDone(2))
    swapped = base.with_step(2, outputs=[ob.RpcAnswered(2, resume, True)])
    return base, swapped.with_step(3, outputs=[ob.RpcAnswered(1, wake, True)])


def abort_answer_without_caller() -> Fault:
    base = success_one_ar()
    i = base.at(ev.StageFinished(1, 0))
    return base, base.with_step(i, outputs=[ob.AbortAnswered(1, True), *base.outputs(i)])



def abort_answered_twice() -> Fault:
    """The one abort is answered twice in the step that commits it (no new abort was asked in between)."""
    base = abort_one_ar()
    i = base.at(ev.AbortDone(1, 0))
    outputs = base.outputs(i)
    answer = next(n for n, o in enumerate(outputs) if isinstance(o, ob.AbortAnswered))
    return base, base.with_step(i, outputs=[*outputs[: answer + 1], outputs[answer], *outputs[answer + 1 :]])


def rpc_never_answered() -> Fault:
    """The RPC's result is taken for an unknown call and dropped: its caller waits for good (the end marker)."""
    base = run(ONE_AR, ev.Control(1, ControlMethod.WAKE_UP), ev.RpcDone(1))
    return base, base.with_step(1, outputs=[ob.Dropped(-1, "RpcDone", "unknown")])


def late_output_not_dropped() -> Fault:  # B3
    base = success_one_ar().then(ev.StageOutput(1, 0), [ob.Dropped(1, "StageOutput", "unknown")])
    return base, base.with_step(len(base.steps) - 1, outputs=[])



def late_report_drops_another_event() -> Fault:  # B3: the drop does not name the report it dropped
    base = success_one_ar().then(ev.StageOutput(1, 0), [ob.Dropped(1, "StageOutput", "unknown")])
    return base, base.with_step(len(base.steps) - 1, outputs=[ob.Dropped(1, "StageFinished", "unknown")])


def late_report_turns_engine_dead() -> Fault:  # B10: a late report that is fatal
    base = abort_one_ar().then(ev.AbortDone(1, 0), [ob.Dropped(1, "AbortDone", "unknown")])
    i = len(base.steps) - 1
    return base, base.with_step(i, outputs=[*base.outputs(i), ob.EngineChanged(EngineState.DEAD)])


def late_report_ends_neighbour() -> Fault:
    """The late report of request 1 is dropped, and its step still ends request 5 (and frees its slot)."""
    base = run(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(5, 0), ev.StageFinished(1, 0),
               ev.StageOutput(1, 0), ev.StageFinished(5, 0))  # fmt: skip
    i = base.at(ev.StageOutput(1, 0))
    ended = [ob.SlotFreed(5, 0), ob.Emitted(5, 0, 0, 0, finished=True, outcome=Outcome.FAILED, reason=R.ERROR),
             ob.Released(5)]  # fmt: skip
    return base, base.with_step(i, outputs=[*base.outputs(i), *ended]).upto(i)


def admitted_while_paused() -> Fault:
    pause, resume = ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER
    base = run(ONE_AR, ev.Control(1, pause), ev.RpcDone(1), ev.Submit(5), ev.Control(2, resume), ev.RpcDone(2),
               ev.Scheduled(5, 0), ev.StageFinished(5, 0))  # fmt: skip
    submit, resumed = base.at(ev.Submit(5)), base.at(ev.RpcDone(2))
    moved = base.with_step(submit, outputs=[*base.outputs(submit), ob.Dispatched(5, 0)])
    return base, moved.without(resumed, lambda o: isinstance(o, ob.Dispatched))


def submit_while_sleeping_admitted() -> Fault:
    base = run(ONE_AR, ev.Control(1, ControlMethod.SLEEP), ev.RpcDone(1), ev.Submit(5))
    submitted, *rest = base.outputs(2)
    return base, base.with_step(2, outputs=[submitted, ob.Dispatched(5, 0), *rest])


def second_slot_beyond_capacity() -> Fault:  # B4: more running than the cap
    roomy = attrs.evolve(ONE_AR, capacity=2)
    base = run(roomy, ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(5, 0), ev.StageFinished(1, 0),
               ev.StageFinished(5, 0))  # fmt: skip
    return base, attrs.evolve(base, pipeline=attrs.evolve(roomy, capacity=1))


def slot_taken_twice() -> Fault:
    base = success_one_ar()
    i = base.at(ev.Scheduled(1, 0))
    return base, base.with_step(i, outputs=[*base.outputs(i), *base.outputs(i)])


def abort_drops_generated_prefix() -> Fault:  # B8
    base = abort_one_ar()
    i = base.at(ev.AbortDone(1, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, cumulative=0))


def diffusion_abort_carries_partial() -> Fault:
    base = run(ONE_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1), ev.AbortDone(1, 0))
    i = base.at(ev.AbortDone(1, 0))
    return base, base.with_step(i, outputs=retouch(base.outputs(i), terminal, cumulative=2))


def partial_diffusion_output() -> Fault:
    base = run(ONE_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0))
    return base, base.with_step(base.at(ev.StageOutput(1, 0, 2)), outputs=[ob.Emitted(1, 0, 2, 2)])


def abort_committed_before_physical_abort() -> Fault:
    base = abort_one_ar()
    i = base.at(ev.Abort(1))
    return base, base.with_step(i, outputs=[*base.outputs(i), ob.AbortCommitted(1)])


def failed_physical_abort_committed() -> Fault:
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1), ev.AbortFailed(1, 0),
               ev.StageOutput(1, 0, 1), ev.Abort(1), ev.AbortDone(1, 0))  # fmt: skip
    i = base.at(ev.AbortFailed(1, 0))
    return base, base.with_step(i, outputs=[ob.AbortCommitted(1), *base.outputs(i)])


def parent_abort_misses_child() -> Fault:  # B1
    base = run(ONE_DIFF, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(2), ev.AbortDone(2, 0),
               ev.StageFinished(3, 0))  # fmt: skip
    i = base.at(ev.Abort(2))  # the parent's abort, as it reached only the first child
    faulty = base.with_step(i, ev.Abort(1), [ob.AbortRequested(1, 0), *base.outputs(i)], keep_event=False)
    return base, faulty.upto(i)  # judged there: the parent's abort call, never answered, is the end marker's


def child_abort_leaves_parent() -> Fault:  # B2
    base = run(ONE_AR, ev.Submit(1, n=2), ev.Scheduled(2, 0), ev.Scheduled(3, 0), ev.Abort(2), ev.AbortDone(2, 0),
               ev.Abort(3), ev.AbortDone(3, 0))  # fmt: skip
    i = base.at(ev.AbortDone(3, 0))
    return base, base.without(i, lambda o: isinstance(o, (ob.Emitted, ob.Released)) and o.rid == 1).upto(i)


def forward_before_companions_done() -> Fault:
    base = with_companion()
    parent_done, companion_done = base.at(ev.StageFinished(1, 0)), base.at(ev.StageFinished(2, 0))
    forward = [o for o in base.outputs(companion_done) if isinstance(o, (ob.Forwarded, ob.Dispatched))]
    early = base.with_step(parent_done, outputs=[*base.outputs(parent_done), *forward])
    return base, early.without(companion_done, lambda o: o in forward)


def lost_companion_leaves_parent_running() -> Fault:
    base = run(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.StageFailed(2, 0))
    i = base.at(ev.StageFailed(2, 0))
    return base, base.without(i, about(1)).upto(i)


def companion_sent_on_is_not_done() -> Fault:
    """A companion that finished at stage 0 but was sent on to stage 1 is not done: it is lost when it fails there,
    and its parent must fail (the monitor judges "done" from the history, not from which stage companions end at)."""
    base = with_companion()
    running = attrs.evolve(base, steps=base.steps[: base.at(ev.Scheduled(2, 0)) + 1])
    sent_on = [ob.SlotFreed(2, 0), ob.Forwarded(2, 0, 1), ob.Dispatched(2, 1)]
    faulty = running.then(ev.StageFinished(2, 0), sent_on).then(ev.StageFailed(2, 1), [ob.Released(2)])
    return base, faulty.upto(len(faulty.steps) - 1)


def parent_abort_misses_companion() -> Fault:
    base = run(AR_THEN_DIFF, ev.Submit(1, companions=1), ev.Scheduled(1, 0), ev.Scheduled(2, 0), ev.Abort(1),
               ev.AbortDone(1, 0), ev.AbortDone(2, 0))  # fmt: skip
    i = base.at(ev.Abort(1))
    return base, base.without(i, about(2)).upto(i)


def rpc_failure_kills_requests() -> Fault:  # B11
    pause = ControlMethod.PAUSE_SCHEDULER
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Control(1, pause), ev.RpcFailed(1, "boom"),
               ev.StageFinished(1, 0))  # fmt: skip
    i = base.at(ev.RpcFailed(1, "boom"))
    dead = [ob.RpcAnswered(1, pause, False, "boom"), ob.EngineChanged(EngineState.DEAD), ob.SlotFreed(1, 0),
            ob.Emitted(1, 0, 0, 0, finished=True, outcome=Outcome.FATAL, reason=R.ERROR), ob.Released(1)]  # fmt: skip
    return base, base.with_step(i, outputs=dead).upto(i)


def rpc_error_reported_as_success() -> Fault:  # the {"supported": False} answer
    base = run(ONE_AR, ev.Control(1, ControlMethod.SLEEP), ev.RpcFailed(1, "boom"))
    return base, base.with_step(1, outputs=[ob.RpcAnswered(1, ControlMethod.SLEEP, True)])


def rpc_error_without_exception() -> Fault:
    base = run(ONE_AR, ev.Control(1, ControlMethod.RESUME_SCHEDULER), ev.RpcFailed(1, "boom"))
    return base, base.with_step(1, outputs=[ob.RpcAnswered(1, ControlMethod.RESUME_SCHEDULER, False, None)])



def rpc_error_replaced() -> Fault:  # B11: the worker's exception swallowed into another answer
    base = run(ONE_AR, ev.Control(1, ControlMethod.SLEEP), ev.RpcFailed(1, "boom"))
    return base, base.with_step(1, outputs=[ob.RpcAnswered(1, ControlMethod.SLEEP, False, "unsupported")])


def _neighbour_ended_by(failure: ev.StageEvent, *rest: ev.Event) -> Fault:
    base = run(ONE_AR, ev.Submit(1), ev.Submit(5), ev.Scheduled(1, 0), ev.Scheduled(5, 0), failure,
               ev.StageFinished(5, 0), *rest)  # fmt: skip
    i = base.at(failure)
    neighbour = [ob.SlotFreed(5, 0), ob.Emitted(5, 0, 0, 0, finished=True, outcome=Outcome.FAILED, reason=R.ERROR),
                 ob.Released(5)]  # fmt: skip
    return base, base.with_step(i, outputs=[*base.outputs(i), *neighbour]).upto(i)


def request_failure_ends_neighbour() -> Fault:
    return _neighbour_ended_by(ev.StageFailed(1, 0))


def replica_loss_ends_neighbour() -> Fault:
    return _neighbour_ended_by(ev.ReplicaLost(1, 0))


def output_of_one_request_ends_another() -> Fault:
    """Not a failure at all: request 1's output step also ends request 5 (a cleanup keyed wrongly)."""
    return _neighbour_ended_by(ev.StageOutput(1, 0, 1), ev.StageFinished(1, 0))


def length_cap_with_no_tokens_ends_early() -> Fault:
    """A ``length`` finish with no tokens is not an ignored prompt: a request capped at stage 0 of 2 goes on, and a
    core that ends it there as finished breaks the rule (only a stage that reports the prompt ignored ends it)."""
    base = run(AR_THEN_DIFF, ev.Submit(1), ev.Scheduled(1, 0), ev.StageFinished(1, 0, StopKind.LENGTH),
               ev.Scheduled(1, 1), ev.StageFinished(1, 1))  # fmt: skip
    i = base.at(ev.StageFinished(1, 0, StopKind.LENGTH))
    ended = [ob.SlotFreed(1, 0), ob.Emitted(1, 0, 0, 0, finished=True, outcome=Outcome.FINISHED, reason=R.LENGTH),
             ob.Released(1)]
    return base, base.with_step(i, outputs=ended).upto(i)


def ends_at_earlier_final_stage() -> Fault:
    base = run(TWO_FINAL, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
               ev.Scheduled(1, 1), ev.StageFinished(1, 1))  # fmt: skip
    i = base.at(ev.StageFinished(1, 0))
    ended = [ob.SlotFreed(1, 0), ob.Emitted(1, 0, 0, 2, finished=True, outcome=Outcome.FINISHED, reason=R.STOP),
             ob.Released(1)]  # fmt: skip
    return base, base.with_step(i, outputs=ended).upto(i)


def abort_message_per_final_stage() -> Fault:
    base = run(TWO_FINAL, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.StageFinished(1, 0),
               ev.Scheduled(1, 1), ev.StageOutput(1, 1), ev.Abort(1), ev.AbortDone(1, 1))  # fmt: skip
    i = base.at(ev.AbortDone(1, 1))
    extra = ob.Emitted(1, 1, 0, 1, stage_final=True, outcome=Outcome.ABORTED, reason=R.ABORT)
    outputs = base.outputs(i)
    end = next(n for n, o in enumerate(outputs) if terminal(o))
    return base, base.with_step(i, outputs=[*outputs[:end], extra, *outputs[end:]])


def engine_abort_keeps_request_state() -> Fault:  # B7: engine-initiated aborts leaked their state
    base = _shutdown()
    return base, base.without(base.at(ev.Shutdown()), lambda o: o == ob.Released(1))


def success_keeps_request_state() -> Fault:  # B12: only abort cleaned up
    base = success_one_ar()
    return base, base.without(base.at(ev.StageFinished(1, 0)), lambda o: isinstance(o, ob.Released))


def output_after_abort() -> Fault:  # B5
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Abort(1), ev.StageOutput(1, 0),
               ev.AbortDone(1, 0))  # fmt: skip
    i = base.at(ev.StageOutput(1, 0))
    return base, base.with_step(i, outputs=[ob.Emitted(1, 0, 1, 3)])


def chunk_wait_survives_abort() -> Fault:  # B5: the waiting-for-chunk request stayed
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.AwaitChunk(1, 0), ev.Abort(1),
               ev.AbortDone(1, 0))  # fmt: skip
    i = base.at(ev.AbortDone(1, 0))
    return base, base.with_step(i, outputs=[]).upto(i)


def _engine_death() -> History:
    return run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0, 2), ev.Submit(5), ev.EngineDied())


def engine_death_reports_abort() -> Fault:
    base = _engine_death()
    i = base.at(ev.EngineDied())
    aborted = retouch(base.outputs(i), lambda o: terminal(o, 5), outcome=Outcome.ABORTED, reason=R.ABORT)
    return base, base.with_step(i, outputs=aborted)


def engine_death_misses_request() -> Fault:  # B9
    base = _engine_death()
    i = base.at(ev.EngineDied())
    return base, base.without(i, about(5)).upto(i)


def _shutdown() -> History:
    return run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.Submit(5), ev.Shutdown())


def shutdown_fails_requests() -> Fault:
    base = _shutdown()
    i = base.at(ev.Shutdown())
    return base, base.with_step(i, outputs=retouch(base.outputs(i), lambda o: terminal(o, 5),
                                                   outcome=Outcome.FAILED, reason=R.ERROR))  # fmt: skip


def shutdown_misses_request() -> Fault:
    base = _shutdown()
    i = base.at(ev.Shutdown())
    return base, base.without(i, about(5)).upto(i)


def runtimes_stop_before_orchestrator() -> Fault:
    base = _shutdown()
    i = base.at(ev.Shutdown())
    *rest, orchestrator, runtimes = base.outputs(i)
    return base, base.with_step(i, outputs=[*rest, runtimes, orchestrator])



def runtimes_never_stop() -> Fault:
    """Shutdown stops the orchestrator and leaves the runtimes running: the history ends without their stop."""
    base = _shutdown()
    i = base.at(ev.Shutdown())
    return base, base.with_step(i, outputs=[o for o in base.outputs(i) if not isinstance(o, ob.RuntimesStopped)])


def submit_accepted_after_stop() -> Fault:
    base = _shutdown()
    return base, base.then(ev.Submit(7), [ob.Submitted(7)]).upto(len(base.steps))


def rpc_answered_after_stop() -> Fault:
    """Shutdown answers the open RPC, but only after the orchestrator stopped."""
    base = run(ONE_AR, ev.Submit(1), ev.Control(1, ControlMethod.SLEEP), ev.Shutdown())
    i = base.at(ev.Shutdown())
    answer = [o for o in base.outputs(i) if isinstance(o, ob.RpcAnswered)]
    return base, base.with_step(i, outputs=[*(o for o in base.outputs(i) if o not in answer), *answer])


def waiting_request_preempted() -> Fault:
    base = success_one_ar()
    accepted: Step = (ev.Preempted(1, 0), [])
    return base, attrs.evolve(base, steps=(base.steps[0], accepted, *base.steps[1:]))


def running_request_back_to_grammar_wait() -> Fault:
    base = success_one_ar()
    i = base.at(ev.StageOutput(1, 0, 2))
    accepted: Step = (ev.AwaitGrammar(1, 0), [])
    return base, attrs.evolve(base, steps=(*base.steps[: i + 1], accepted, *base.steps[i + 1 :]))



def scheduled_without_slot() -> Fault:
    """Scheduled (running), yet no KV slot taken for it: the cache does not follow the status."""
    base = success_one_ar()
    i = base.at(ev.Scheduled(1, 0))
    return base, base.without(i, lambda o: isinstance(o, ob.SlotTaken)).upto(i)


def preempted_keeps_slot() -> Fault:
    """Preempted, yet its KV slot is kept."""
    base = run(ONE_AR, ev.Submit(1), ev.Scheduled(1, 0), ev.StageOutput(1, 0), ev.Preempted(1, 0), ev.Scheduled(1, 0),
               ev.StageFinished(1, 0))  # fmt: skip
    i = base.at(ev.Preempted(1, 0))
    return base, base.without(i, lambda o: isinstance(o, ob.SlotFreed)).upto(i)


def dispatch_without_forward() -> Fault:
    base = success_ar_ar_diff()
    return base, base.without(base.at(ev.StageFinished(1, 0)), lambda o: isinstance(o, ob.Forwarded))


def report_from_unassigned_stage_acted_on() -> Fault:
    base = success_ar_ar_diff()
    i = base.at(ev.Scheduled(1, 1)) + 1
    stale: Step = (ev.StageOutput(1, 0), [])  # the core drops it as stale; here it was acted on
    return base, attrs.evolve(base, steps=(*base.steps[:i], stale, *base.steps[i:]))


def terminal_keeps_kv_slot() -> Fault:  # B6 residual: aborted requests kept their slots
    base = abort_one_ar()
    return base, base.without(base.at(ev.AbortDone(1, 0)), lambda o: isinstance(o, ob.SlotFreed))


def success_keeps_kv_slot() -> Fault:
    base = success_one_ar()
    return base, base.without(base.at(ev.StageFinished(1, 0)), lambda o: isinstance(o, ob.SlotFreed))


FAULTS = [
    pytest.param(forward_before_stage_finished, id="forward_before_stage_finished",
                 marks=pytest.mark.covers("ORCH-INV-001")),
    pytest.param(forward_skips_a_stage, id="forward_skips_a_stage", marks=pytest.mark.covers("ORCH-INV-002")),
    pytest.param(dispatch_after_terminal, id="dispatch_after_terminal", marks=pytest.mark.covers("ORCH-INV-100")),
    pytest.param(zombie_rescheduled_after_abort, id="zombie_rescheduled_after_abort",
                 marks=pytest.mark.covers("ORCH-INV-100")),
    pytest.param(second_terminal_after_abort, id="second_terminal_after_abort",
                 marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(terminal_never_reaches_consumer, id="terminal_never_reaches_consumer",
                 marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(stage_abort_ends_request_failed, id="stage_abort_ends_request_failed",
                 marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(parent_finishes_after_sample_failed, id="parent_finishes_after_sample_failed",
                 marks=pytest.mark.covers("ORCH-INV-101")),
    pytest.param(earlier_stage_message_after_later_stage, id="earlier_stage_message_after_later_stage",
                 marks=pytest.mark.covers("ORCH-INV-102")),
    pytest.param(message_after_terminal, id="message_after_terminal", marks=pytest.mark.covers("ORCH-INV-102")),
    pytest.param(empty_final_without_reason, id="empty_final_without_reason",
                 marks=pytest.mark.covers("ORCH-INV-103")),
    pytest.param(terminal_without_outcome, id="terminal_without_outcome", marks=pytest.mark.covers("ORCH-INV-103")),
    pytest.param(length_finish_ends_as_stop, id="length_finish_ends_as_stop", marks=pytest.mark.covers("ORCH-INV-103")),
    pytest.param(sample_length_finish_ends_as_stop, id="sample_length_finish_ends_as_stop",
                 marks=pytest.mark.covers("ORCH-INV-103")),
    pytest.param(child_message_addressed_to_child, id="child_message_addressed_to_child",
                 marks=pytest.mark.covers("ORCH-INV-104")),
    pytest.param(companion_visible_to_client, id="companion_visible_to_client",
                 marks=pytest.mark.covers("ORCH-INV-104")),
    pytest.param(parent_ends_before_last_child, id="parent_ends_before_last_child",
                 marks=pytest.mark.covers("ORCH-INV-105")),
    pytest.param(rpc_answered_twice, id="rpc_answered_twice", marks=pytest.mark.covers("ORCH-INV-106")),
    pytest.param(rpc_answers_swapped, id="rpc_answers_swapped", marks=pytest.mark.covers("ORCH-INV-106")),
    pytest.param(abort_answer_without_caller, id="abort_answer_without_caller",
                 marks=pytest.mark.covers("ORCH-INV-106")),
    pytest.param(abort_answered_twice, id="abort_answered_twice", marks=pytest.mark.covers("ORCH-INV-106")),
    pytest.param(rpc_never_answered, id="rpc_never_answered", marks=pytest.mark.covers("ORCH-INV-106")),
    pytest.param(late_output_not_dropped, id="late_output_not_dropped", marks=pytest.mark.covers("ORCH-INV-107")),
    pytest.param(late_report_drops_another_event, id="late_report_drops_another_event",
                 marks=pytest.mark.covers("ORCH-INV-107")),
    pytest.param(late_report_turns_engine_dead, id="late_report_turns_engine_dead",
                 marks=pytest.mark.covers("ORCH-INV-107")),
    pytest.param(late_report_ends_neighbour, id="late_report_ends_neighbour", marks=pytest.mark.covers("ORCH-INV-107")),
    pytest.param(admitted_while_paused, id="admitted_while_paused", marks=pytest.mark.covers("ORCH-INV-108")),
    pytest.param(submit_while_sleeping_admitted, id="submit_while_sleeping_admitted",
                 marks=pytest.mark.covers("ORCH-INV-108")),
    pytest.param(second_slot_beyond_capacity, id="second_slot_beyond_capacity",
                 marks=pytest.mark.covers("ORCH-INV-109")),
    pytest.param(slot_taken_twice, id="slot_taken_twice", marks=pytest.mark.covers("ORCH-INV-109")),
    pytest.param(abort_drops_generated_prefix, id="abort_drops_generated_prefix",
                 marks=pytest.mark.covers("ORCH-INV-200")),
    pytest.param(diffusion_abort_carries_partial, id="diffusion_abort_carries_partial",
                 marks=pytest.mark.covers("ORCH-INV-201")),
    pytest.param(partial_diffusion_output, id="partial_diffusion_output", marks=pytest.mark.covers("ORCH-INV-201")),
    pytest.param(abort_committed_before_physical_abort, id="abort_committed_before_physical_abort",
                 marks=pytest.mark.covers("ORCH-INV-202")),
    pytest.param(failed_physical_abort_committed, id="failed_physical_abort_committed",
                 marks=pytest.mark.covers("ORCH-INV-202")),
    pytest.param(parent_abort_misses_child, id="parent_abort_misses_child",
                 marks=pytest.mark.covers("ORCH-INV-203")),
    pytest.param(child_abort_leaves_parent, id="child_abort_leaves_parent",
                 marks=pytest.mark.covers("ORCH-INV-203")),
    pytest.param(forward_before_companions_done, id="forward_before_companions_done",
                 marks=pytest.mark.covers("ORCH-INV-204")),
    pytest.param(lost_companion_leaves_parent_running, id="lost_companion_leaves_parent_running",
                 marks=pytest.mark.covers("ORCH-INV-204")),
    pytest.param(companion_sent_on_is_not_done, id="companion_sent_on_is_not_done",
                 marks=pytest.mark.covers("ORCH-INV-204")),
    pytest.param(parent_abort_misses_companion, id="parent_abort_misses_companion",
                 marks=pytest.mark.covers("ORCH-INV-204")),
    pytest.param(rpc_failure_kills_requests, id="rpc_failure_kills_requests",
                 marks=pytest.mark.covers("ORCH-INV-205")),
    pytest.param(rpc_error_reported_as_success, id="rpc_error_reported_as_success",
                 marks=pytest.mark.covers("ORCH-INV-205")),
    pytest.param(rpc_error_without_exception, id="rpc_error_without_exception",
                 marks=pytest.mark.covers("ORCH-INV-205")),
    pytest.param(rpc_error_replaced, id="rpc_error_replaced", marks=pytest.mark.covers("ORCH-INV-205")),
    pytest.param(request_failure_ends_neighbour, id="request_failure_ends_neighbour",
                 marks=pytest.mark.covers("ORCH-INV-206")),
    pytest.param(output_of_one_request_ends_another, id="output_of_one_request_ends_another",
                 marks=pytest.mark.covers("ORCH-INV-206")),
    pytest.param(replica_loss_ends_neighbour, id="replica_loss_ends_neighbour",
                 marks=pytest.mark.covers("ORCH-INV-206")),
    pytest.param(ends_at_earlier_final_stage, id="ends_at_earlier_final_stage",
                 marks=pytest.mark.covers("ORCH-INV-207")),
    pytest.param(length_cap_with_no_tokens_ends_early, id="length_cap_with_no_tokens_ends_early",
                 marks=pytest.mark.covers("ORCH-INV-207")),
    pytest.param(abort_message_per_final_stage, id="abort_message_per_final_stage",
                 marks=pytest.mark.covers("ORCH-INV-207")),
    pytest.param(engine_abort_keeps_request_state, id="engine_abort_keeps_request_state",
                 marks=pytest.mark.covers("ORCH-INV-208")),
    pytest.param(success_keeps_request_state, id="success_keeps_request_state",
                 marks=pytest.mark.covers("ORCH-INV-208")),
    pytest.param(output_after_abort, id="output_after_abort", marks=pytest.mark.covers("ORCH-INV-209")),
    pytest.param(abort_done_ends_request_as_finished, id="abort_done_ends_request_as_finished",
                 marks=pytest.mark.covers("ORCH-INV-209")),
    pytest.param(chunk_wait_survives_abort, id="chunk_wait_survives_abort",
                 marks=pytest.mark.covers("ORCH-INV-209")),
    pytest.param(engine_death_reports_abort, id="engine_death_reports_abort",
                 marks=pytest.mark.covers("ORCH-INV-210")),
    pytest.param(engine_death_misses_request, id="engine_death_misses_request",
                 marks=pytest.mark.covers("ORCH-INV-210")),
    pytest.param(shutdown_fails_requests, id="shutdown_fails_requests", marks=pytest.mark.covers("ORCH-INV-211")),
    pytest.param(shutdown_misses_request, id="shutdown_misses_request", marks=pytest.mark.covers("ORCH-INV-211")),
    pytest.param(runtimes_stop_before_orchestrator, id="runtimes_stop_before_orchestrator",
                 marks=pytest.mark.covers("ORCH-INV-300")),
    pytest.param(runtimes_never_stop, id="runtimes_never_stop", marks=pytest.mark.covers("ORCH-INV-300")),
    pytest.param(submit_accepted_after_stop, id="submit_accepted_after_stop", marks=pytest.mark.covers("ORCH-INV-300")),
    pytest.param(rpc_answered_after_stop, id="rpc_answered_after_stop", marks=pytest.mark.covers("ORCH-INV-300")),
    pytest.param(waiting_request_preempted, id="waiting_request_preempted", marks=pytest.mark.covers("AR-INV-001")),
    pytest.param(running_request_back_to_grammar_wait, id="running_request_back_to_grammar_wait",
                 marks=pytest.mark.covers("AR-INV-001")),
    pytest.param(scheduled_without_slot, id="scheduled_without_slot", marks=pytest.mark.covers("AR-INV-001")),
    pytest.param(preempted_keeps_slot, id="preempted_keeps_slot", marks=pytest.mark.covers("AR-INV-001")),
    pytest.param(dispatch_without_forward, id="dispatch_without_forward", marks=pytest.mark.covers("AR-INV-002")),
    pytest.param(report_from_unassigned_stage_acted_on, id="report_from_unassigned_stage_acted_on",
                 marks=pytest.mark.covers("AR-INV-003")),
    pytest.param(terminal_keeps_kv_slot, id="terminal_keeps_kv_slot", marks=pytest.mark.covers("AR-INV-200")),
    pytest.param(success_keeps_kv_slot, id="success_keeps_kv_slot", marks=pytest.mark.covers("AR-INV-200")),
]  # fmt: skip


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_trips_exactly_its_invariant(fault: Callable[[], Fault], request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("covers")
    assert marker is not None, "every fault names the invariant it must trip"
    base, faulty = fault()
    assert base.violations() == set(), "the baseline (the real core's history) must be clean"
    assert faulty.violations() == set(marker.args)


# -- what a violation says: the facts that broke the rule ------------------------------------------------

#: fault -> (request, message) of each violation of its invariant, in the order found: each names the facts it saw
#: (the ids, stages, outcomes and reports of the history above that broke the rule)
SAID: dict[str, list[tuple[int | None, str]]] = {
    "forward_before_stage_finished": [(1, "forwarded from stage 0 before that stage finished it")],
    "forward_skips_a_stage": [(1, "forwarded 0 -> 2; the next stage is 1")],
    "dispatch_after_terminal": [(1, "dispatched to stage 0 after its terminal")],
    "zombie_rescheduled_after_abort": [
        (1, "dispatched to stage 0 after its terminal"),
        (1, "scheduled again at stage 0 after its terminal"),
    ],
    "second_terminal_after_abort": [
        (1, "a second terminal: Emitted(rid=1, stage=0, cumulative=2, finished=True, outcome=aborted, "
            "reason=abort)"),
        (1, "2 terminals at the end (exactly one expected)"),
    ],
    "terminal_never_reaches_consumer": [
        (1, "the physical abort at stage 0 succeeded and the request ended without a terminal"),
        (1, "0 terminals at the end (exactly one expected)"),
    ],
    "stage_abort_ends_request_failed": [(1, "ended failed by StageAborted at stage 0 (aborted expected)")],
    "parent_finishes_after_sample_failed": [
        (1, "parent ended finished as its sample 1 ended by StageFailed at stage 0 (failed expected)"),
    ],
    "earlier_stage_message_after_later_stage": [(1, "stage 0 message after a stage 1 message")],
    "message_after_terminal": [(1, "a message after the terminal: Emitted(rid=1, stage=0, tokens=1, cumulative=3)")],
    "empty_final_without_reason": [
        (1, "finished with reason none; its stage reported ignored (length expected)"),
        (1, "terminal at stage 0 with outcome finished and finish reason none"),
    ],
    "terminal_without_outcome": [(1, "terminal at stage 0 with outcome none and finish reason stop")],
    "length_finish_ends_as_stop": [(1, "finished with reason stop; its stage reported length (length expected)")],
    "sample_length_finish_ends_as_stop": [
        (1, "finished with reason stop; its stage reported length (length expected)"),
    ],
    "child_message_addressed_to_child": [
        (2, "a message to the client for a request it never submitted (the child of request 1): Emitted(rid=2, "
            "stage=0, tokens=1, cumulative=1, sample=0)"),
    ],
    "companion_visible_to_client": [
        (2, "a message to the client for a request it never submitted (the companion of request 1): "
            "Emitted(rid=2, stage=0, stage_final=True, reason=stop)"),
    ],
    "parent_ends_before_last_child": [(1, "parent ended finished with 1 children still open (3)")],
    "rpc_answered_twice": [(None, "answer to RPC 1 (wake_up) matches no open call")],
    "rpc_answers_swapped": [
        (None, "RPC 1 completed but its caller got no answer (the step answered RpcAnswered(call_id=2, "
               "method=resume_scheduler, ok=True))"),
        (None, "RPC 2 completed but its caller got no answer (the step answered RpcAnswered(call_id=1, "
               "method=wake_up, ok=True))"),
    ],
    "abort_answer_without_caller": [(1, "an abort answer with no abort caller: AbortAnswered(rid=1, ok=True)")],
    "abort_answered_twice": [(1, "an answer to abort call 0, which is not open (answered already, or never made)")],
    "rpc_never_answered": [(None, "RPC 1 (wake_up) was never answered")],
    "late_output_not_dropped": [(1, "StageOutput of stage 0 for an ended request was acted on")],
    "late_report_drops_another_event": [
        (1, "StageOutput of stage 0 for an ended request was acted on (StageFinished dropped instead)"),
    ],
    "late_report_turns_engine_dead": [
        (1, "the step that dropped a late AbortDone also observed EngineChanged(state=dead)"),
    ],
    "late_report_ends_neighbour": [
        (1, "the step that dropped a late StageOutput also observed SlotFreed(rid=5, stage=0), Emitted(rid=5, "
            "stage=0, finished=True, outcome=failed, reason=error), Released(rid=5)"),
    ],
    "admitted_while_paused": [(5, "admitted (dispatched to stage 0) while the engine is paused")],
    "submit_while_sleeping_admitted": [
        (5, "admitted (dispatched to stage 0) while the engine is sleeping"),
        (5, "submitted while sleeping but not refused with error (dispatched to stage 0)"),
    ],
    "second_slot_beyond_capacity": [(5, "stage 0 holds 2 slots, capacity 1")],
    "slot_taken_twice": [(1, "took a slot at stage 0 (already holds one at stage 0; dispatched to stage 0)")],
    "abort_drops_generated_prefix": [(1, "abort at stage 0 carries 0 tokens of 2 generated")],
    "diffusion_abort_carries_partial": [
        (1, "the abort of diffusion stage 0 carried a partial result (2): Emitted(rid=1, stage=0, cumulative=2, "
            "finished=True, outcome=aborted, reason=abort)"),
    ],
    "partial_diffusion_output": [
        (1, "a partial output of diffusion stage 0: Emitted(rid=1, stage=0, tokens=2, cumulative=2)"),
    ],
    "abort_committed_before_physical_abort": [(1, "committed before the physical abort at stage 0")],
    "failed_physical_abort_committed": [
        (1, "a failed physical abort was committed (AbortFailed at stage 0)"),
        (1, "committed before the physical abort at stage 0"),
    ],
    "parent_abort_misses_child": [(3, "the abort of parent 1 did not reach this child")],
    "child_abort_leaves_parent": [(1, "the last child (3) ended but the parent was kept")],
    "forward_before_companions_done": [(1, "forwarded 0 -> 1 with 0/1 companions done")],
    "lost_companion_leaves_parent_running": [
        (1, "a companion was lost but the parent did not fail: companion 2 released unfinished, it did not end "
            "(failed expected)"),
    ],
    "companion_sent_on_is_not_done": [
        (1, "a companion was lost but the parent did not fail: companion 2 released unfinished, it did not end "
            "(failed expected)"),
    ],
    "parent_abort_misses_companion": [(2, "the abort of parent 1 did not reach this companion")],
    "rpc_failure_kills_requests": [
        (None, "a worker error of RPC 1 ended requests or the engine: EngineChanged(state=dead), Emitted(rid=1, "
               "stage=0, finished=True, outcome=fatal, reason=error)"),
    ],
    "rpc_error_reported_as_success": [
        (None, "worker error 'boom' of RPC 1 did not reach its caller (it got RpcAnswered(call_id=1, "
               "method=sleep, ok=True))"),
    ],
    "rpc_error_without_exception": [
        (None, "RPC 1 (resume_scheduler) failed without the worker's error"),
        (None, "worker error 'boom' of RPC 1 did not reach its caller (it got RpcAnswered(call_id=1, "
               "method=resume_scheduler, ok=False))"),
    ],
    "rpc_error_replaced": [(None, "RPC 1 answered with error 'unsupported', not the worker's 'boom'")],
    "request_failure_ends_neighbour": [
        (5, "ended by a failure of request 1 (StageFailed(rid=1, stage=0)): Emitted(rid=5, stage=0, "
            "finished=True, outcome=failed, reason=error)"),
    ],
    "output_of_one_request_ends_another": [
        (5, "ended by StageOutput of request 1 (StageOutput(rid=1, stage=0)): Emitted(rid=5, stage=0, "
            "finished=True, outcome=failed, reason=error)"),
    ],
    "replica_loss_ends_neighbour": [
        (5, "ended by a failure of request 1 (ReplicaLost(rid=1, stage=0)): Emitted(rid=5, stage=0, "
            "finished=True, outcome=failed, reason=error)"),
    ],
    "ends_at_earlier_final_stage": [(1, "finished at stage 0, not at the last final-output stage (1)")],
    "length_cap_with_no_tokens_ends_early": [(1, "finished at stage 0, not at the last final-output stage (1)")],
    "abort_message_per_final_stage": [
        (1, "an abort message that is not the terminal: Emitted(rid=1, stage=1, cumulative=1, stage_final=True, "
            "outcome=aborted, reason=abort)"),
    ],
    "engine_abort_keeps_request_state": [
        (1, "terminal emitted but its state was kept (no Released): Emitted(rid=1, stage=0, finished=True, "
            "outcome=aborted, reason=abort)"),
        (1, "state still kept at the end"),
    ],
    "success_keeps_request_state": [
        (1, "terminal emitted but its state was kept (no Released): Emitted(rid=1, stage=0, cumulative=2, "
            "finished=True, outcome=finished, reason=stop)"),
        (1, "state still kept at the end"),
    ],
    "output_after_abort": [
        (1, "output after the abort was requested: Emitted(rid=1, stage=0, tokens=1, cumulative=3)"),
    ],
    "abort_done_ends_request_as_finished": [
        (1, "the physical abort at stage 0 succeeded but the request ended finished: Emitted(rid=1, stage=0, "
            "cumulative=2, finished=True, outcome=finished, reason=stop)"),
    ],
    "chunk_wait_survives_abort": [(1, "the physical abort at stage 0 succeeded but the request did not end")],
    "engine_death_reports_abort": [(5, "ended aborted, expected fatal")],
    "engine_death_misses_request": [(5, "open request got no terminal (fatal expected)")],
    "shutdown_fails_requests": [(5, "ended failed, expected aborted")],
    "shutdown_misses_request": [(5, "open request got no terminal (aborted expected)")],
    "runtimes_stop_before_orchestrator": [
        (None, "runtimes stopped before the orchestrator"),
        (None, "orchestrator stopped after the runtimes"),
        (None, "the orchestrator stopped but the runtimes never did (no RuntimesStopped)"),
    ],
    "runtimes_never_stop": [(None, "the orchestrator stopped but the runtimes never did (no RuntimesStopped)")],
    "submit_accepted_after_stop": [(7, "Submitted(rid=7) after the orchestrator stopped")],
    "rpc_answered_after_stop": [
        (None, "RpcAnswered(call_id=1, method=sleep, ok=False, error='engine shut down') after the orchestrator "
               "stopped"),
    ],
    "waiting_request_preempted": [(1, "WAITING -> PREEMPTED (Preempted at stage 0) is not an upstream transition")],
    "running_request_back_to_grammar_wait": [
        (1, "RUNNING -> WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR (AwaitGrammar at stage 0) is not an upstream "
            "transition"),
    ],
    "scheduled_without_slot": [(1, "scheduled at stage 0 but holds no slot (KV cache) there")],
    "preempted_keeps_slot": [(1, "preempted but still holds its slot (KV cache) at stage 0")],
    "dispatch_without_forward": [(1, "reached stage 1 without a forward through its adapter")],
    "report_from_unassigned_stage_acted_on": [(1, "StageOutput at stage 0 acted on; assigned stage is 1")],
    "terminal_keeps_kv_slot": [(1, "state dropped while holding a slot at stage 0")],
    "success_keeps_kv_slot": [(1, "state dropped while holding a slot at stage 0")],
}

#: the same faults, without their ``covers`` marks: what a violation says is not what detects it
MESSAGES = [pytest.param(param.values[0], param.marks[0].args, id=param.id) for param in FAULTS]


@pytest.mark.parametrize(("fault", "invariants"), MESSAGES)
def test_violation_message_names_the_facts_it_saw(fault: Callable[[], Fault], invariants: tuple[str, ...],
                                                  request: pytest.FixtureRequest) -> None:  # fmt: skip
    _, faulty = fault()
    p = faulty.pipeline
    found = check_history(p.kinds, p.final, faulty.steps, p.capacity, faulty.complete)
    assert [(v.rid, v.message) for v in found if v.invariant in invariants] == SAID[request.node.callspec.id]


def test_abort_ends_names_the_end_that_is_not_an_abort() -> None:
    """Two ends in the step of a successful physical abort, the aborted one first: ORCH-INV-209 names the other."""
    base = abort_one_ar()
    i = base.at(ev.AbortDone(1, 0))
    outputs = base.outputs(i)
    end = next(o for o in outputs if terminal(o))
    finished = end._replace(outcome=Outcome.FINISHED, reason=R.STOP)
    at = outputs.index(end) + 1
    faulty = base.with_step(i, outputs=[*outputs[:at], finished, *outputs[at:]])
    p = faulty.pipeline
    found = check_history(p.kinds, p.final, faulty.steps, p.capacity)
    assert [v.message for v in found if v.invariant == "ORCH-INV-209"] == [
        "the physical abort at stage 0 succeeded but the request ended finished: Emitted(rid=1, stage=0, "
        "cumulative=2, finished=True, outcome=finished, reason=stop)"]


def test_every_history_check_has_a_fault() -> None:
    from omni_fsm.invariants import CHECKS

    tripped = {inv for param in FAULTS for mark in param.marks for inv in mark.args}
    assert {info.invariant for info in CHECKS.values()} <= tripped


# -- the registry-level check: safe-change topics ---------------------------------------------------------


def _without_topic(inv_id: str, topic: str) -> list[str]:
    reg = load_registry(ROOT)
    entry = reg.get(inv_id)
    assert entry is not None and topic in entry.topic_map()
    trimmed = attrs.evolve(entry, topics=tuple((t, ids) for t, ids in entry.topics if t != topic))
    copy = attrs.evolve(reg, invariants=tuple(trimmed if inv is entry else inv for inv in reg.invariants))
    return safe_change_topics_covered(copy, set(discover_tests(ROOT)))


@pytest.mark.parametrize("inv_id, topic", [
    pytest.param("ORCH-INV-301", "cancellation", id="orch_cancellation_unmapped",
                 marks=pytest.mark.covers("ORCH-INV-301")),
    pytest.param("ORCH-INV-301", "shutdown ordering", id="orch_shutdown_ordering_unmapped",
                 marks=pytest.mark.covers("ORCH-INV-301")),
    pytest.param("AR-INV-304", "cache state", id="ar_cache_state_unmapped", marks=pytest.mark.covers("AR-INV-304")),
])  # fmt: skip
def test_unmapped_safe_change_topic_is_reported(inv_id: str, topic: str) -> None:
    problems = _without_topic(inv_id, topic)
    assert len(problems) == 1 and repr(topic) in problems[0]


@pytest.mark.covers("ORCH-INV-301", "AR-INV-304")
def test_topic_mapped_to_untested_invariant_is_reported() -> None:
    reg = load_registry(ROOT)
    tested = set(discover_tests(ROOT)) - {"ORCH-INV-106", "AR-INV-200"}
    problems = safe_change_topics_covered(reg, tested)
    assert len(problems) == 2
    assert any("ORCH-INV-106" in p and "queue correlation" in p for p in problems)
    assert any("AR-INV-200" in p and "cache state" in p for p in problems)
