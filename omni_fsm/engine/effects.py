"""What each ``Effect`` of the table does (the table says when): functions over the core's records.

Request effects take ``(lifecycle, record, event, source state, observations out)``; engine
effects ``(lifecycle, event, observations out)``. They append observations and may queue
internal events on the lifecycle; they never choose a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.guards import fold_outcome
from omni_fsm.spec.record import Record
from omni_fsm.spec.table import PARENTS, Effect
from omni_fsm.spec.vocabulary import STOP_REASON, TERMINAL_OUTCOME, Outcome, ReqState, Role, StageKind

if TYPE_CHECKING:
    from omni_fsm.engine.core import Lifecycle

Out = list[ob.Observation]

#: the finish reasons as text, looked up once (an Enum's ``.value`` is a slow property)
_STOP_TEXT = {stop: reason.value for stop, reason in STOP_REASON.items()}
_TERMINAL_TEXT = {state: (outcome, reason.value) for state, (outcome, reason) in TERMINAL_OUTCOME.items()}

Fx = Callable[["Lifecycle", Record, Any, ReqState, Out], None]


def _emit_partial(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    client, sample = lc._client_of(rec)
    out.append(ob.Emitted(client, rec.stage, event.tokens, rec.tokens, sample=sample))


def _emit_stage_final(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    client, sample = lc._client_of(rec)
    reason = _STOP_TEXT[event.stop] if event.__class__ is ev.StageFinished else "stop"
    out.append(ob.Emitted(client, rec.stage, 0, rec.tokens, stage_final=True, reason=reason, sample=sample))


def _forward(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    src = rec.stage
    rec.stage, rec.tokens = src + 1, 0
    out.append(ob.Forwarded(rec.rid, src, src + 1))
    out.append(ob.Dispatched(rec.rid, src + 1))


def _send_abort(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    out.append(ob.AbortSent(rec.rid, rec.stage))


def _commit_abort(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    out.append(ob.AbortCommitted(rec.rid))
    out.append(ob.AbortAnswered(rec.rid, True))


def _answer_abort_failed(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.resume = None
    out.append(ob.AbortAnswered(rec.rid, False))


def _abort_each(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    if not rec.fanout:  # most requests own no dependents
        return
    for dep in lc._dependents(rec):
        lc._queue.append(ev.Abort(dep))


def _emit_terminal(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    outcome, reason = _TERMINAL_TEXT[rec.state]
    eng = lc.engine
    keeps_prefix = eng.kinds[rec.stage] is StageKind.AR and eng.final[rec.stage]
    cumulative = rec.tokens if (outcome is not Outcome.ABORTED or keeps_prefix) else 0
    if rec.role is Role.CLIENT:  # an n>1 parent ends where its samples ended: the last stage
        stage = rec.last_stage if source in PARENTS else rec.stage
        out.append(ob.Emitted(rec.rid, stage, 0, cumulative, finished=True, outcome=outcome, reason=reason))
    elif rec.role is Role.CHILD:  # one sample ends; the parent's terminal comes after the last
        out.append(ob.Emitted(rec.parent, rec.stage, 0, cumulative, stage_final=True, outcome=outcome,
                              reason=reason, sample=rec.sample))


def _notify_parent(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    if rec.role is Role.CHILD:
        lc._queue.append(ev.ChildEnded(rec.parent, rec.state))
    elif rec.role is Role.COMPANION:
        ok = TERMINAL_OUTCOME[rec.state][0] is Outcome.FINISHED
        lc._queue.append(ev.CompanionEnded(rec.parent, ok))


def follow_interrupted(target: ReqState) -> Fx:
    """Return ``FOLLOW_INTERRUPTED`` for a row whose ``resume_to`` is ``target``: while aborting, the
    scheduler may still move the request, and the interrupted state moves as the table says."""
    def effect(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
        rec.resume = target

    return effect


def _release(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    del lc.records[rec.rid]
    out.append(ob.Released(rec.rid))


def _accumulate(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
    rec.tokens += event.tokens


def _set(**fields: Callable[[Record, Any, ReqState], Any]) -> Fx:
    def effect(lc: Lifecycle, rec: Record, event: Any, source: ReqState, out: Out) -> None:
        for name, value in fields.items():
            setattr(rec, name, value(rec, event, source))

    return effect


#: request effect -> what it does
EFFECTS: dict[Effect, Fx] = {
    Effect.DISPATCH: lambda lc, rec, e, s, out: out.append(ob.Dispatched(rec.rid, rec.stage)),
    Effect.SPAWN_CHILDREN: lambda lc, rec, e, s, out: lc._spawn(rec, Role.CHILD, rec.fanout, out),
    Effect.SPAWN_COMPANIONS: lambda lc, rec, e, s, out: lc._spawn(rec, Role.COMPANION, rec.companions_left, out),
    Effect.ACCUMULATE: _accumulate,
    Effect.EMIT_PARTIAL: _emit_partial,
    Effect.EMIT_STAGE_FINAL: _emit_stage_final,
    Effect.FORWARD: _forward,
    Effect.NOTE_CHILD: _set(children_left=lambda r, e, s: r.children_left - 1,
                            worst=lambda r, e, s: fold_outcome(r.worst, e.outcome)),
    Effect.NOTE_COMPANION: _set(companions_left=lambda r, e, s: r.companions_left - 1),
    Effect.NOTE_COMPANION_LOST: _set(worst=lambda r, e, s: ReqState.FINISHED_ERROR),
    Effect.ACK_ABORT: lambda lc, rec, e, s, out: out.append(ob.AbortRequested(rec.rid)),
    Effect.REMEMBER_RESUME: _set(resume=lambda r, e, s: s),
    Effect.SEND_ABORT: _send_abort,
    Effect.COMMIT_ABORT: _commit_abort,
    Effect.ANSWER_ABORT_FAILED: _answer_abort_failed,
    Effect.ABORT_CHILDREN: _abort_each,
    Effect.ABORT_COMPANIONS: _abort_each,
    Effect.EMIT_TERMINAL: _emit_terminal,
    Effect.NOTIFY_PARENT: _notify_parent,
    Effect.ABORT_DEPENDENTS: _abort_each,
    Effect.RELEASE: _release,
}

EngineFx = Callable[["Lifecycle", Any, Out], None]


def _send_rpc(lc: Lifecycle, event: Any, out: Out) -> None:
    lc.engine.pending_rpcs[event.call_id] = (event.method, event.level, event.tags)
    out.append(ob.RpcSent(event.call_id, event.method))


def _answer_rpc(lc: Lifecycle, event: Any, out: Out) -> None:
    method = lc.engine.pending_rpcs.pop(event.call_id)[0]
    failed = isinstance(event, ev.RpcFailed)
    out.append(ob.RpcAnswered(event.call_id, method, not failed, event.error if failed else None))


def _note_sleep(lc: Lifecycle, event: Any, out: Out) -> None:
    _, level, tags = lc.engine.pending_rpcs[event.call_id]
    lc.engine.sleep_level = max(lc.engine.sleep_level, level)
    lc.engine.sleep_tags = lc.engine.sleep_tags | (tags or frozenset({"*"}))


def _note_wake(lc: Lifecycle, event: Any, out: Out) -> None:
    tags = lc.engine.pending_rpcs[event.call_id][2]
    left = frozenset() if not tags or "*" in tags else lc.engine.sleep_tags - tags
    lc.engine.sleep_tags = left
    if not left:
        lc.engine.sleep_level = 0


def _fail_pending_rpcs(lc: Lifecycle, event: Any, out: Out) -> None:
    why = "engine died" if isinstance(event, ev.EngineDied) else "engine shut down"
    for call_id, (method, _, _) in sorted(lc.engine.pending_rpcs.items()):
        out.append(ob.RpcAnswered(call_id, method, False, why))
    lc.engine.pending_rpcs.clear()


def _fan_out(make: Callable[[int], ev.RequestEvent]) -> EngineFx:
    def effect(lc: Lifecycle, event: Any, out: Out) -> None:
        # n>1 children first (their parent ends with its last child), then clients, then companions
        order = sorted(lc.records.items(), key=lambda kv: (_FAN_OUT_ORDER[kv[1].role], kv[0]))
        for rid, _ in order:
            lc._queue.append(make(rid))
        lc._drain(out)  # every open request ends before the engine's next effect

    return effect


_FAN_OUT_ORDER = {Role.CHILD: 0, Role.CLIENT: 1, Role.COMPANION: 2}


def _admit_held(lc: Lifecycle, event: Any, out: Out) -> None:
    for rid, rec in sorted(lc.records.items()):
        if rec.state is ReqState.PENDING:
            lc._queue.append(ev.Admit(rid))


#: engine (control-plane) effect -> what it does
ENGINE_EFFECTS: dict[Effect, EngineFx] = {
    Effect.SEND_RPC: _send_rpc,
    Effect.ANSWER_RPC: _answer_rpc,
    Effect.ANSWER_RPC_ERROR: _answer_rpc,
    Effect.NOTE_SLEEP: _note_sleep,
    Effect.NOTE_WAKE: _note_wake,
    Effect.ADMIT_HELD: _admit_held,
    Effect.FAIL_ALL_OPEN: _fan_out(ev.EngineFailed),
    Effect.FAIL_PENDING_RPCS: _fail_pending_rpcs,
    Effect.ABORT_ALL_OPEN: _fan_out(ev.ShutdownAbort),
    Effect.STOP_ORCHESTRATOR: lambda lc, e, out: out.append(ob.OrchestratorStopped()),
    Effect.STOP_RUNTIMES: lambda lc, e, out: out.append(ob.RuntimesStopped()),
}
