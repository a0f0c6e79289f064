"""Historic bugs switched into our own lifecycle table: the monitor catches each, naming the invariant.

Each test builds a faulty ``Spec`` with ``attrs.evolve`` and drives it with a fixed event sequence.
"""

from __future__ import annotations

import attrs

from omni_fsm import SPEC, ControlMethod, Effect, ReqState, StageKind, StopKind
from omni_fsm import events as ev
from omni_fsm.core import Lifecycle
from omni_fsm.invariants import Monitor

AR = StageKind.AR


def _violated(spec, events, kinds=(AR,), final=(True,), capacity=4) -> set[str]:
    lc, monitor = Lifecycle(kinds, final, capacity, spec=spec), Monitor(kinds, final, capacity)
    for event in events:
        monitor.step(event, lc.handle(event))
    monitor.finish()
    return {v.invariant for v in monitor.violations}


def _without(rows, source, event, effect):
    return tuple(attrs.evolve(r, effects=tuple(e for e in r.effects if e is not effect))
                 if r.source is source and r.event is event else r for r in rows)  # fmt: skip


def test_b1_b2_parent_abort_not_reaching_children():
    """B1/B2 (vllm#14326, #51629): the parent's abort does not reach its n>1 children."""
    faulty = attrs.evolve(SPEC, rows=_without(SPEC.rows, ReqState.AWAITING_CHILDREN, ev.Abort, Effect.ABORT_CHILDREN))
    events = [ev.Submit(0, n=2), ev.Abort(0)]
    assert "ORCH-INV-203" in _violated(faulty, events)
    assert _violated(SPEC, [*events, ev.AbortDone(1, 0), ev.AbortDone(2, 0)]) == set()


def test_b7_b12_terminal_without_cleanup():
    """B7/B12 (vllm-omni#3312, #5373): a terminal path keeps the request's state."""
    faulty = attrs.evolve(SPEC, on_terminal=tuple(e for e in SPEC.on_terminal if e is not Effect.RELEASE))
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.StageFinished(0, 0)]
    assert "ORCH-INV-208" in _violated(faulty, events)
    assert _violated(SPEC, events) == set()


def test_b13_ignored_prompt_without_terminal():
    """B13 (vllm#19536): a prompt-too-long finish with no tokens never reaches the client."""
    faulty = attrs.evolve(SPEC, on_terminal=tuple(e for e in SPEC.on_terminal if e is not Effect.EMIT_TERMINAL))
    events = [ev.Submit(0), ev.StageFinished(0, 0, StopKind.IGNORED)]
    assert "ORCH-INV-101" in _violated(faulty, events)
    assert _violated(SPEC, events) == set()


def test_b11_rpc_worker_error_ends_every_request():
    """B11 (vllm-omni#7685): a worker error in pause_scheduler takes the engine down."""
    rows = tuple(attrs.evolve(r, target=r.source.__class__.DEAD, effects=(*r.effects, Effect.FAIL_ALL_OPEN))
                 if r.event is ev.RpcFailed else r for r in SPEC.engine_rows)  # fmt: skip
    events = [ev.Submit(0), ev.Control(1, ControlMethod.PAUSE_SCHEDULER), ev.RpcFailed(1, "Boom")]
    assert "ORCH-INV-205" in _violated(attrs.evolve(SPEC, engine_rows=rows), events)
    assert _violated(SPEC, [*events, ev.Scheduled(0, 0), ev.StageFinished(0, 0)]) == set()


def test_b9_engine_death_leaves_requests_hanging():
    """B9 (vllm-omni#322): a fatal engine failure does not end the in-flight requests."""
    rows = tuple(attrs.evolve(r, effects=tuple(e for e in r.effects if e is not Effect.FAIL_ALL_OPEN))
                 if r.event is ev.EngineDied else r for r in SPEC.engine_rows)  # fmt: skip
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.EngineDied()]
    assert "ORCH-INV-210" in _violated(attrs.evolve(SPEC, engine_rows=rows), events)
    assert _violated(SPEC, events) == set()


def test_b5_abort_from_a_waiting_substate_never_lands():
    """B5 (vllm-omni#2848): abort of a request waiting for a chunk never reaches the scheduler.

    The stage's abort result then commits an abort that was never sent to it (ORCH-INV-202).
    """
    faulty = attrs.evolve(SPEC, rows=_without(SPEC.rows, ReqState.WAITING_FOR_CHUNK, ev.Abort, Effect.SEND_ABORT))
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.AwaitChunk(0, 0), ev.Abort(0), ev.AbortDone(0, 0)]
    assert "ORCH-INV-202" in _violated(faulty, events)
    assert _violated(SPEC, events) == set()


def test_b8_commit_before_physical_abort():
    """B8 (vllm-omni#6367): abort state committed (and the terminal sent) before the engine aborted."""
    early = (Effect.ACK_ABORT, Effect.SEND_ABORT, Effect.COMMIT_ABORT)
    rows = tuple(attrs.evolve(r, target=ReqState.FINISHED_ABORTED, effects=early)
                 if r.source is ReqState.RUNNING and r.event is ev.Abort else r for r in SPEC.rows)  # fmt: skip
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.StageOutput(0, 0, 3), ev.Abort(0)]
    assert "ORCH-INV-202" in _violated(attrs.evolve(SPEC, rows=rows), events)
    assert _violated(SPEC, [*events, ev.AbortDone(0, 0)]) == set()
