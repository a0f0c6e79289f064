"""Historic bugs switched into our own lifecycle table: the monitor catches each, naming the invariant.

Each test takes the bug's faulty ``Spec`` (or effect) from ``tests/fsm/faults.py``, the one
definition of each re-injected bug, and drives it with a fixed event sequence.
"""

from __future__ import annotations

import pytest

from omni_fsm import SPEC, ControlMethod, StageKind, StopKind
from omni_fsm import events as ev
from omni_fsm.cli.explore import replay
from omni_fsm.engine.core import Lifecycle
from omni_fsm.explore.explorer import explore
from omni_fsm.invariants import Monitor, check_history
from tests.fsm import faults

AR = StageKind.AR


def _violated(spec, events, kinds=(AR,), final=(True,), capacity=4) -> set[str]:
    lc, monitor = Lifecycle(kinds, final, capacity, spec=spec), Monitor(kinds, final, capacity)
    for event in events:
        monitor.step(event, lc.handle(event))
    monitor.finish()
    return {v.invariant for v in monitor.violations}


def test_b1_b2_parent_abort_not_reaching_children():
    """B1/B2 (vllm#14326, #51629): the parent's abort does not reach its n>1 children / its record outlives them."""
    events = [ev.Submit(0, n=2), ev.Abort(0)]
    assert "ORCH-INV-203" in _violated(faults.b1_parent_abort_misses_children(), events)
    both_ended = [*events, ev.AbortDone(1, 0), ev.AbortDone(2, 0)]
    assert "ORCH-INV-203" in _violated(faults.b2_last_child_keeps_parent(), both_ended)
    assert _violated(SPEC, both_ended) == set()


def test_b7_b12_terminal_without_cleanup():
    """B7/B12 (vllm-omni#3312, #5373): a terminal path keeps the request's state."""
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.StageFinished(0, 0)]
    assert "ORCH-INV-208" in _violated(faults.b7_terminal_keeps_state(), events)
    assert _violated(SPEC, events) == set()


def test_b13_ignored_prompt_without_terminal(monkeypatch: pytest.MonkeyPatch):
    """B13 (vllm#19536): a prompt-too-long finish with no tokens never reaches the client.

    Only the empty terminal is skipped: a request that generated tokens still ends cleanly.
    """
    events = [ev.Submit(0), ev.StageFinished(0, 0, StopKind.IGNORED)]
    with_tokens = [ev.Submit(0), ev.Scheduled(0, 0), ev.StageOutput(0, 0, 3), ev.StageFinished(0, 0)]
    assert _violated(SPEC, events) == set()
    faults.b13_empty_terminal_skipped(monkeypatch)
    assert "ORCH-INV-101" in _violated(SPEC, events)
    assert _violated(SPEC, with_tokens) == set()


def test_b11_rpc_worker_error_ends_every_request():
    """B11 (vllm-omni#7685): a worker error in pause_scheduler takes the engine down."""
    events = [ev.Submit(0), ev.Control(1, ControlMethod.PAUSE_SCHEDULER), ev.RpcFailed(1, "Boom")]
    assert "ORCH-INV-205" in _violated(faults.b11_rpc_worker_error_kills_the_engine(), events)
    assert _violated(SPEC, [*events, ev.Scheduled(0, 0), ev.StageFinished(0, 0)]) == set()


def test_b9_engine_death_leaves_requests_hanging():
    """B9 (vllm-omni#322): a fatal engine failure does not end the in-flight requests."""
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.EngineDied()]
    assert "ORCH-INV-210" in _violated(faults.b9_engine_death_leaves_requests_open(), events)
    assert _violated(SPEC, events) == set()


def test_b5_abort_from_a_waiting_substate_never_lands():
    """B5 (vllm-omni#2848): abort of a request waiting for a chunk leaves it there: it is scheduled again.

    The request resumes when its chunk arrives and streams output after its abort (ORCH-INV-209).
    """
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.AwaitChunk(0, 0), ev.Abort(0),
              ev.InputReady(0, 0), ev.Scheduled(0, 0), ev.StageOutput(0, 0, 1)]  # fmt: skip
    assert "ORCH-INV-209" in _violated(faults.b5_abort_misses_chunk_wait(), events)
    assert _violated(SPEC, [*events, ev.AbortDone(0, 0)]) == set()


def test_b8_commit_before_physical_abort():
    """B8 (vllm-omni#6367): abort state committed (and the terminal sent) before the engine aborted."""
    events = [ev.Submit(0), ev.Scheduled(0, 0), ev.StageOutput(0, 0, 3), ev.Abort(0)]
    assert "ORCH-INV-202" in _violated(faults.b8_commit_before_physical_abort(), events)
    assert _violated(SPEC, [*events, ev.AbortDone(0, 0)]) == set()


def test_b4_parked_request_needing_a_second_slot_never_ends():
    """B4 (vllm#53130): a parked request counts against the cap and needs yet another slot to resume.

    Decided by the explorer, exhaustive at ``faults.B4_BOUND`` (one stage, one slot): on ``SPEC``
    every reachable state can still end every request; with the bug, parking in the only slot is a
    state from which no path ends the request (LIVENESS). That path, judged as a complete history,
    leaves the request without a terminal: the monitor names ORCH-INV-101 and ORCH-INV-208.
    """
    clean = explore(faults.B4_BOUND)
    assert clean.ok and clean.liveness_checked and clean.stuck is None
    spec = faults.b4_parked_needs_a_second_slot()
    stuck = explore(faults.B4_BOUND, spec=spec).stuck
    assert stuck is not None and stuck.invariant == "LIVENESS"
    assert stuck.events == (ev.Submit(0), ev.AwaitGrammar(0, 0))
    kinds, final = faults.B4_BOUND.pipeline()
    verdict = check_history(kinds, final, replay(faults.B4_BOUND, stuck.events, spec), faults.B4_BOUND.capacity)
    assert [(v.invariant, v.check, v.rid) for v in verdict] == [
        ("ORCH-INV-101", "one_terminal_per_request", 0), ("ORCH-INV-208", "no_state_after_terminal", 0)]
