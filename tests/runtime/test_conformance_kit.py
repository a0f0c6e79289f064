"""The conformance kit passes the simulator and fails each deliberately faulty runtime, naming the invariant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from faulty_runtimes import (
    FAULTY,
    AbortMissesChunkWait,
    DiesAtOnce,
    FinishesOnlyAtShutdown,
    FirstOfBatchOnly,
    HonoursPause,
    IgnoredAbort,
    MislabelledAbortResult,
    SpeaksAfterDeath,
)

from omni_fsm import ControlMethod, StageKind
from omni_runtime import protocol as rp
from omni_runtime.pipeline import StageSpec
from omni_runtime.sim import SimConfig, sim_replica
from omni_runtime.testing import ConformanceError, check_runtime, make_machine, sim_factory

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
AR = StageSpec(name="s", kind=StageKind.AR, final=True, replicas=1, max_running=1, max_tokens=8, steps=1)


def calm_sim(spec, stage, replica, rpc_fails):
    return sim_replica(spec, stage, replica, 1, SimConfig(rpc_error=1.0 if rpc_fails else 0.0))


@pytest.mark.parametrize("factory", [calm_sim, sim_factory], ids=["without-faults", "with-faults"])
def test_kit_passes_the_simulator(factory):
    check_runtime(factory, max_examples=15)


@pytest.mark.parametrize("invariant", sorted(FAULTY))
def test_kit_fails_each_faulty_runtime_naming_the_invariant(invariant):
    with pytest.raises(ConformanceError, match=invariant):
        check_runtime(FAULTY[invariant], max_examples=40, shrink=False)


@pytest.mark.parametrize("runtime", [IgnoredAbort, MislabelledAbortResult, FirstOfBatchOnly], ids=lambda c: c.__name__)
def test_kit_fails_a_runtime_that_does_not_answer_the_aborts_it_was_asked(runtime):
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(one_result_per_aborted_request\)"):
        check_runtime(runtime, max_examples=40, shrink=False)


def test_kit_aborts_several_requests_in_one_call_and_wants_a_result_for_each():
    """B1 at the runtime: the orchestrator aborts a parent's samples in one call; each id is owed its result."""
    machine = make_machine(FirstOfBatchOnly)()
    machine.start(AR)
    machine.add(req_id=40, tokens=[1], samples=3)
    machine.abort(picks=[2, 0, 1])
    assert machine.checker.asked_aborts == {1000: {40, 41}}  # 42, the first of the batch, was answered
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(one_result_per_aborted_request\) for 40: abort 1000 "):
        machine.teardown()


def _chunk_waits(spec, stage, replica, rpc_fails):
    """The simulator, every AR request of more than one token waiting once for an input chunk."""
    return sim_replica(spec, stage, replica, 3, SimConfig(chunk_wait=1.0, rpc_error=float(rpc_fails)))


def _chunk_waits_missed(spec, stage, replica, rpc_fails):
    """``_chunk_waits`` with B5 put back."""
    return AbortMissesChunkWait(spec, stage, replica, rpc_fails, SimConfig(chunk_wait=1.0, rpc_error=float(rpc_fails)))


def test_kit_aborts_a_request_waiting_for_a_chunk_and_fails_a_runtime_that_keeps_it():
    """B5: an abort by status misses the wait for an input chunk. A fixed sequence of the kit's own rules:
    the simulator passes it, the same simulator with B5 put back breaks ORCH-INV-209."""
    for runtime in (_chunk_waits, _chunk_waits_missed):
        machine = make_machine(runtime)()
        machine.start(AR)
        machine.add(req_id=7, tokens=[1, 2])
        machine.step(steps=4)  # stops at the step after which request 7 waits
        assert machine.checker.waiting == {7: rp.Status.AWAIT_CHUNK}
        machine.abort_waiting()
        assert machine.checker.aborted == {7} and machine.checker.asked_aborts == {1000: set()}
        machine.step(steps=1)
        if runtime is _chunk_waits:
            machine.stream_is_clean()
            machine.teardown()
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-209 \(no_output_after_acknowledged_abort\) for 7: "
                                               r"StatusChanged after the abort was acknowledged"):  # fmt: skip
        machine.stream_is_clean()


def test_kit_finds_an_abort_that_misses_a_chunk_wait_by_itself():
    """Left to draw its own examples, the kit aborts requests right after they report a wait (where B5 bites).

    With chunk waits as common as here it found B5 in 100 runs out of 100; at the simulator's
    ``legal(0.2)`` rate (``AbortMissesChunkWait`` as it is), in about 9 runs out of 10.
    """
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-209 \(no_output_after_acknowledged_abort\)"):
        check_runtime(_chunk_waits_missed, max_examples=40, shrink=False)


def test_kit_judges_progress_before_shutdown_and_wants_silence_after():
    """A runtime that does nothing when stepped and "finishes" everything in shutdown() hangs every request."""
    machine = make_machine(FinishesOnlyAtShutdown)()
    machine.start(AR)
    machine.add(req_id=5, tokens=[])
    never = r"^ORCH-INV-101 \(one_finish_per_accepted_request\) for 5: accepted but never finished \(stepped until idle"
    with pytest.raises(ConformanceError, match=never):
        machine.teardown()
    assert [str(v) for v in machine.checker.violations[1:]] == [
        "ORCH-INV-300 (no_report_after_shutdown) for 5: Finished after shutdown() was called"]
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-101 \(one_finish_per_accepted_request\) .*never finished"):
        check_runtime(FinishesOnlyAtShutdown, max_examples=40, shrink=False)


@pytest.mark.parametrize("rpc_fails", [False, True], ids=["rpcs-work", "rpcs-fail"])
def test_kit_resumes_and_wakes_a_runtime_it_paused_before_judging_progress(rpc_fails):
    machine = make_machine(HonoursPause, rpc_fails)()
    machine.start(AR)
    machine.add(req_id=1, tokens=[], samples=2)
    machine.control(ControlMethod.PAUSE_SCHEDULER)
    machine.control(ControlMethod.SLEEP)
    machine.step(steps=4)
    reported = [rid for rid, seq in machine.checker.next_seq.items() if seq]
    assert bool(reported) is rpc_fails  # paused: not one report; a pause that failed changed nothing
    machine.teardown()
    assert machine.runtime.methods == [ControlMethod.PAUSE_SCHEDULER, ControlMethod.SLEEP, ControlMethod.WAKE_UP,
                                       ControlMethod.RESUME_SCHEDULER]  # fmt: skip
    check_runtime(HonoursPause, max_examples=15)


def test_a_runtime_that_dies_is_judged_by_what_its_death_excuses_unless_it_may_die():
    """A death excuses every finish still owed, so a runtime that always "dies" must not pass by default."""
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-101 .*ReplicaDied though this run does not let"):
        check_runtime(DiesAtOnce, max_examples=40, shrink=False)
    check_runtime(DiesAtOnce, max_examples=15, may_die=True)  # a runtime that really can die: its death is legal


def test_a_dead_replica_reports_nothing_more():
    died_then = r"(StatusChanged|Output|Finished|Failed|AbortResult|RpcResult) after the replica reported its death"
    with pytest.raises(ConformanceError, match=rf"^ORCH-INV-101 .*{died_then}"):
        check_runtime(SpeaksAfterDeath, max_examples=40, shrink=False, may_die=True)


def test_report_stream_faults_are_flagged():
    """The simulator's own report-stream fault (reordering), with every legal behaviour on: IO-INV-101.

    Reordering holds a report back only to the end of its step, so the first report that overtakes
    another of its request is out of sequence before anything else can go wrong: IO-INV-101 is the
    only invariant this runtime can break, whatever example Hypothesis draws. Failed physical aborts
    are off: a held-back 'abort failed' answer may arrive after its request finished (ORCH-INV-202).
    Delays and duplicates are off: which invariant they break first (IO-INV-101, ORCH-INV-209,
    ORCH-INV-101 or ORCH-INV-205) depends on the example drawn.
    """

    def reordering(spec, stage, replica, rpc_fails):
        config = attrs.evolve(SimConfig.legal(0.5), abort_fail=0.0, reorder=0.5, rpc_error=float(rpc_fails))
        return sim_replica(spec, stage, replica, 1, config)

    with pytest.raises(ConformanceError, match=r"^IO-INV-101 \(reports_in_sequence\)"):
        check_runtime(reordering, max_examples=40, shrink=False)


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "omni_runtime.testing", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(HERE), *args, str(HERE / "faulty_runtimes.py")],
                          capture_output=True, text=True, env=env, cwd=HERE, timeout=120)  # fmt: skip


def test_pytest_plugin_passes_the_simulator_and_fails_a_faulty_runtime():
    ok = _pytest("--omni-runtime=omni_runtime.testing:sim_factory")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _pytest("--omni-runtime=faulty_runtimes:SwallowedRpcError")
    assert bad.returncode == 1 and "ORCH-INV-205" in bad.stdout, bad.stdout + bad.stderr
    dies = _pytest("--omni-runtime=faulty_runtimes:DiesAtOnce")
    assert dies.returncode == 1 and "ORCH-INV-101" in dies.stdout, dies.stdout + dies.stderr
    may_die = _pytest("--omni-runtime=faulty_runtimes:DiesAtOnce", "--omni-runtime-may-die")
    assert may_die.returncode == 0, may_die.stdout + may_die.stderr


@pytest.mark.parametrize(("spec", "why"), [
    ("nosuch_module:factory", "--omni-runtime=nosuch_module:factory: cannot import nosuch_module"),
    ("faulty_runtimes", "--omni-runtime wants package.module:factory, got 'faulty_runtimes'"),
    ("faulty_runtimes:nothing", "--omni-runtime=faulty_runtimes:nothing: module faulty_runtimes has no 'nothing'"),
])  # fmt: skip
def test_pytest_plugin_calls_a_wrong_factory_name_a_usage_error(spec, why):
    done = _pytest(f"--omni-runtime={spec}")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"ERROR: {why}" in done.stderr and "Traceback" not in done.stdout + done.stderr


def test_kit_names_what_a_factory_made_that_is_not_a_runtime():
    with pytest.raises(ConformanceError, match=r"the factory made a object, not a StageRuntime \(it lacks bind, "):
        check_runtime(lambda spec, stage, replica, rpc_fails: object(), max_examples=1)
