"""THE request lifecycle: one table. Everything that decides a transition is in this file, and
the named guards its rows test (``_guards.py``: one expression each).

Rows are keyed ``(state, event type, guards)``; the first row whose guards hold gives the next
state and the effects. The ``transitions`` reference machine, the compiled fast path, the
diagrams and the explorer's successor function are all built from ``SPEC``; nothing re-types a
transition elsewhere. Anything not in the table is handled by ``MISS_POLICY`` (below): by the
event's origin, a client's misuse is refused and nothing changes, a runtime report fails that
request, an internal event is a bug of the core; ``core.Lifecycle`` dispatches on it.

Entering any terminal state runs ``ON_TERMINAL`` (emit the one terminal, notify the parent,
abort open dependents, drop the record), so every terminal path cleans up the same way.
Slots are not effects: a record occupies one slot of its current stage exactly while its state
(or, while aborting, the state the abort interrupted) is in ``HOLDS_SLOT``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec.guards import resumes
from omni_fsm.spec.vocabulary import (
    BOUND,
    HOLDS_SLOT,
    LIVE,
    PARKED,
    TERMINAL,
    EngineState,
    IdentityHashedEnum,
    ReqState,
)

S = ReqState
E = EngineState


class Effect(IdentityHashedEnum):
    """The closed set of things a transition can ask for besides changing state."""

    DISPATCH = "dispatch"  #: send the request to its current stage
    SPAWN_CHILDREN = "spawn_children"  #: create and submit the ``n`` child samples
    SPAWN_COMPANIONS = "spawn_companions"  #: create and submit the CFG companions
    ACCUMULATE = "accumulate"  #: add the output's tokens to the stage's prefix
    EMIT_PARTIAL = "emit_partial"  #: stream the output to the client (final-output AR stage)
    EMIT_STAGE_FINAL = "emit_stage_final"  #: an earlier final-output stage is done: not terminal
    FORWARD = "forward"  #: route to the next stage (through its input adapter) and dispatch
    NOTE_CHILD = "note_child"  #: one child fewer; fold its outcome into the parent's
    NOTE_COMPANION = "note_companion"  #: one companion fewer outstanding
    NOTE_COMPANION_LOST = "note_companion_lost"  #: a companion failed: the parent can never resume
    ACK_ABORT = "ack_abort"  #: the abort request is accepted (observable: abort requested)
    REMEMBER_RESUME = "remember_resume"  #: keep the interrupted state for a failed abort
    FOLLOW_INTERRUPTED = "follow_interrupted"  #: move the interrupted state as this table says
    SEND_ABORT = "send_abort"  #: ask the bound stage to abort physically
    COMMIT_ABORT = "commit_abort"  #: commit the abort (only after the physical abort)
    ANSWER_ABORT_FAILED = "answer_abort_failed"  #: the abort caller learns it failed
    ABORT_CHILDREN = "abort_children"  #: a parent's abort reaches every open child
    ABORT_COMPANIONS = "abort_companions"  #: a parent's abort reaches every open companion
    # terminal entry actions
    EMIT_TERMINAL = "emit_terminal"  #: the one client-visible terminal (children: per sample)
    NOTIFY_PARENT = "notify_parent"  #: a child or companion tells its parent it ended
    ABORT_DEPENDENTS = "abort_dependents"  #: open children / companions are aborted
    RELEASE = "release"  #: the record is dropped: no state survives the terminal
    # control plane
    SEND_RPC = "send_rpc"
    ANSWER_RPC = "answer_rpc"  #: the RPC's own caller gets the workers' result
    ANSWER_RPC_ERROR = "answer_rpc_error"  #: the RPC's own caller gets the worker's exception
    NOTE_SLEEP = "note_sleep"
    NOTE_WAKE = "note_wake"
    ADMIT_HELD = "admit_held"  #: admit every request held while paused
    FAIL_ALL_OPEN = "fail_all_open"  #: every open request fails (fatal)
    FAIL_PENDING_RPCS = "fail_pending_rpcs"  #: in-flight RPC callers get an error, not silence
    ABORT_ALL_OPEN = "abort_all_open"  #: shutdown: every open request ends as aborted
    STOP_ORCHESTRATOR = "stop_orchestrator"
    STOP_RUNTIMES = "stop_runtimes"  #: always after STOP_ORCHESTRATOR


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

#: States of an ``n>1`` parent: it waits for its samples (its children), or aborts them.
PARENTS: tuple[ReqState, ...] = (S.AWAITING_CHILDREN, S.ABORTING_CHILDREN)

#: What entering any terminal state runs, in order (one cleanup path for every terminal).
ON_TERMINAL: tuple[Effect, ...] = (
    Effect.EMIT_TERMINAL, Effect.NOTIFY_PARENT, Effect.ABORT_DEPENDENTS, Effect.RELEASE,
)


def _rows(sources: Iterable[enum.Enum], event: type[ev.Event], target: enum.Enum | None = None,
          when: tuple[str, ...] = (), unless: tuple[str, ...] = (),
          effects: tuple[Effect, ...] = ()) -> list[Row]:
    """One row per source; ``target=None`` means 'stay in the source state'."""
    order = sorted(sources, key=lambda s: s.name)
    return [Row(s, event, s if target is None else target, when, unless, effects) for s in order]


D = Effect  #: short for the rows below
#: States from which an abort needs a physical abort at the bound stage: every bound state.
ABORTABLE_BOUND = BOUND
#: Live states whose runtime reports about the current stage are judged by the table.
STAGE_LIVE = BOUND | {S.ABORTING}
_FINISH = (("stopped", S.FINISHED_STOPPED), ("length_capped", S.FINISHED_LENGTH_CAPPED),
           ("repetition", S.FINISHED_REPETITION))
#: States a stage reports outputs from: running, or preempted while a batch of it was in flight (vLLM's asynchronous
#: scheduling delivers that batch's tokens after the preemption)
_OUTPUTS_FROM: tuple[S, ...] = (S.RUNNING, S.PREEMPTED)
#: States a stage finishes a request from: those, and parked between the turns of a streaming-input session (vLLM
#: ends a parked session when its input ends; a preempted request may stop on its in-flight tokens)
_FINISHES_FROM: tuple[S, ...] = (*_OUTPUTS_FROM, S.WAITING_FOR_STREAMING_REQ)
#: Parking waits entered from RUNNING (a streaming / chunked input runs, then waits for more)
_PARK_WHILE_RUNNING: tuple[tuple[type[ev.StageEvent], S], ...] = (
    (ev.AwaitStreamingReq, S.WAITING_FOR_STREAMING_REQ),
    (ev.AwaitChunk, S.WAITING_FOR_CHUNK),
)


def request_rows() -> list[Row]:
    """Return the request lifecycle table, in match order."""
    rows: list[Row] = []
    # admission: submit (or admit a held request); refuse while sleeping
    admissions: tuple[tuple[S, type[ev.Event]], ...] = ((S.NEW, ev.Submit), (S.PENDING, ev.Admit))
    for src, event in admissions:
        rows += _rows([src], event, S.AWAITING_CHILDREN, ("engine_running", "parallel_parent"),
                      effects=(D.SPAWN_CHILDREN,))
        rows += _rows([src], event, S.WAITING, ("engine_running",),
                      effects=(D.DISPATCH, D.SPAWN_COMPANIONS))
        rows += _rows([src], event, S.PENDING, ("engine_paused",))
        rows += _rows([src], event, S.FINISHED_ERROR, ("engine_sleeping",))
    # the stage scheduler (AR sub-states are vLLM's RequestStatus; diffusion uses a subset)
    rows += _rows([S.WAITING], ev.Scheduled, S.RUNNING, ("slot_free",))
    rows += _rows([S.PREEMPTED], ev.Scheduled, S.RUNNING, ("slot_free", "ar_stage"))
    rows += _rows([S.RUNNING], ev.Preempted, S.PREEMPTED, ("ar_stage",))
    # a grammar wait begins as the request is made; a remote KV load may begin for any queued request (vLLM
    # 0.32: also a preempted one, which, once loaded, is queued as preempted again)
    rows += _rows([S.WAITING], ev.AwaitGrammar, S.WAITING_FOR_GRAMMAR, ("ar_stage", "nothing_generated"))
    rows += _rows([S.WAITING, S.PREEMPTED], ev.AwaitRemoteKVs, S.WAITING_FOR_REMOTE_KVS, ("ar_stage",))
    rows += _rows([S.WAITING_FOR_REMOTE_KVS], ev.Preempted, S.PREEMPTED, ("ar_stage",))
    for wait, parked in _PARK_WHILE_RUNNING:
        rows += _rows([S.RUNNING], wait, parked, ("ar_stage",))
    # a preempted session whose in-flight tokens end its turn parks for its next input (vLLM's AsyncScheduler)
    rows += _rows([S.PREEMPTED], ev.AwaitStreamingReq, S.WAITING_FOR_STREAMING_REQ, ("ar_stage", "slot_free"))
    rows += _rows(PARKED, ev.InputReady, S.WAITING)
    # outputs and finishes at the current stage
    rows += _rows(_OUTPUTS_FROM, ev.StageOutput, None, ("final_output_stage", "ar_stage"),
                  effects=(D.ACCUMULATE, D.EMIT_PARTIAL))
    rows += _rows(_OUTPUTS_FROM, ev.StageOutput, None, effects=(D.ACCUMULATE,))
    rows += _rows([S.WAITING], ev.StageFinished, S.FINISHED_IGNORED, ("prompt_ignored", "nothing_generated"))
    # a stage finishes a running request (or a preempted one whose in-flight tokens stop it), or a streaming-input
    # session parked between turns whose input ended
    finishing = _FINISHES_FROM
    for guard, finished in _FINISH:
        rows += _rows(finishing, ev.StageFinished, finished, (guard, "last_stage"))
    more = ("last_stage", "prompt_ignored")  # an earlier stage finished: forward (or wait)
    rows += _rows(finishing, ev.StageFinished, S.STAGE_DONE, ("companions_pending", "final_output_stage"),
                  more, (D.EMIT_STAGE_FINAL,))
    rows += _rows(finishing, ev.StageFinished, S.STAGE_DONE, ("companions_pending",), more)
    rows += _rows(finishing, ev.StageFinished, S.WAITING, ("final_output_stage",), more,
                  (D.EMIT_STAGE_FINAL, D.FORWARD))
    rows += _rows(finishing, ev.StageFinished, S.WAITING, unless=more, effects=(D.FORWARD,))
    # CFG companions: forward only once every companion is done; a lost one fails the parent
    rows += _rows([S.STAGE_DONE], ev.CompanionEnded, S.WAITING, ("companion_ok", "last_companion"),
                  effects=(D.NOTE_COMPANION, D.FORWARD))
    rows += _rows(LIVE - {S.NEW}, ev.CompanionEnded, None, ("companion_ok",), effects=(D.NOTE_COMPANION,))
    rows += _rows([S.ABORTING], ev.CompanionEnded, None, effects=(D.NOTE_COMPANION, D.NOTE_COMPANION_LOST))
    rows += _rows(LIVE - {S.NEW, S.ABORTING}, ev.CompanionEnded, S.FINISHED_ERROR,
                  effects=(D.NOTE_COMPANION,))
    # parallel sampling: the parent ends once, after its last child, with the worst outcome
    parents = PARENTS
    rows += _rows(parents, ev.ChildEnded, None, unless=("last_child",), effects=(D.NOTE_CHILD,))
    for outcome in sorted(TERMINAL, key=lambda s: s.name):
        last = ("last_child", f"children_fold_to_{outcome.name.lower()}")
        rows += _rows([S.AWAITING_CHILDREN], ev.ChildEnded, outcome, last, effects=(D.NOTE_CHILD,))
        commit = (D.COMMIT_ABORT,) if outcome is S.FINISHED_ABORTED else ()
        rows += _rows([S.ABORTING_CHILDREN], ev.ChildEnded, outcome, last, effects=(D.NOTE_CHILD, *commit))
    # abort: requested -> physical abort at the bound stage -> committed (or resumed on failure)
    rows += _rows(ABORTABLE_BOUND, ev.Abort, S.ABORTING,
                  effects=(D.ACK_ABORT, D.REMEMBER_RESUME, D.SEND_ABORT, D.ABORT_COMPANIONS))
    rows += _rows([S.PENDING, S.STAGE_DONE], ev.Abort, S.FINISHED_ABORTED,
                  effects=(D.ACK_ABORT, D.ABORT_COMPANIONS, D.COMMIT_ABORT))
    rows += _rows([S.AWAITING_CHILDREN], ev.Abort, S.ABORTING_CHILDREN, effects=(D.ACK_ABORT, D.ABORT_CHILDREN))
    rows += _rows([S.ABORTING, S.ABORTING_CHILDREN], ev.Abort, None)  # idempotent
    # a dependent (its parent's abort), or a parent whose companion was lost or is being aborted, cannot resume: retry
    rows += _rows([S.ABORTING], ev.AbortFailed, None, ("cannot_resume",), effects=(D.SEND_ABORT,))
    rows += _rows([S.ABORTING], ev.AbortDone, S.FINISHED_ABORTED, effects=(D.COMMIT_ABORT,))
    for interrupted in sorted(ABORTABLE_BOUND, key=lambda s: s.name):
        rows += _rows([S.ABORTING], ev.AbortFailed, interrupted, (resumes(interrupted),),
                      effects=(D.ANSWER_ABORT_FAILED,))
    for interrupted in _OUTPUTS_FROM:
        rows += _rows([S.ABORTING], ev.StageOutput, None, (resumes(interrupted),), effects=(D.ACCUMULATE,))
    rows += _rows([S.ABORTING], ev.StageFinished, S.FINISHED_ABORTED, effects=(D.COMMIT_ABORT,))
    rows += _follow_interrupted(rows)
    # the engine ended the request itself as aborted: it is physically gone (an abort in flight is thereby done)
    rows += _rows(BOUND, ev.StageAborted, S.FINISHED_ABORTED)
    rows += _rows([S.ABORTING], ev.StageAborted, S.FINISHED_ABORTED, effects=(D.COMMIT_ABORT,))
    # failures, engine death, shutdown: from every live state
    rows += _rows(STAGE_LIVE, ev.StageFailed, S.FINISHED_ERROR)
    rows += _rows(STAGE_LIVE, ev.ReplicaLost, S.FINISHED_ERROR)
    rows += _rows(LIVE - {S.NEW}, ev.EngineFailed, S.FAILED_FATAL)
    rows += _rows(LIVE - {S.NEW}, ev.ShutdownAbort, S.FINISHED_ABORTED)
    return rows


def _follow_interrupted(rows: list[Row]) -> list[Row]:
    """Until the physical abort lands the stage scheduler may still move the request.

    Derived from the rows above: a scheduler report that moves the interrupted state (to a
    state still bound to the stage) moves it while ``ABORTING`` too; any other is illegal.
    """
    reports = {ev.Scheduled, ev.Preempted, ev.InputReady, ev.AwaitGrammar, ev.AwaitRemoteKVs,
               *(e for e, _ in _PARK_WHILE_RUNNING)}
    return [Row(S.ABORTING, r.event, S.ABORTING, (resumes(r.source), *r.when), r.unless, (D.FOLLOW_INTERRUPTED,),
                r.target) for r in rows if r.event in reports and r.source in ABORTABLE_BOUND and r.target in BOUND]


_LIVE_ENGINE = (E.RUNNING, E.PAUSED, E.SLEEPING)


def engine_rows() -> list[Row]:
    """Return the control-plane table, in match order."""
    rows: list[Row] = []
    rows += _rows(_LIVE_ENGINE, ev.Control, None, effects=(D.SEND_RPC,))
    ok = (D.ANSWER_RPC,)
    rows += _rows([E.RUNNING, E.PAUSED], ev.RpcDone, E.PAUSED, ("rpc_is_pause_scheduler",), effects=ok)
    rows += _rows([E.RUNNING, E.PAUSED], ev.RpcDone, E.RUNNING, ("rpc_is_resume_scheduler",),
                  effects=(D.ANSWER_RPC, D.ADMIT_HELD))
    rows += _rows(_LIVE_ENGINE, ev.RpcDone, E.SLEEPING, ("rpc_is_sleep",), effects=(D.NOTE_SLEEP, D.ANSWER_RPC))
    rows += _rows([E.SLEEPING], ev.RpcDone, E.PAUSED, ("rpc_is_wake_up", "wakes_every_tag"),
                  effects=(D.NOTE_WAKE, D.ANSWER_RPC))
    rows += _rows([E.SLEEPING], ev.RpcDone, None, ("rpc_is_wake_up",), effects=(D.NOTE_WAKE, D.ANSWER_RPC))
    rows += _rows(_LIVE_ENGINE, ev.RpcDone, None, effects=ok)  # no change of state (e.g. wake while awake)
    rows += _rows(_LIVE_ENGINE, ev.RpcFailed, None, effects=(D.ANSWER_RPC_ERROR,))
    rows += _rows(_LIVE_ENGINE, ev.EngineDied, E.DEAD, effects=(D.FAIL_PENDING_RPCS, D.FAIL_ALL_OPEN))
    rows += _rows([*_LIVE_ENGINE, E.DEAD], ev.Shutdown, E.STOPPED,
                  effects=(D.FAIL_PENDING_RPCS, D.ABORT_ALL_OPEN, D.STOP_ORCHESTRATOR, D.STOP_RUNTIMES))
    rows += _rows([E.STOPPED], ev.Shutdown, None)  # idempotent
    return rows


@attrs.frozen(repr=False)
class Spec:
    """A complete lifecycle specification: what the core, the machine and the explorer run.

    The canonical one is ``SPEC``; the test suite builds faulty variants of it (historic bugs
    re-injected) with ``attrs.evolve``. Its repr names it and counts its rows (the rows are
    ``rows`` and ``engine_rows``).
    """

    rows: tuple[Row, ...]
    engine_rows: tuple[Row, ...]
    on_terminal: tuple[Effect, ...] = ON_TERMINAL
    holds_slot: frozenset[ReqState] = HOLDS_SLOT
    name: str = "omni-fsm lifecycle"

    def __repr__(self) -> str:
        return f"<Spec {self.name!r}: {len(self.rows)} request rows, {len(self.engine_rows)} engine rows>"


#: The lifecycle specification: the request table and the engine's control-plane table.
SPEC = Spec(tuple(request_rows()), tuple(engine_rows()))

__all__ = ["ABORTABLE_BOUND", "MISS_POLICY", "ON_TERMINAL", "SPEC", "STAGE_LIVE", "Effect", "Miss", "Row", "Spec"]
