"""THE request lifecycle: one table, read top to bottom, grouped by source state.

Everything that decides a transition is in this file, the named guards its rows test
(``guards.py``: one function each), what each effect does (``effects.py``) and the policy around the
table (``policy.py``: what is dropped before a row is selected, what a miss does, how slots move). The
core (``omni_fsm.engine``) runs them as ``SPEC`` carries them and decides nothing of its own.

A row reads ``source --event [when, not unless]--> target / effects``; for one source state and
event type the first row whose guards hold wins, so rows of the same event are in match order.
The ``transitions`` reference machine, the core's selection, the diagrams and the explorer's
successor function are all built from ``SPEC``; nothing re-types a transition elsewhere.

Entering any terminal state runs ``ON_TERMINAL`` (emit the one terminal, answer the abort calls still
owed, notify the parent, abort open dependents, drop the record), so every terminal path cleans up the
same way.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec.effects import EFFECTS, ENGINE_EFFECTS, FAN_OUT, Effect, EngineFx, FanOut, Fx
from omni_fsm.spec.guards import GUARDS, Guard
from omni_fsm.spec.policy import MISS_POLICY, STAGE_LIVE, Miss
from omni_fsm.spec.vocabulary import HOLDS_SLOT, EngineState, ReqState


@attrs.frozen
class Row:
    """``source --event [when, unless]--> target / effects``."""

    source: enum.Enum
    event: type[ev.Event]
    target: enum.Enum
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    effects: tuple[Effect, ...] = ()
    #: ``FOLLOW_INTERRUPTED``: the state the interrupted one moves to (the target of the row it follows)
    resume_to: enum.Enum | None = None

    def label(self) -> str:
        """Return ``Event [guards]`` as drawn on the diagrams."""
        conds = [*self.when, *(f"not {u}" for u in self.unless)]
        return self.event.__name__ + (f" [{' & '.join(conds)}]" if conds else "")


@attrs.frozen
class Transition:
    """One row of a ``rows_from`` block, without its source (the block's)."""

    event: type[ev.Event]
    to: enum.Enum
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    effects: tuple[Effect, ...] = ()
    resume_to: enum.Enum | None = None


def on(event: type[ev.Event], *, to: enum.Enum, when: tuple[str, ...] = (), unless: tuple[str, ...] = (),
       effects: tuple[Effect, ...] = (), resume_to: enum.Enum | None = None) -> Transition:
    """Return ``--event [when, not unless]--> to / effects`` for the block it is written in."""
    return Transition(event, to, when, unless, effects, resume_to)


def rows_from(source: enum.Enum, *transitions: Transition) -> tuple[Row, ...]:
    """Return the rows of one source state, in the order written."""
    return tuple(Row(source, t.event, t.to, t.when, t.unless, t.effects, t.resume_to) for t in transitions)


#: What entering any terminal state runs, in order (one cleanup path for every terminal).
ON_TERMINAL: tuple[Effect, ...] = (
    Effect.EMIT_TERMINAL, Effect.ANSWER_OPEN_ABORTS, Effect.NOTIFY_PARENT, Effect.ABORT_DEPENDENTS, Effect.RELEASE,
)

#: The request lifecycle, in match order.
REQUEST_ROWS: tuple[Row, ...] = (
    # -- NEW: the record exists; the client's submit decides where it goes (admitted, held, refused asleep)
    *rows_from(ReqState.NEW,
        on(ev.Submit, to=ReqState.AWAITING_CHILDREN, when=("engine_running", "parallel_parent"),
           effects=(Effect.SPAWN_CHILDREN,)),
        on(ev.Submit, to=ReqState.WAITING, when=("engine_running",),
           effects=(Effect.DISPATCH, Effect.SPAWN_COMPANIONS)),
        on(ev.Submit, to=ReqState.PENDING, when=("engine_paused",)),
        on(ev.Submit, to=ReqState.FINISHED_ERROR, when=("engine_sleeping",)),
    ),
    # -- PENDING: submitted while the engine was paused; admitted when it resumes
    *rows_from(ReqState.PENDING,
        on(ev.Admit, to=ReqState.AWAITING_CHILDREN, when=("engine_running", "parallel_parent"),
           effects=(Effect.SPAWN_CHILDREN,)),
        on(ev.Admit, to=ReqState.WAITING, when=("engine_running",), effects=(Effect.DISPATCH, Effect.SPAWN_COMPANIONS)),
        on(ev.Admit, to=ReqState.PENDING, when=("engine_paused",)),
        on(ev.Admit, to=ReqState.FINISHED_ERROR, when=("engine_sleeping",)),
        on(ev.CompanionEnded, to=ReqState.PENDING, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.FINISHED_ABORTED,
           effects=(Effect.ACK_ABORT, Effect.ABORT_COMPANIONS, Effect.COMMIT_ABORT)),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- WAITING: dispatched to its current stage and queued there (no slot)
    *rows_from(ReqState.WAITING,
        on(ev.Scheduled, to=ReqState.RUNNING, when=("slot_free",)),
        on(ev.AwaitGrammar, to=ReqState.WAITING_FOR_GRAMMAR, when=("ar_stage", "nothing_generated")),
        on(ev.AwaitRemoteKVs, to=ReqState.WAITING_FOR_REMOTE_KVS, when=("ar_stage",)),
        on(ev.StageFinished, to=ReqState.FINISHED_IGNORED, when=("prompt_ignored", "nothing_generated")),
        on(ev.CompanionEnded, to=ReqState.WAITING, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- WAITING_FOR_GRAMMAR: parked until its structured-output grammar is compiled (no slot)
    *rows_from(ReqState.WAITING_FOR_GRAMMAR,
        on(ev.InputReady, to=ReqState.WAITING),
        on(ev.CompanionEnded, to=ReqState.WAITING_FOR_GRAMMAR, when=("companion_ok",),
           effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- WAITING_FOR_REMOTE_KVS: parked while its KV blocks load (no slot)
    *rows_from(ReqState.WAITING_FOR_REMOTE_KVS,
        on(ev.Preempted, to=ReqState.PREEMPTED, when=("ar_stage",)),
        on(ev.InputReady, to=ReqState.WAITING),
        on(ev.CompanionEnded, to=ReqState.WAITING_FOR_REMOTE_KVS, when=("companion_ok",),
           effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- WAITING_FOR_STREAMING_REQ: a streaming-input session between turns (keeps its slot)
    *rows_from(ReqState.WAITING_FOR_STREAMING_REQ,
        on(ev.InputReady, to=ReqState.WAITING),
        on(ev.StageFinished, to=ReqState.FINISHED_STOPPED, when=("stopped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_LENGTH_CAPPED, when=("length_capped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_REPETITION, when=("repetition", "last_stage")),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending", "final_output_stage"),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL,)),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending",),
           unless=("last_stage", "prompt_ignored")),
        on(ev.StageFinished, to=ReqState.WAITING, when=("final_output_stage",),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL, Effect.FORWARD)),
        on(ev.StageFinished, to=ReqState.WAITING, unless=("last_stage", "prompt_ignored"), effects=(Effect.FORWARD,)),
        on(ev.CompanionEnded, to=ReqState.WAITING_FOR_STREAMING_REQ, when=("companion_ok",),
           effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- WAITING_FOR_CHUNK: parked until its next input chunk (no slot)
    *rows_from(ReqState.WAITING_FOR_CHUNK,
        on(ev.InputReady, to=ReqState.WAITING),
        on(ev.CompanionEnded, to=ReqState.WAITING_FOR_CHUNK, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- RUNNING: scheduled at its stage (holds a slot): outputs, a finish, preemption, parking
    *rows_from(ReqState.RUNNING,
        on(ev.Preempted, to=ReqState.PREEMPTED, when=("ar_stage",)),
        on(ev.AwaitStreamingReq, to=ReqState.WAITING_FOR_STREAMING_REQ, when=("ar_stage",)),
        on(ev.AwaitChunk, to=ReqState.WAITING_FOR_CHUNK, when=("ar_stage",)),
        on(ev.StageOutput, to=ReqState.RUNNING, when=("final_output_stage", "ar_stage"),
           effects=(Effect.ACCUMULATE, Effect.EMIT_PARTIAL)),
        on(ev.StageOutput, to=ReqState.RUNNING, effects=(Effect.ACCUMULATE,)),
        on(ev.StageFinished, to=ReqState.FINISHED_STOPPED, when=("stopped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_LENGTH_CAPPED, when=("length_capped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_REPETITION, when=("repetition", "last_stage")),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending", "final_output_stage"),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL,)),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending",),
           unless=("last_stage", "prompt_ignored")),
        on(ev.StageFinished, to=ReqState.WAITING, when=("final_output_stage",),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL, Effect.FORWARD)),
        on(ev.StageFinished, to=ReqState.WAITING, unless=("last_stage", "prompt_ignored"), effects=(Effect.FORWARD,)),
        on(ev.CompanionEnded, to=ReqState.RUNNING, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- PREEMPTED: evicted and queued again; a batch in flight may still deliver outputs or a finish
    *rows_from(ReqState.PREEMPTED,
        on(ev.Scheduled, to=ReqState.RUNNING, when=("slot_free", "ar_stage")),
        on(ev.AwaitRemoteKVs, to=ReqState.WAITING_FOR_REMOTE_KVS, when=("ar_stage",)),
        on(ev.AwaitStreamingReq, to=ReqState.WAITING_FOR_STREAMING_REQ, when=("ar_stage", "slot_free")),
        on(ev.StageOutput, to=ReqState.PREEMPTED, when=("final_output_stage", "ar_stage"),
           effects=(Effect.ACCUMULATE, Effect.EMIT_PARTIAL)),
        on(ev.StageOutput, to=ReqState.PREEMPTED, effects=(Effect.ACCUMULATE,)),
        on(ev.StageFinished, to=ReqState.FINISHED_STOPPED, when=("stopped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_LENGTH_CAPPED, when=("length_capped", "last_stage")),
        on(ev.StageFinished, to=ReqState.FINISHED_REPETITION, when=("repetition", "last_stage")),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending", "final_output_stage"),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL,)),
        on(ev.StageFinished, to=ReqState.STAGE_DONE, when=("companions_pending",),
           unless=("last_stage", "prompt_ignored")),
        on(ev.StageFinished, to=ReqState.WAITING, when=("final_output_stage",),
           unless=("last_stage", "prompt_ignored"), effects=(Effect.EMIT_STAGE_FINAL, Effect.FORWARD)),
        on(ev.StageFinished, to=ReqState.WAITING, unless=("last_stage", "prompt_ignored"), effects=(Effect.FORWARD,)),
        on(ev.CompanionEnded, to=ReqState.PREEMPTED, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.ABORTING,
           effects=(Effect.ACK_ABORT, Effect.REMEMBER_RESUME, Effect.SEND_ABORT, Effect.ABORT_COMPANIONS)),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- STAGE_DONE: its stage finished; it waits for its CFG companions before forwarding
    *rows_from(ReqState.STAGE_DONE,
        on(ev.CompanionEnded, to=ReqState.WAITING, when=("companion_ok", "last_companion"),
           effects=(Effect.NOTE_COMPANION, Effect.FORWARD)),
        on(ev.CompanionEnded, to=ReqState.STAGE_DONE, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.Abort, to=ReqState.FINISHED_ABORTED,
           effects=(Effect.ACK_ABORT, Effect.ABORT_COMPANIONS, Effect.COMMIT_ABORT)),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- AWAITING_CHILDREN: an n>1 parent; its samples do the work and it ends after the last
    *rows_from(ReqState.AWAITING_CHILDREN,
        on(ev.CompanionEnded, to=ReqState.AWAITING_CHILDREN, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.ChildEnded, to=ReqState.AWAITING_CHILDREN, unless=("last_child",), effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FAILED_FATAL, when=("last_child", "children_fold_to_failed_fatal"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_ABORTED, when=("last_child", "children_fold_to_finished_aborted"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_ERROR, when=("last_child", "children_fold_to_finished_error"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_IGNORED, when=("last_child", "children_fold_to_finished_ignored"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_LENGTH_CAPPED,
           when=("last_child", "children_fold_to_finished_length_capped"), effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_REPETITION, when=("last_child", "children_fold_to_finished_repetition"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_STOPPED, when=("last_child", "children_fold_to_finished_stopped"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.Abort, to=ReqState.ABORTING_CHILDREN, effects=(Effect.ACK_ABORT, Effect.ABORT_CHILDREN)),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- ABORTING_CHILDREN: an aborted n>1 parent; it ends after its last sample
    *rows_from(ReqState.ABORTING_CHILDREN,
        on(ev.CompanionEnded, to=ReqState.ABORTING_CHILDREN, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.FINISHED_ERROR, effects=(Effect.NOTE_COMPANION,)),
        on(ev.ChildEnded, to=ReqState.ABORTING_CHILDREN, unless=("last_child",), effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FAILED_FATAL, when=("last_child", "children_fold_to_failed_fatal"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_ABORTED, when=("last_child", "children_fold_to_finished_aborted"),
           effects=(Effect.NOTE_CHILD, Effect.COMMIT_ABORT)),
        on(ev.ChildEnded, to=ReqState.FINISHED_ERROR, when=("last_child", "children_fold_to_finished_error"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_IGNORED, when=("last_child", "children_fold_to_finished_ignored"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_LENGTH_CAPPED,
           when=("last_child", "children_fold_to_finished_length_capped"), effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_REPETITION, when=("last_child", "children_fold_to_finished_repetition"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.ChildEnded, to=ReqState.FINISHED_STOPPED, when=("last_child", "children_fold_to_finished_stopped"),
           effects=(Effect.NOTE_CHILD,)),
        on(ev.Abort, to=ReqState.ABORTING_CHILDREN, effects=(Effect.ACK_ABORT,)),  # one more caller, owed its answer
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),
    # -- ABORTING: the abort waits for the physical abort at the stage; until then the scheduler may still
    # move the request, and the state the abort interrupted (``resume``) follows it (FOLLOW_INTERRUPTED)
    *rows_from(ReqState.ABORTING,
        on(ev.CompanionEnded, to=ReqState.ABORTING, when=("companion_ok",), effects=(Effect.NOTE_COMPANION,)),
        on(ev.CompanionEnded, to=ReqState.ABORTING, effects=(Effect.NOTE_COMPANION, Effect.NOTE_COMPANION_LOST)),
        on(ev.Abort, to=ReqState.ABORTING, effects=(Effect.ACK_ABORT,)),  # one more caller, owed its answer
        on(ev.AbortFailed, to=ReqState.ABORTING, when=("cannot_resume",), effects=(Effect.SEND_ABORT,)),
        on(ev.AbortDone, to=ReqState.FINISHED_ABORTED, effects=(Effect.COMMIT_ABORT,)),
        on(ev.AbortFailed, to=ReqState.PREEMPTED, when=("abort_resumes_preempted",),
           effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.RUNNING, when=("abort_resumes_running",), effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.WAITING, when=("abort_resumes_waiting",), effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.WAITING_FOR_CHUNK, when=("abort_resumes_waiting_for_chunk",),
           effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.WAITING_FOR_GRAMMAR, when=("abort_resumes_waiting_for_grammar",),
           effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.WAITING_FOR_REMOTE_KVS, when=("abort_resumes_waiting_for_remote_kvs",),
           effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.AbortFailed, to=ReqState.WAITING_FOR_STREAMING_REQ, when=("abort_resumes_waiting_for_streaming_req",),
           effects=(Effect.ANSWER_ABORT_FAILED,)),
        on(ev.StageOutput, to=ReqState.ABORTING, when=("abort_resumes_running",), effects=(Effect.ACCUMULATE,)),
        on(ev.StageOutput, to=ReqState.ABORTING, when=("abort_resumes_preempted",), effects=(Effect.ACCUMULATE,)),
        on(ev.StageFinished, to=ReqState.FINISHED_ABORTED, effects=(Effect.COMMIT_ABORT,)),
        on(ev.Scheduled, to=ReqState.ABORTING, when=("abort_resumes_waiting", "slot_free"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.RUNNING),
        on(ev.Scheduled, to=ReqState.ABORTING, when=("abort_resumes_preempted", "slot_free", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.RUNNING),
        on(ev.Preempted, to=ReqState.ABORTING, when=("abort_resumes_running", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.PREEMPTED),
        on(ev.AwaitGrammar, to=ReqState.ABORTING, when=("abort_resumes_waiting", "ar_stage", "nothing_generated"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_GRAMMAR),
        on(ev.AwaitRemoteKVs, to=ReqState.ABORTING, when=("abort_resumes_preempted", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_REMOTE_KVS),
        on(ev.AwaitRemoteKVs, to=ReqState.ABORTING, when=("abort_resumes_waiting", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_REMOTE_KVS),
        on(ev.Preempted, to=ReqState.ABORTING, when=("abort_resumes_waiting_for_remote_kvs", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.PREEMPTED),
        on(ev.AwaitStreamingReq, to=ReqState.ABORTING, when=("abort_resumes_running", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_STREAMING_REQ),
        on(ev.AwaitChunk, to=ReqState.ABORTING, when=("abort_resumes_running", "ar_stage"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_CHUNK),
        on(ev.AwaitStreamingReq, to=ReqState.ABORTING, when=("abort_resumes_preempted", "ar_stage", "slot_free"),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING_FOR_STREAMING_REQ),
        on(ev.InputReady, to=ReqState.ABORTING, when=("abort_resumes_waiting_for_chunk",),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING),
        on(ev.InputReady, to=ReqState.ABORTING, when=("abort_resumes_waiting_for_grammar",),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING),
        on(ev.InputReady, to=ReqState.ABORTING, when=("abort_resumes_waiting_for_remote_kvs",),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING),
        on(ev.InputReady, to=ReqState.ABORTING, when=("abort_resumes_waiting_for_streaming_req",),
           effects=(Effect.FOLLOW_INTERRUPTED,), resume_to=ReqState.WAITING),
        on(ev.StageAborted, to=ReqState.FINISHED_ABORTED, effects=(Effect.COMMIT_ABORT,)),
        on(ev.StageFailed, to=ReqState.FINISHED_ERROR),
        on(ev.ReplicaLost, to=ReqState.FINISHED_ERROR),
        on(ev.EngineFailed, to=ReqState.FAILED_FATAL),
        on(ev.ShutdownAbort, to=ReqState.FINISHED_ABORTED),
    ),)

#: The engine's control plane, in match order.
ENGINE_ROWS: tuple[Row, ...] = (
    # -- RUNNING: admitting work
    *rows_from(EngineState.RUNNING,
        on(ev.Control, to=EngineState.RUNNING, effects=(Effect.SEND_RPC,)),
        on(ev.RpcDone, to=EngineState.PAUSED, when=("rpc_is_pause_scheduler",), effects=(Effect.ANSWER_RPC,)),
        on(ev.RpcDone, to=EngineState.RUNNING, when=("rpc_is_resume_scheduler",),
           effects=(Effect.ANSWER_RPC, Effect.ADMIT_HELD)),
        on(ev.RpcDone, to=EngineState.SLEEPING, when=("rpc_is_sleep",), effects=(Effect.NOTE_SLEEP, Effect.ANSWER_RPC)),
        on(ev.RpcDone, to=EngineState.RUNNING, effects=(Effect.ANSWER_RPC,)),
        on(ev.RpcFailed, to=EngineState.RUNNING, effects=(Effect.ANSWER_RPC_ERROR,)),
        on(ev.EngineDied, to=EngineState.DEAD, effects=(Effect.FAIL_PENDING_RPCS, Effect.FAIL_ALL_OPEN)),
        on(ev.Shutdown, to=EngineState.STOPPED,
           effects=(Effect.FAIL_PENDING_RPCS, Effect.ABORT_ALL_OPEN, Effect.STOP_ORCHESTRATOR, Effect.STOP_RUNTIMES)),
    ),
    # -- PAUSED: admission held
    *rows_from(EngineState.PAUSED,
        on(ev.Control, to=EngineState.PAUSED, effects=(Effect.SEND_RPC,)),
        on(ev.RpcDone, to=EngineState.PAUSED, when=("rpc_is_pause_scheduler",), effects=(Effect.ANSWER_RPC,)),
        on(ev.RpcDone, to=EngineState.RUNNING, when=("rpc_is_resume_scheduler",),
           effects=(Effect.ANSWER_RPC, Effect.ADMIT_HELD)),
        on(ev.RpcDone, to=EngineState.SLEEPING, when=("rpc_is_sleep",), effects=(Effect.NOTE_SLEEP, Effect.ANSWER_RPC)),
        on(ev.RpcDone, to=EngineState.PAUSED, effects=(Effect.ANSWER_RPC,)),
        on(ev.RpcFailed, to=EngineState.PAUSED, effects=(Effect.ANSWER_RPC_ERROR,)),
        on(ev.EngineDied, to=EngineState.DEAD, effects=(Effect.FAIL_PENDING_RPCS, Effect.FAIL_ALL_OPEN)),
        on(ev.Shutdown, to=EngineState.STOPPED,
           effects=(Effect.FAIL_PENDING_RPCS, Effect.ABORT_ALL_OPEN, Effect.STOP_ORCHESTRATOR, Effect.STOP_RUNTIMES)),
    ),
    # -- SLEEPING: submits are refused
    *rows_from(EngineState.SLEEPING,
        on(ev.Control, to=EngineState.SLEEPING, effects=(Effect.SEND_RPC,)),
        on(ev.RpcDone, to=EngineState.SLEEPING, when=("rpc_is_sleep",), effects=(Effect.NOTE_SLEEP, Effect.ANSWER_RPC)),
        on(ev.RpcDone, to=EngineState.PAUSED, when=("rpc_is_wake_up", "wakes_every_tag"),
           effects=(Effect.NOTE_WAKE, Effect.ANSWER_RPC)),
        on(ev.RpcDone, to=EngineState.SLEEPING, when=("rpc_is_wake_up",),
           effects=(Effect.NOTE_WAKE, Effect.ANSWER_RPC)),
        on(ev.RpcDone, to=EngineState.SLEEPING, effects=(Effect.ANSWER_RPC,)),
        on(ev.RpcFailed, to=EngineState.SLEEPING, effects=(Effect.ANSWER_RPC_ERROR,)),
        on(ev.EngineDied, to=EngineState.DEAD, effects=(Effect.FAIL_PENDING_RPCS, Effect.FAIL_ALL_OPEN)),
        on(ev.Shutdown, to=EngineState.STOPPED,
           effects=(Effect.FAIL_PENDING_RPCS, Effect.ABORT_ALL_OPEN, Effect.STOP_ORCHESTRATOR, Effect.STOP_RUNTIMES)),
    ),
    # -- DEAD: a stage lost its last replica
    *rows_from(EngineState.DEAD,
        on(ev.Shutdown, to=EngineState.STOPPED,
           effects=(Effect.FAIL_PENDING_RPCS, Effect.ABORT_ALL_OPEN, Effect.STOP_ORCHESTRATOR, Effect.STOP_RUNTIMES)),
    ),
    # -- STOPPED: shut down (idempotent)
    *rows_from(EngineState.STOPPED,
        on(ev.Shutdown, to=EngineState.STOPPED),
    ),)


@attrs.frozen(repr=False)
class Spec:
    """A complete lifecycle specification: everything that decides a step, and what the core, the machine and
    the explorer run.

    The canonical one is ``SPEC``. A variant is made with ``attrs.evolve`` and runs as it reads, with nothing
    to regenerate: its rows, the guard functions they name (``guards``), the functions of the request and engine
    effects (``effects``, ``engine_effects``), its terminal cleanup, the states that hold a slot and whom each
    cross-request effect reaches (``fan_out``); e.g.
    ``attrs.evolve(SPEC, guards={**SPEC.guards, "engine_sleeping": lambda record, event, engine: False})``.
    The test suite builds faulty variants this way (historic bugs re-injected). Its repr names it and counts its
    rows (the rows are ``rows`` and ``engine_rows``).
    """

    rows: tuple[Row, ...]
    engine_rows: tuple[Row, ...]
    on_terminal: tuple[Effect, ...] = ON_TERMINAL
    holds_slot: frozenset[ReqState] = HOLDS_SLOT
    name: str = "omni-fsm lifecycle"
    fan_out: Mapping[Effect, FanOut] = attrs.field(default=FAN_OUT, hash=False)
    #: guard name -> its function: every name a row may use
    guards: Mapping[str, Guard] = attrs.field(default=GUARDS, hash=False)
    #: request effect -> what it does (the fan-out ones: ``fan_out``; ``FOLLOW_INTERRUPTED``: the row's ``resume_to``)
    effects: Mapping[Effect, Fx] = attrs.field(default=EFFECTS, hash=False)
    #: engine (control-plane) effect -> what it does (the fan-out ones: ``fan_out``)
    engine_effects: Mapping[Effect, EngineFx] = attrs.field(default=ENGINE_EFFECTS, hash=False)

    def __repr__(self) -> str:
        return f"<Spec {self.name!r}: {len(self.rows)} request rows, {len(self.engine_rows)} engine rows>"


#: The lifecycle specification: the request table and the engine's control-plane table.
SPEC = Spec(REQUEST_ROWS, ENGINE_ROWS)

__all__ = ["ENGINE_ROWS", "MISS_POLICY", "ON_TERMINAL", "REQUEST_ROWS", "SPEC", "STAGE_LIVE", "Effect", "Miss", "Row",
           "Spec", "Transition", "on", "rows_from"]  # fmt: skip
