"""The rules of the autoregressive runtime contract (AR-INV).

AR-INV-001: the AR sub-states a runtime reports follow upstream vLLM's transitions (``upstream``), and the
KV cache moves with them (a scheduled request holds a slot, a preempted one none).
AR-INV-002: a request reaches a later stage only through a forward (its input adapter).
AR-INV-003: a runtime's report is acted on only for the stage and the replica the request is assigned to.
AR-INV-200: a request's slot (its KV cache) is freed before its state is dropped.
Each is a judgment the request-state and cleanup rules call at the moment it applies.
"""

from __future__ import annotations

from omni_fsm.invariants import upstream as up
from omni_fsm.invariants.checks import AR_UPSTREAM, ASSIGNED_WORK, CACHE_FREED, THROUGH_ADAPTER
from omni_fsm.invariants.judge import Judge
from omni_fsm.invariants.view import View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import StageKind

_AR_STATUS: dict[type, str] = {
    ev.Scheduled: up.RUNNING, ev.Preempted: up.PREEMPTED, ev.AwaitGrammar: up.GRAMMAR,
    ev.AwaitRemoteKVs: up.REMOTE_KVS, ev.AwaitStreamingReq: up.STREAMING,
    ev.AwaitChunk: up.CHUNK, ev.InputReady: up.WAITING, ev.StageFinished: up.FINISHED,
}


def through_adapter(j: Judge, o: ob.Dispatched, view: View) -> None:
    """Judge a dispatch: past the first stage, only to the stage the request was just forwarded to."""
    if o.stage > 0 and view.forwarded_to != o.stage:
        j.fail(THROUGH_ADAPTER, o.rid, f"reached stage {o.stage} without a forward through its adapter")


def assigned_work(j: Judge, event: ev.StageEvent, view: View) -> bool:
    """Return whether a runtime's report is about the request's assigned stage; acting on another fails."""
    if event.stage != view.stage:
        j.fail(ASSIGNED_WORK, event.rid, f"{type(event).__name__} at stage {event.stage} acted on; "
                                         f"assigned stage is {view.stage}")
        return False
    return True


def assigned_replica(j: Judge, event: ev.StageEvent, view: View) -> None:
    """Judge a runtime's report acted on from a replica other than the one the request is bound to: a worker
    executes only the work assigned to it."""
    j.fail(ASSIGNED_WORK, event.rid, f"{type(event).__name__} from replica {event.replica} of stage {event.stage} "
                                     f"acted on; the request is bound to replica {view.replica}")


def upstream_status(j: Judge, event: ev.StageEvent, view: View, rejected: bool) -> None:
    """Judge the AR status a runtime's accepted report moves the request to; record it."""
    target = _AR_STATUS.get(type(event))
    if target is not None and not rejected and j.kinds[event.stage] is StageKind.AR:
        if not up.allowed(view.status, target):
            j.fail(AR_UPSTREAM, event.rid, f"{view.status} -> {target} ({type(event).__name__} at stage {event.stage}) "
                                           "is not an upstream transition")
        view.status = target


def cache_follows_status(j: Judge, event: ev.Scheduled | ev.Preempted) -> None:
    """Judge the end of the step of an accepted ``Scheduled`` or ``Preempted`` at an AR stage: the KV cache moved with
    the status, as upstream (scheduled: the request holds a slot there; preempted: it holds none)."""
    view = j.view(event.rid)
    if view is None or view.released or view.stage != event.stage or j.kinds[event.stage] is not StageKind.AR:
        return
    if isinstance(event, ev.Scheduled) and view.slot != event.stage:
        j.fail(AR_UPSTREAM, event.rid, f"scheduled at stage {event.stage} but holds no slot (KV cache) there")
    elif isinstance(event, ev.Preempted) and view.slot >= 0:
        j.fail(AR_UPSTREAM, event.rid, f"preempted but still holds its slot (KV cache) at stage {view.slot}")


def cache_freed(j: Judge, rid: int, view: View) -> None:
    """Judge a request's state being dropped: it holds no slot any more (a held one is freed here)."""
    if view.slot >= 0:
        j.fail(CACHE_FREED, rid, f"state dropped while holding a slot at stage {view.slot}")
        j.slots[view.slot] -= 1
        view.slot = -1
