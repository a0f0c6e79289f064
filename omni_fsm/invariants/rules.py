"""Which rule judges what, and when: the one place that dispatches a step to the rules of each section.

The rules live in one module per contract section: ``rules_routing`` (ORCH-INV-001..099),
``rules_lifecycle`` (100..199), ``rules_failure`` (200..299), ``rules_shutdown`` (300..399) and
``rules_ar`` (AR-INV). ``Monitor.step`` hands each step to them through this module: a runtime's
report to :func:`judge_report`, each observation to its rule in ``OBSERVATION_RULES`` (and, once the
orchestrator stopped, to :func:`judge_after_stop` first), then the
whole step to :func:`judge_step`; ``Monitor.finish`` hands the end of a history to :func:`judge_end`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from omni_fsm.invariants import rules_ar as ar
from omni_fsm.invariants import rules_failure as failure
from omni_fsm.invariants import rules_lifecycle as lifecycle
from omni_fsm.invariants import rules_routing as routing
from omni_fsm.invariants import rules_shutdown as shutdown
from omni_fsm.invariants.judge import Judge
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob

#: the rule that judges each observation type and takes in what it says (none: nothing to judge)
OBSERVATION_RULES: dict[type, Callable[[Judge, Any], None]] = {
    ob.Submitted: lifecycle.on_submitted, ob.Dispatched: lifecycle.on_dispatched, ob.Emitted: lifecycle.on_emitted,
    ob.SlotTaken: lifecycle.on_slot_taken, ob.SlotFreed: lifecycle.on_slot_freed,
    ob.EngineChanged: lifecycle.on_engine_changed, ob.RpcSent: lifecycle.on_rpc_sent,
    ob.RpcAnswered: lifecycle.on_rpc_answered, ob.AbortAnswered: lifecycle.on_abort_answered,
    ob.Forwarded: routing.on_forwarded,
    ob.AbortRequested: failure.on_abort_requested, ob.AbortSent: failure.on_abort_sent,
    ob.AbortCommitted: failure.on_abort_committed, ob.Released: failure.on_released,
    ob.OrchestratorStopped: shutdown.on_orchestrator_stopped, ob.RuntimesStopped: shutdown.on_runtimes_stopped,
}

#: a runtime's report about a request at a stage, judged before the step's observations
judge_report = lifecycle.on_report
#: a client's abort call the step did not drop, taken in before the step's observations (they may answer it)
judge_call = lifecycle.on_abort_call
#: each observation made once the orchestrator stopped, judged before its own rule
judge_after_stop = shutdown.after_stop

_REQUEST_FAILURES = (ev.StageFailed, ev.ReplicaLost, ev.StageAborted)


def judge_step(j: Judge, event: ev.Event, outputs: Sequence[ob.Observation], dropped: bool,
               terminal_rids: list[int], rejected: bool) -> None:
    """Judge a whole step: the rule its input event calls for, then the rules about the end of every step."""
    if isinstance(event, ev.RequestEvent) and not dropped and terminal_rids:  # an event about one request ends
        failed = rejected or isinstance(event, _REQUEST_FAILURES)   # only requests of its family
        failure.after_request_event(j, event, outputs, "a failure" if failed else type(event).__name__)
    if isinstance(event, ev.RpcFailed):
        failure.after_rpc_failed(j, event, outputs, dropped, terminal_rids)
    elif isinstance(event, ev.RpcDone) and not dropped:
        lifecycle.after_rpc_done(j, event, outputs)
    elif isinstance(event, ev.EngineDied):
        failure.after_engine_died(j, outputs)
    elif isinstance(event, ev.Shutdown):
        failure.after_shutdown(j, outputs)
    elif isinstance(event, ev.Abort) and any(isinstance(o, ob.AbortRequested) and o.rid == event.rid
                                             for o in outputs):
        failure.after_abort(j, event.rid, outputs)
    elif isinstance(event, ev.AbortDone) and not dropped and not rejected:  # rejected: no physical abort succeeded
        failure.after_abort_done(j, event, outputs)
    if isinstance(event, (ev.Scheduled, ev.Preempted)) and not dropped and not rejected:
        ar.cache_follows_status(j, event)
    failure.end_of_step(j, outputs, terminal_rids)


def judge_end(j: Judge) -> None:
    """Judge the end of a complete history (everything drained): the control plane, then request by request."""
    lifecycle.rpcs_at_end(j)
    shutdown.at_end(j)
    for rid, view in sorted(j.views.items()):
        lifecycle.at_end(j, rid, view)
        failure.at_end(j, rid, view)
