"""What each ``Effect`` of the table does (the table says when), and whom an effect reaches.

An effect is part of the specification: it says which observation a transition makes and which
other requests it reaches, so a faulty variant of either is a ``Spec`` too. Effects run on a
``Context`` (the core's records, its engine and its queue of internal events, through public
names only). Request effects take ``(context, record, event, source state, observations out)``;
engine effects ``(context, event, observations out)``. They append observations and may queue
internal events; they never choose a row.

Every effect that reaches another request is declared in ``FAN_OUT``: whom it reaches
(``Reach``) and the event each reached request is sent, so the core runs one fan-out for all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.guards import fold_outcome
from omni_fsm.spec.record import Engine, Record, dependent_id
from omni_fsm.spec.vocabulary import (
    LIVE,
    STOP_REASON,
    TERMINAL_OUTCOME,
    FinishReason,
    IdentityHashedEnum,
    Outcome,
    ReqState,
    Role,
    StageKind,
)

Out = list[ob.Observation]


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
    ACK_ABORT = "ack_abort"  #: the abort is accepted (observable: abort requested); its caller is owed an answer
    REMEMBER_RESUME = "remember_resume"  #: keep the interrupted state for a failed abort
    FOLLOW_INTERRUPTED = "follow_interrupted"  #: move the interrupted state as this table says
    SEND_ABORT = "send_abort"  #: ask the bound stage to abort physically
    COMMIT_ABORT = "commit_abort"  #: commit the abort (only after the physical abort)
    ANSWER_ABORT_FAILED = "answer_abort_failed"  #: every abort caller learns it failed
    ABORT_CHILDREN = "abort_children"  #: a parent's abort reaches every open child
    ABORT_COMPANIONS = "abort_companions"  #: a parent's abort reaches every open companion
    # terminal entry actions
    EMIT_TERMINAL = "emit_terminal"  #: the one client-visible terminal (children: per sample)
    ANSWER_OPEN_ABORTS = "answer_open_aborts"  #: abort calls still owed are answered: ok if it ended aborted
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


class Context(Protocol):
    """What effects may use of the core that runs them."""

    records: dict[int, Record]
    engine: Engine

    def enqueue(self, event: ev.RequestEvent) -> None:
        """Queue an internal event, handled after the current one (in order)."""

    def release(self, rid: int) -> None:
        """Drop ``rid``'s record and free the dependent ids it owned."""

    def drain(self, out: Out) -> None:
        """Handle every queued internal event now, appending their observations to ``out``."""

    def crossed(self) -> None:
        """Count one effect that reached requests outside the acting request's family (``CROSSING``)."""


Fx = Callable[[Context, Record, Any, ReqState, Out], None]
EngineFx = Callable[[Context, Any, Out], None]


# -- whom an effect reaches ---------------------------------------------------------------------


class Reach(IdentityHashedEnum):
    """Which other requests a fan-out effect reaches; the value says it in words."""

    DEPENDENTS = "the request's open dependents (its n>1 samples or its CFG companions)"
    EVERY_OPEN = ("every open request: n>1 samples first (their parent ends after its last), then clients, then"
                  " companions")
    HELD = "every request held (PENDING) while the engine was paused, in id order"


_DEPENDENTS, _HELD = Reach.DEPENDENTS, Reach.HELD  # bound once, as the members below (``_CHILD``...)
#: The reaches that go beyond a request's own family (itself, its samples or companions, its parent): every
#: effect with one of them is counted as it runs (``Context.crossed``), so that whoever computes one family's
#: steps alone (the explorer's reduction) knows when that was not enough.
CROSSING: frozenset[Reach] = frozenset({Reach.EVERY_OPEN, Reach.HELD})
#: The order ``EVERY_OPEN`` reaches requests in, by role (then by id).
FAN_OUT_ORDER: tuple[Role, ...] = (Role.CHILD, Role.CLIENT, Role.COMPANION)
_RANK = {role: i for i, role in enumerate(FAN_OUT_ORDER)}
#: The state of a request held while the engine was paused (what ``HELD`` reaches).
HELD_STATE = ReqState.PENDING


@attrs.frozen
class FanOut:
    """A cross-request effect: whom it reaches and the internal event each reached request is sent."""

    reach: Reach
    event: type[ev.RequestEvent]
    #: the event is the acting request's own call (an ``Abort`` naming it as ``parent``): its answer is owed to it
    by_parent: bool = False


#: Every effect that reaches other requests (the child's or companion's notice to its parent is
#: ``NOTIFY_PARENT``, the one effect that reaches one request up instead of down).
FAN_OUT: Mapping[Effect, FanOut] = {
    Effect.ABORT_CHILDREN: FanOut(Reach.DEPENDENTS, ev.Abort, by_parent=True),
    Effect.ABORT_COMPANIONS: FanOut(Reach.DEPENDENTS, ev.Abort, by_parent=True),
    Effect.ABORT_DEPENDENTS: FanOut(Reach.DEPENDENTS, ev.Abort, by_parent=True),
    Effect.FAIL_ALL_OPEN: FanOut(Reach.EVERY_OPEN, ev.EngineFailed),
    Effect.ABORT_ALL_OPEN: FanOut(Reach.EVERY_OPEN, ev.ShutdownAbort),
    Effect.ADMIT_HELD: FanOut(Reach.HELD, ev.Admit),
}


def reached(ctx: Context, rec: Record | None, reach: Reach) -> Sequence[int]:
    """Return the ids ``reach`` reaches, in order (``rec``: the request whose effect it is, if any)."""
    records = ctx.records
    if reach is _DEPENDENTS:
        if rec is None or not rec.fanout:  # most requests own no dependents (every terminal asks: no new list)
            return ()
        dependents = (records.get(dependent_id(rec.rid, k)) for k in range(rec.fanout))
        return [d.rid for d in dependents if d is not None and d.state in LIVE]  # open: one that ended is not
    if reach is _HELD:
        return [rid for rid, r in sorted(records.items()) if r.state is HELD_STATE]
    # every *other* open request (the request whose row it is has moved already; one that ended is not open)
    own = -1 if rec is None else rec.rid
    return [rid for rid, r in sorted(records.items(), key=lambda kv: (_RANK[kv[1].role], kv[0]))
            if rid != own and r.state in LIVE]  # fmt: skip


def fan_out_effect(fan_out: FanOut) -> Fx:
    """Return the request effect that sends ``fan_out.event`` to every request it reaches."""
    make, reach = fan_out.event, fan_out.reach

    crossing, by_parent, drains = reach in CROSSING, fan_out.by_parent, reach is Reach.EVERY_OPEN

    def effect(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
        if crossing:
            ctx.crossed()
        for rid in reached(ctx, rec, reach):
            ctx.enqueue(make(rid, parent=rec.rid) if by_parent else make(rid))  # type: ignore[call-arg]
        if drains:
            ctx.drain(out)  # every open request ends before the next effect

    return effect


def fan_out_engine_effect(fan_out: FanOut) -> EngineFx:
    """Return the engine effect that sends ``fan_out.event`` to every request it reaches."""
    make, reach = fan_out.event, fan_out.reach

    crossing, drains = reach in CROSSING, reach is Reach.EVERY_OPEN

    def effect(ctx: Context, event: Any, out: Out) -> None:
        if crossing:
            ctx.crossed()
        for rid in reached(ctx, None, reach):
            ctx.enqueue(make(rid))
        if drains:
            ctx.drain(out)  # every open request ends before the engine's next effect

    return effect


# -- request effects ------------------------------------------------------------------------------

# The members the effects compare with, bound once (an effect runs on most events; on Python 3.11 reading
# ``Kind.MEMBER`` passes through ``EnumType.__getattr__``'s hook, about ten times the cost of a module global).
_CLIENT, _CHILD, _COMPANION = Role.CLIENT, Role.CHILD, Role.COMPANION
_FINISHED, _ABORTED, _AR, _STOP = Outcome.FINISHED, Outcome.ABORTED, StageKind.AR, FinishReason.STOP
#: the stage a request spawned in each role ends at: a companion at stage 0 (it conditions the parent's first
#: stage), a sample where its parent ends
_COMPANION_LAST_STAGE = 0
#: States of an ``n>1`` parent: its terminal is at the last stage, where its samples ended.
PARENTS: frozenset[ReqState] = frozenset({ReqState.AWAITING_CHILDREN, ReqState.ABORTING_CHILDREN})


def client_of(rec: Record) -> tuple[int, int]:
    """Return whom a record's outputs reach: ``(client id, sample index)`` (``-1``: not a sample)."""
    return (rec.parent, rec.sample) if rec.role is _CHILD else (rec.rid, -1)


def spawn(ctx: Context, parent: Record, role: Role, count: int, out: Out) -> None:
    """Create ``count`` dependents of ``parent`` in ``role`` and queue their submits."""
    last = _COMPANION_LAST_STAGE if role is _COMPANION else parent.last_stage
    for k in range(count):
        rid = dependent_id(parent.rid, k)
        ctx.records[rid] = Record(rid, role=role, parent=parent.rid, last_stage=last, sample=k)
        out.append(ob.Submitted(rid, role, parent.rid))
        ctx.enqueue(ev.Submit(rid))


def _dispatch(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    out.append(ob.Dispatched(rec.rid, rec.stage))


def _spawn_children(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    spawn(ctx, rec, _CHILD, rec.fanout, out)


def _spawn_companions(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    spawn(ctx, rec, _COMPANION, rec.companions_left, out)


def _accumulate(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.tokens += event.tokens


def _emit_partial(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    if rec.role is _CHILD:  # a sample's outputs reach its parent's client (``client_of``, spelt out: the hot path)
        out.append(ob.Emitted(rec.parent, rec.stage, event.tokens, rec.tokens, sample=rec.sample))
    else:
        out.append(ob.Emitted(rec.rid, rec.stage, event.tokens, rec.tokens))


def _emit_stage_final(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    client, sample = client_of(rec)
    stop = getattr(event, "stop", None)  # a stage's finish says how; a companion's gate opening is a plain stop
    reason = _STOP if stop is None else STOP_REASON[stop]
    out.append(ob.Emitted(client, rec.stage, 0, rec.tokens, stage_final=True, reason=reason, sample=sample))


def _forward(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    src = rec.stage
    rec.stage, rec.tokens = src + 1, 0
    out.append(ob.Forwarded(rec.rid, src, src + 1))
    out.append(ob.Dispatched(rec.rid, src + 1))


def _note_child(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.children_left -= 1
    rec.worst = fold_outcome(rec.worst, event.outcome)


def _note_companion(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.companions_left -= 1


def _note_companion_lost(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.worst = ReqState.FINISHED_ERROR


def abort_caller(event: ev.Abort) -> int | None:
    """Return whom an abort's answer is owed to, as ``Record.abort_calls`` keeps it: the client's call id, or
    ``None`` for the parent's abort of its dependent."""
    return event.call_id if event.parent is None else None


def answer_aborts(rec: Record, ok: bool, out: Out) -> None:
    """Answer every abort call ``rec`` owes (the client's, by call id, then its parent's), and owe none."""
    for call in sorted(rec.abort_calls, key=lambda c: (c is None, c or 0)):
        out.append(ob.AbortAnswered(rec.rid, ok, call, None) if call is not None
                   else ob.AbortAnswered(rec.rid, ok, None, rec.parent))
    rec.abort_calls = frozenset()


def _ack_abort(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    caller = abort_caller(event)
    rec.abort_calls = rec.abort_calls | {caller}
    out.append(ob.AbortRequested(rec.rid, caller, event.parent))


def _remember_resume(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.resume = source


def _send_abort(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    out.append(ob.AbortSent(rec.rid, rec.stage))


def _commit_abort(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    out.append(ob.AbortCommitted(rec.rid))
    answer_aborts(rec, True, out)


def _answer_abort_failed(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.resume = None
    answer_aborts(rec, False, out)


def _answer_open_aborts(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    if rec.abort_calls:  # overtaken (a failure, the engine's death, a shutdown, samples ending otherwise)
        answer_aborts(rec, TERMINAL_OUTCOME[rec.state][0] is _ABORTED, out)


def _emit_terminal(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    outcome, reason = TERMINAL_OUTCOME[rec.state]
    eng = ctx.engine
    keeps_prefix = eng.kinds[rec.stage] is _AR and eng.final[rec.stage]
    cumulative = rec.tokens if (outcome is not _ABORTED or keeps_prefix) else 0
    if rec.role is _CLIENT:  # an n>1 parent ends where its samples ended: the last stage
        stage = rec.last_stage if source in PARENTS else rec.stage
        out.append(ob.Emitted(rec.rid, stage, 0, cumulative, finished=True, outcome=outcome, reason=reason))
    elif rec.role is _CHILD:  # one sample ends; the parent's terminal comes after the last
        out.append(ob.Emitted(rec.parent, rec.stage, 0, cumulative, stage_final=True, outcome=outcome,
                              reason=reason, sample=rec.sample))


def _notify_parent(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    if rec.role is _CHILD:
        ctx.enqueue(ev.ChildEnded(rec.parent, rec.state))
    elif rec.role is _COMPANION:
        ok = TERMINAL_OUTCOME[rec.state][0] is _FINISHED
        ctx.enqueue(ev.CompanionEnded(rec.parent, ok))


def _release(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    ctx.release(rec.rid)
    out.append(ob.Released(rec.rid))


def follow_interrupted(target: ReqState) -> Fx:
    """Return ``FOLLOW_INTERRUPTED`` for a row whose ``resume_to`` is ``target``: while aborting, the
    scheduler may still move the request, and the interrupted state moves as the table says."""
    def effect(ctx: Context, rec: Record, event: Any, source: ReqState, out: Out) -> None:
        rec.resume = target

    return effect


#: request effect -> what it does (the fan-out ones: ``FAN_OUT``; ``FOLLOW_INTERRUPTED``: per row)
EFFECTS: dict[Effect, Fx] = {
    Effect.DISPATCH: _dispatch,
    Effect.SPAWN_CHILDREN: _spawn_children,
    Effect.SPAWN_COMPANIONS: _spawn_companions,
    Effect.ACCUMULATE: _accumulate,
    Effect.EMIT_PARTIAL: _emit_partial,
    Effect.EMIT_STAGE_FINAL: _emit_stage_final,
    Effect.FORWARD: _forward,
    Effect.NOTE_CHILD: _note_child,
    Effect.NOTE_COMPANION: _note_companion,
    Effect.NOTE_COMPANION_LOST: _note_companion_lost,
    Effect.ACK_ABORT: _ack_abort,
    Effect.REMEMBER_RESUME: _remember_resume,
    Effect.SEND_ABORT: _send_abort,
    Effect.COMMIT_ABORT: _commit_abort,
    Effect.ANSWER_ABORT_FAILED: _answer_abort_failed,
    Effect.EMIT_TERMINAL: _emit_terminal,
    Effect.ANSWER_OPEN_ABORTS: _answer_open_aborts,
    Effect.NOTIFY_PARENT: _notify_parent,
    Effect.RELEASE: _release,
}


# -- engine (control-plane) effects -----------------------------------------------------------------

#: why in-flight RPC callers are answered with an error, by the event that ended the engine
RPC_FAILURE_WHY: Mapping[type[ev.Event], str] = {ev.EngineDied: "engine died", ev.Shutdown: "engine shut down"}


def _send_rpc(ctx: Context, event: Any, out: Out) -> None:
    ctx.engine.pending_rpcs[event.call_id] = (event.method, event.level, event.tags)
    out.append(ob.RpcSent(event.call_id, event.method))


def _answer_rpc(ctx: Context, event: Any, out: Out) -> None:
    method = ctx.engine.pending_rpcs.pop(event.call_id)[0]
    error = getattr(event, "error", None)  # a worker's exception (RpcFailed), or none: every worker answered
    out.append(ob.RpcAnswered(event.call_id, method, error is None, error))


def _note_sleep(ctx: Context, event: Any, out: Out) -> None:
    _, level, tags = ctx.engine.pending_rpcs[event.call_id]
    ctx.engine.sleep_level = max(ctx.engine.sleep_level, level)
    ctx.engine.sleep_tags = ctx.engine.sleep_tags | (tags or frozenset({"*"}))


def _note_wake(ctx: Context, event: Any, out: Out) -> None:
    tags = ctx.engine.pending_rpcs[event.call_id][2]
    left = frozenset() if not tags or "*" in tags else ctx.engine.sleep_tags - tags
    ctx.engine.sleep_tags = left
    if not left:
        ctx.engine.sleep_level = 0


def _fail_pending_rpcs(ctx: Context, event: Any, out: Out) -> None:
    why = RPC_FAILURE_WHY[event.__class__]
    for call_id, (method, _, _) in sorted(ctx.engine.pending_rpcs.items()):
        out.append(ob.RpcAnswered(call_id, method, False, why))
    ctx.engine.pending_rpcs.clear()


def _stop_orchestrator(ctx: Context, event: Any, out: Out) -> None:
    out.append(ob.OrchestratorStopped())


def _stop_runtimes(ctx: Context, event: Any, out: Out) -> None:
    out.append(ob.RuntimesStopped())


#: engine (control-plane) effect -> what it does (the fan-out ones: ``FAN_OUT``)
ENGINE_EFFECTS: dict[Effect, EngineFx] = {
    Effect.SEND_RPC: _send_rpc,
    Effect.ANSWER_RPC: _answer_rpc,
    Effect.ANSWER_RPC_ERROR: _answer_rpc,
    Effect.NOTE_SLEEP: _note_sleep,
    Effect.NOTE_WAKE: _note_wake,
    Effect.FAIL_PENDING_RPCS: _fail_pending_rpcs,
    Effect.STOP_ORCHESTRATOR: _stop_orchestrator,
    Effect.STOP_RUNTIMES: _stop_runtimes,
}

__all__ = ["EFFECTS", "ENGINE_EFFECTS", "FAN_OUT", "FAN_OUT_ORDER", "HELD_STATE", "PARENTS", "RPC_FAILURE_WHY",
           "Context", "Effect", "EngineFx", "FanOut", "Fx", "Out", "Reach", "abort_caller", "answer_aborts",
           "client_of", "fan_out_effect", "fan_out_engine_effect", "follow_interrupted", "reached",
           "spawn"]  # fmt: skip
