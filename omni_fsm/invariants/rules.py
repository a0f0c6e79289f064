"""The per-observation rules: one handler per observation type, judging it and updating the views.

``Monitor.step`` calls the handler of each observation the engine produced (``_HANDLERS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from omni_fsm.invariants import upstream as up
from omni_fsm.invariants.checks import (
    ABORT_ENDS,
    ABORT_PREFIX,
    ADMISSION,
    ANSWERS_CORRELATED,
    CACHE_FREED,
    COMMIT_AFTER_PHYSICAL,
    COMPANION_GATE,
    DEPENDENTS_INVISIBLE,
    DIFFUSION_WHOLE,
    FINISH_REASON,
    LAST_FINAL_TERMINAL,
    NEXT_LOGICAL_STAGE,
    NO_WORK_AFTER_TERMINAL,
    ONE_TERMINAL,
    PARENT_AFTER_CHILDREN,
    ROUTE_AFTER_FINISH,
    RPC_ERRORS,
    SHUTDOWN_ORDER,
    SLOTS,
    STAGE_ORDER,
    THROUGH_ADAPTER,
)
from omni_fsm.invariants.view import View
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import EngineState, Outcome, Role, StageKind

if TYPE_CHECKING:
    from omni_fsm.invariants.monitor import Monitor

_REASONS = {Outcome.FINISHED: {"stop", "length", "repetition"}, Outcome.ABORTED: {"abort"},
            Outcome.FAILED: {"error"}, Outcome.FATAL: {"error"}}


# -- per-observation rules ---------------------------------------------------------------------


def _on_submitted(m: Monitor, o: ob.Submitted) -> None:
    view = View(role=o.role, parent=o.parent, companions=o.companions,
                while_sleeping=m.engine is EngineState.SLEEPING)
    m.views[o.rid] = view
    parent = m._view(o.parent)
    if parent is not None and o.role is Role.CHILD:
        parent.children = (*parent.children, o.rid)
        parent.open_children += 1


def _working_view(m: Monitor, rid: int, what: str, stage: int) -> View | None:
    """Return the view of ``rid`` given work at ``stage`` (``None``: never seen); work after its terminal fails."""
    view = m._view(rid)
    if view is not None and view.over:
        m._fail(NO_WORK_AFTER_TERMINAL, rid, f"{what} {stage} after its terminal")
    return view


def _on_dispatched(m: Monitor, o: ob.Dispatched) -> None:
    view = _working_view(m, o.rid, "dispatched to stage", o.stage)
    if view is None:
        return
    if o.stage > 0 and view.forwarded_to != o.stage:
        m._fail(THROUGH_ADAPTER, o.rid, f"reached stage {o.stage} without a forward through its adapter")
    if o.stage == 0 and m.engine in (EngineState.PAUSED, EngineState.SLEEPING):
        m._fail(ADMISSION, o.rid, f"admitted while the engine is {m.engine.value}")
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, o.rid, "dispatched after the orchestrator stopped")
    view.stage, view.forwarded_to, view.generated, view.status = o.stage, -1, 0, up.WAITING


def _on_forwarded(m: Monitor, o: ob.Forwarded) -> None:
    view = _working_view(m, o.rid, "forwarded to stage", o.dst)
    if view is None:
        return
    if view.finished_at != o.src:
        m._fail(ROUTE_AFTER_FINISH, o.rid, f"forwarded from stage {o.src} before that stage finished it")
    if o.dst != o.src + 1 or o.dst >= len(m.kinds):
        m._fail(NEXT_LOGICAL_STAGE, o.rid, f"forwarded {o.src} -> {o.dst}; the next stage is {o.src + 1}")
    if view.companions_done < view.companions:
        m._fail(COMPANION_GATE, o.rid, f"forwarded with {view.companions_done}/{view.companions} companions done")
    view.forwarded_to = o.dst


def _on_emitted(m: Monitor, o: ob.Emitted) -> None:
    view = m._view(o.rid)
    if view is None or view.role is not Role.CLIENT:
        m._fail(DEPENDENTS_INVISIBLE, o.rid, "a message to the client for a request it never submitted")
        return
    is_sample_end = o.sample >= 0 and o.outcome is not None
    if o.finished and view.terminals:
        m._fail(ONE_TERMINAL, o.rid, "a second terminal")
    elif view.terminals:
        m._fail(STAGE_ORDER, o.rid, "a message after the terminal")
    last = view.last_emit_stage
    if o.sample >= 0:  # each sample's stream is ordered on its own
        stages = view.sample_stages + (-1,) * (o.sample + 1 - len(view.sample_stages))
        last = stages[o.sample]
        view.sample_stages = (*stages[: o.sample], max(last, o.stage), *stages[o.sample + 1 :])
    if o.stage < last:
        m._fail(STAGE_ORDER, o.rid, f"stage {o.stage} message after a stage {last} message")
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, o.rid, "a message after the orchestrator stopped")
    kind = m.kinds[o.stage] if 0 <= o.stage < len(m.kinds) else None
    partial = not o.finished and not o.stage_final
    if partial and kind is StageKind.DIFFUSION:
        m._fail(DIFFUSION_WHOLE, o.rid, "a partial diffusion output")
    if partial and view.abort_requested:
        m._fail(ABORT_ENDS, o.rid, "output after the abort was requested")
    if o.finished:
        _judge_terminal(m, o, view, kind)
    elif o.outcome is Outcome.ABORTED and not is_sample_end:
        m._fail(LAST_FINAL_TERMINAL, o.rid, "an abort message that is not the terminal")
    if o.sample < 0:
        view.last_emit_stage = max(view.last_emit_stage, o.stage)


def _judge_terminal(m: Monitor, o: ob.Emitted, view: View, kind: StageKind | None) -> None:
    if o.outcome is None or o.reason not in _REASONS[o.outcome]:
        m._fail(FINISH_REASON, o.rid, f"terminal with outcome {o.outcome} and finish reason {o.reason!r}")
    if view.open_children:
        m._fail(PARENT_AFTER_CHILDREN, o.rid, f"parent ended with {view.open_children} children still open")
    ignored_prompt = o.reason == "length" and o.cumulative == 0  # nothing generated: ends where it is
    if o.outcome is Outcome.FINISHED and o.stage != len(m.kinds) - 1 and not ignored_prompt:
        m._fail(LAST_FINAL_TERMINAL, o.rid, f"finished at stage {o.stage}, not at the last final-output stage")
    if view.while_sleeping and (o.outcome is not Outcome.FAILED or view.stage >= 0):
        m._fail(ADMISSION, o.rid, "submitted while sleeping but not refused with error")
    if o.outcome is Outcome.ABORTED and not view.children:
        if kind is StageKind.AR and m.final[o.stage] and view.stage == o.stage and o.cumulative != view.generated:
            m._fail(ABORT_PREFIX, o.rid, f"abort carries {o.cumulative} tokens of {view.generated} generated")
        if kind is StageKind.DIFFUSION and o.cumulative:
            m._fail(DIFFUSION_WHOLE, o.rid, "a diffusion abort carried a partial result")
    view.terminals += 1


def _on_abort_requested(m: Monitor, o: ob.AbortRequested) -> None:
    view = m._view(o.rid)
    if view is not None:
        view.abort_requested = True


def _on_abort_sent(m: Monitor, o: ob.AbortSent) -> None:
    view = m._view(o.rid)
    if view is not None:
        view.abort_sent, view.abort_ok = o.stage, False


def _on_abort_committed(m: Monitor, o: ob.AbortCommitted) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.abort_sent >= 0 and not view.abort_ok and view.finished_at != view.abort_sent:
        m._fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed before the physical abort at stage {view.abort_sent}")
    elif view.abort_sent < 0 and view.stage >= 0 and view.finished_at != view.stage:
        m._fail(COMMIT_AFTER_PHYSICAL, o.rid, f"committed with no physical abort at its stage {view.stage}")
    view.committed = True


def _on_abort_answered(m: Monitor, o: ob.AbortAnswered) -> None:
    view = m._view(o.rid)
    if view is None or not view.abort_requested:
        m._fail(ANSWERS_CORRELATED, o.rid, "an abort answer with no abort caller")
        return
    if not o.ok:
        view.abort_requested, view.abort_sent, view.abort_ok = False, -1, False


def _on_slot_taken(m: Monitor, o: ob.SlotTaken) -> None:
    view = _working_view(m, o.rid, "scheduled again at stage", o.stage)
    if view is None:
        return
    if view.slot >= 0 or o.stage != view.stage:
        m._fail(SLOTS, o.rid, f"took a slot at stage {o.stage} (holds {view.slot}, dispatched to {view.stage})")
    m.slots[o.stage] += 1
    if m.slots[o.stage] > m.capacity:
        m._fail(SLOTS, o.rid, f"stage {o.stage} holds {m.slots[o.stage]} slots, capacity {m.capacity}")
    view.slot = o.stage


def _on_slot_freed(m: Monitor, o: ob.SlotFreed) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.slot != o.stage:
        m._fail(SLOTS, o.rid, f"freed a slot at stage {o.stage} it did not hold")
    else:
        m.slots[o.stage] -= 1
    view.slot = -1


def _on_released(m: Monitor, o: ob.Released) -> None:
    view = m._view(o.rid)
    if view is None:
        return
    if view.slot >= 0:
        m._fail(CACHE_FREED, o.rid, f"state dropped while holding a slot at stage {view.slot}")
        m.slots[view.slot] -= 1
        view.slot = -1
    finished_companion = view.finished_at == 0
    view.settle()
    parent = m._view(view.parent)
    if parent is None:
        return
    if view.role is Role.CHILD:
        parent.open_children -= 1
    elif view.role is Role.COMPANION:
        if finished_companion:
            parent.companions_done += 1
        elif not parent.released and not parent.abort_requested and parent.terminals == 0:
            m._lost_companions.append(view.parent)  # the parent must fail in this very step


def _on_engine_changed(m: Monitor, o: ob.EngineChanged) -> None:
    m.engine = o.state


def _on_rpc_sent(m: Monitor, o: ob.RpcSent) -> None:
    m.rpcs[o.call_id] = o.method


def _on_rpc_answered(m: Monitor, o: ob.RpcAnswered) -> None:
    method = m.rpcs.pop(o.call_id, None)
    if method is None or method is not o.method:
        m._fail(ANSWERS_CORRELATED, None, f"answer to RPC {o.call_id} ({o.method.value}) matches no open call")
    elif not o.ok and not o.error:
        m._fail(RPC_ERRORS, None, f"RPC {o.call_id} failed without the worker's error")


def _on_orchestrator_stopped(m: Monitor, o: ob.OrchestratorStopped) -> None:
    if m.stopped:
        m._fail(SHUTDOWN_ORDER, None, "orchestrator stopped twice or after the runtimes")
    m.stopped = 1


def _on_runtimes_stopped(m: Monitor, o: ob.RuntimesStopped) -> None:
    if m.stopped != 1:
        m._fail(SHUTDOWN_ORDER, None, "runtimes stopped before the orchestrator")
    m.stopped = 2


_HANDLERS: dict[type, Callable[[Monitor, Any], None]] = {
    ob.Submitted: _on_submitted, ob.Dispatched: _on_dispatched, ob.Forwarded: _on_forwarded,
    ob.Emitted: _on_emitted, ob.AbortRequested: _on_abort_requested, ob.AbortSent: _on_abort_sent,
    ob.AbortCommitted: _on_abort_committed, ob.AbortAnswered: _on_abort_answered,
    ob.SlotTaken: _on_slot_taken, ob.SlotFreed: _on_slot_freed, ob.Released: _on_released,
    ob.EngineChanged: _on_engine_changed, ob.RpcSent: _on_rpc_sent, ob.RpcAnswered: _on_rpc_answered,
    ob.OrchestratorStopped: _on_orchestrator_stopped, ob.RuntimesStopped: _on_runtimes_stopped,
}
