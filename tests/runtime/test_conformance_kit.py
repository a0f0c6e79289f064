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
    AbortMissesWait,
    AbortOfEndedSaysFailed,
    AbortsSilently,
    AbortsUnasked,
    DiesAtOnce,
    FinishesOnlyAtShutdown,
    FirstOfBatchOnly,
    HonoursPause,
    IgnoredAbort,
    IgnoresPauseAbort,
    MislabelledAbortResult,
    NeverIdle,
    OneTokenPerStep,
    SixteenBitIds,
    SpeaksAfterDeath,
    StreamedInputWaits,
)
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from omni_fsm import ControlMethod, Outcome, StageKind
from omni_runtime import Engine, Prompt, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.runtimes.sim import SimConfig, sim_replica
from omni_runtime.testing import ConformanceError, check_runtime, make_machine, sim_factory
from omni_runtime.testing._machine import teardown_steps

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
AR = StageSpec(name="s", kind=StageKind.AR, final=True, replicas=1, max_running=1, max_tokens=8, steps=1)


def calm_sim(spec, stage, replica, rpc_fails):
    return sim_replica(spec, stage, replica, 1, SimConfig(rpc_error=1.0 if rpc_fails else 0.0))


def _offered(machine, rule_name):
    """Return whether Hypothesis may pick the rule ``rule_name`` now (a rule called by hand skips its preconditions)."""
    rule = next(r for r in machine.rules if r.function.__name__ == rule_name)
    return all(precondition(machine) for precondition in rule.preconditions)


@pytest.mark.parametrize("factory", [calm_sim, sim_factory], ids=["without-faults", "with-faults"])
def test_kit_passes_the_simulator(factory):
    check_runtime(factory, max_examples=15)


@pytest.mark.parametrize("invariant", sorted(FAULTY))
def test_kit_fails_each_faulty_runtime_naming_the_invariant(invariant):
    with pytest.raises(ConformanceError, match=invariant):  # the same examples every run: not a matter of luck
        check_runtime(FAULTY[invariant], max_examples=40, shrink=False, derandomize=True)


@pytest.mark.parametrize("runtime", [IgnoredAbort, MislabelledAbortResult, FirstOfBatchOnly], ids=lambda c: c.__name__)
def test_kit_fails_a_runtime_that_does_not_answer_the_aborts_it_was_asked(runtime):
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(one_result_per_aborted_request\)"):
        check_runtime(runtime, max_examples=40, shrink=False, derandomize=True)


def test_kit_aborts_several_requests_in_one_call_and_wants_a_result_for_each():
    """B1 at the runtime: the orchestrator aborts a parent's samples in one call; each id is owed its result."""
    machine = make_machine(FirstOfBatchOnly)()
    machine.start(AR)
    machine.add(req_id=40, tokens=[1], samples=3)
    machine.abort(picks=[2, 0, 1])
    assert machine.checker.asked_aborts == {1000: {40, 41}}  # 42, the first of the batch, was answered
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(one_result_per_aborted_request\) for 40: abort 1000 "):
        machine.teardown()


def test_kit_shows_every_violation_of_the_failing_step_the_most_specific_first():
    """An abort never answered leaves its request unfinished too: the precise ORCH-INV-202 first, then ORCH-INV-101."""
    machine = make_machine(AbortsSilently)()
    machine.start(AR)
    machine.add(req_id=40, tokens=[1], samples=1)
    machine.abort(picks=[0])
    with pytest.raises(ConformanceError) as info:
        machine.teardown()
    assert str(info.value).splitlines() == [
        "ORCH-INV-202 (one_result_per_aborted_request) for 40: abort 1000 of request 40 never answered",
        "ORCH-INV-101 (one_finish_per_accepted_request) for 40: accepted but never finished (stepped until idle, "
        "before shutdown)",
    ]


#: each wait a request can report: the simulator's behaviour that makes every AR request of more than one token
#: report it once, and a request id that does (seed 3). The simulator never waits for streamed input: its chunk
#: waits are reported as that (``StreamedInputWaits``).
WAIT_CASES = {
    rp.Status.PREEMPTED: (SimConfig(preempt=1.0), 7),
    rp.Status.AWAIT_GRAMMAR: (SimConfig(park=1.0), 4),
    rp.Status.AWAIT_REMOTE_KVS: (SimConfig(park=1.0), 7),
    rp.Status.AWAIT_CHUNK: (SimConfig(chunk_wait=1.0), 7),
    rp.Status.AWAIT_STREAMING: (SimConfig(chunk_wait=1.0), 7),
}


def _waits(status, missed):
    """Return a factory: the simulator as ``WAIT_CASES`` says; ``missed``: its abort misses a request in ``status``."""

    def factory(spec, stage, replica, rpc_fails):
        runtime = sim_replica(spec, stage, replica, 3, attrs.evolve(WAIT_CASES[status][0], rpc_error=float(rpc_fails)))
        if status is rp.Status.AWAIT_STREAMING:
            runtime = StreamedInputWaits.around(runtime)
        return AbortMissesWait.around(runtime, missed=status) if missed else runtime

    return factory


def _judge_abort_of_a_wait(machine, req_id, missed):
    """Step past an abort that landed on a wait: the simulator stays clean; with the wait missed, ORCH-INV-209."""
    machine.step(steps=1)
    if not missed:
        machine.stream_is_clean()
        machine.teardown()
        return
    with pytest.raises(ConformanceError, match=rf"^ORCH-INV-209 \(no_output_after_acknowledged_abort\) for {req_id}: "
                                               r"StatusChanged after the abort was acknowledged"):  # fmt: skip
        machine.stream_is_clean()


@pytest.mark.parametrize("missed", [False, True], ids=["sim", "abort-misses-it"])
@pytest.mark.parametrize("status", list(WAIT_CASES), ids=lambda status: status.name)
def test_kit_aborts_a_request_that_reports_a_wait_and_fails_a_runtime_that_keeps_it(status, missed):
    """B5 and its kin: an abort by status misses a request that waits (B5: for an input chunk; also
    preempted, parked for a grammar or remote KVs, waiting for streamed input). A fixed sequence of
    the kit's own rules: the simulator passes it, the same simulator with its abort missing that
    status breaks ORCH-INV-209."""
    req_id = WAIT_CASES[status][1]
    machine = make_machine(_waits(status, missed))()
    machine.start(AR)
    machine.add(req_id=req_id, tokens=[1, 2])
    machine.step(steps=4)  # stops at the step after which the request waits
    assert machine.checker.waiting == {req_id: status} and _offered(machine, "abort_waiting")
    machine.abort_waiting()
    assert machine.checker.aborted == {req_id} and machine.checker.asked_aborts == {1000: set()}
    _judge_abort_of_a_wait(machine, req_id, missed)


@pytest.mark.parametrize("missed", [False, True], ids=["sim", "abort-misses-it"])
@pytest.mark.parametrize("status", list(WAIT_CASES), ids=lambda status: status.name)
def test_kit_aborts_a_request_in_the_step_that_reports_its_wait(status, missed):
    """The kit's own ``step_then_abort_waits`` (no abort picked by hand) aborts a request right after the
    step that reports its wait, where an abort by status misses it.

    A fixed sequence: drawn at random, the kit's plain ``step`` and ``abort`` land aborts there too,
    so a drawn run finds B5 with or without this rule (and ``abort_waiting``).
    """
    req_id = WAIT_CASES[status][1]
    machine = make_machine(_waits(status, missed))()
    machine.start(AR)
    machine.add(req_id=req_id, tokens=[1, 2])
    machine.step_then_abort_waits(steps=4)
    assert machine.checker.aborted == {req_id} and machine.checker.asked_aborts == {1000: set()}
    _judge_abort_of_a_wait(machine, req_id, missed)


@pytest.mark.parametrize("runtime", [calm_sim, AbortOfEndedSaysFailed], ids=lambda factory: factory.__name__)
def test_kit_aborts_requests_that_already_ended_and_wants_a_truthful_result(runtime):
    """An abort that crossed its requests' finish: "failed" would say they run on (ORCH-INV-202). A fixed
    sequence of the kit's own rules: the simulator passes it, a runtime that says "failed" does not."""
    machine = make_machine(runtime)()
    machine.start(AR)
    machine.add(req_id=3, tokens=[1], samples=2)
    for _ in range(8):
        machine.step(steps=4)
    assert machine.checker.finished.keys() == {3, 4} and _offered(machine, "abort_late")
    machine.abort_late(picks=[1, 0])
    assert machine.checker.asked_aborts == {1000: set()}
    if runtime is calm_sim:
        machine.teardown()
        return
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(truthful_abort_result\) for 4: abort reported failed "
                                               r"for a request that had already ended"):  # fmt: skip
        machine.stream_is_clean()


def test_kit_draws_request_ids_and_fails_a_runtime_that_keeps_them_in_16_bits():
    """Ids 0, 1, 2, ... never reach 65536; the kit's drawn ids do, in nearly every example. Run
    derandomized (Hypothesis's fixed seed, whatever the profile): it is the kit's own draws that find it."""
    never_accepted = r"for \d+: a report about a request never accepted"
    with pytest.raises(ConformanceError, match=rf"^ORCH-INV-101 \(one_finish_per_accepted_request\) {never_accepted}"):
        run_state_machine_as_test(make_machine(SixteenBitIds), settings=settings(
            derandomize=True, max_examples=40, stateful_step_count=30, deadline=None, database=None,
            phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False))  # fmt: skip


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
    # drawn: whichever comes first, the hang judged before a shutdown, or the flush after one the kit made mid-run
    either = (r"^(ORCH-INV-101 \(one_finish_per_accepted_request\) .*never finished|"
              r"ORCH-INV-300 \(no_report_after_shutdown\) .*after shutdown\(\) was called)")
    with pytest.raises(ConformanceError, match=either):
        check_runtime(FinishesOnlyAtShutdown, max_examples=40, shrink=False, derandomize=True)


def test_kit_gives_a_slow_runtime_the_steps_its_requests_need_before_judging_it():
    """30 adds of 3 samples (as many as ``check_runtime``'s 30 rules can make) of 8 tokens each, one at a
    time, one token per step: a correct runtime needs about 720 steps to finish them."""
    machine = make_machine(OneTokenPerStep)()
    machine.start(AR)
    for i in range(30):
        machine.add(req_id=10 * i, tokens=[1], samples=3)
    machine.teardown()
    assert len(machine.checker.finished) == 90
    check_runtime(OneTokenPerStep, max_examples=15)


def test_kit_says_a_runtime_that_never_goes_idle_was_still_busy():
    machine = make_machine(NeverIdle)()
    machine.start(AR)
    machine.add(req_id=5, tokens=[])
    limit = teardown_steps(AR, 1)
    busy = rf"for 5: accepted but never finished \(still busy after {limit} steps, before shutdown\)$"
    with pytest.raises(ConformanceError, match=rf"(?m)\AORCH-INV-101 \(one_finish_per_accepted_request\) {busy}"):
        machine.teardown()
    assert machine.runtime.steps == limit + 1  # and one step more, as for every runtime


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
    reports = "StatusChanged|Output|Finished|Failed|Aborted|AbortResult|RpcResult"
    died_then = rf"({reports}) after the replica reported its death"
    with pytest.raises(ConformanceError, match=rf"^ORCH-INV-101 .*{died_then}"):
        check_runtime(SpeaksAfterDeath, max_examples=40, shrink=False, may_die=True)


def test_report_stream_faults_are_flagged():
    """The simulator's own report-stream fault (reordering), with every legal behaviour on: IO-INV-101, or
    ORCH-INV-209.

    Reordering holds a report back only to the end of its step, so the first report that overtakes
    another of its request is out of sequence before anything else can go wrong (IO-INV-101), except
    one: the answer to a physical abort carries no sequence number, and when it overtakes its request's
    held-back ``Aborted`` that report comes after the abort was acknowledged (ORCH-INV-209). Which of the
    two comes first depends on the example drawn. Failed physical aborts
    are off: a held-back 'abort failed' answer may arrive after its request finished (ORCH-INV-202).
    Delays and duplicates are off: which invariant they break first (IO-INV-101, ORCH-INV-209,
    ORCH-INV-101 or ORCH-INV-205) depends on the example drawn.
    """

    def reordering(spec, stage, replica, rpc_fails):
        config = attrs.evolve(SimConfig.legal(0.5), abort_fail=0.0, reorder=0.5, rpc_error=float(rpc_fails))
        return sim_replica(spec, stage, replica, 1, config)

    rules = r"^(IO-INV-101 \(reports_in_sequence\)|ORCH-INV-209 \(no_output_after_acknowledged_abort\))"
    with pytest.raises(ConformanceError, match=rules):
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


def test_pytest_plugin_suggests_the_kinds_flag_in_one_line_when_the_factory_refuses_a_stage_kind():
    refused = _pytest("--omni-runtime=faulty_runtimes:ar_only")
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1, out
    lines = [line for line in out.splitlines() if "--omni-runtime-kinds" in line]  # the summary may repeat the line
    assert lines and all("refuses a diffusion stage" in line and "--omni-runtime-kinds=ar " in line
                         for line in lines), lines  # fmt: skip
    assert "Traceback" not in out and "hypothesis" not in out.lower() and len(out.splitlines()) < 30, out
    assert _pytest("--omni-runtime=faulty_runtimes:ar_only", "--omni-runtime-kinds=ar").returncode == 0


def test_pytest_plugin_fails_requests_failed_by_an_rpc_error_when_told_the_runtime_fails_nothing():
    lenient = _pytest("--omni-runtime=faulty_runtimes:FailsRequestsOnRpcError")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr  # a Failed end is legal: told nothing, it passes
    told = _pytest("--omni-runtime=faulty_runtimes:FailsRequestsOnRpcError", "--omni-runtime-fails-nothing")
    assert told.returncode == 1 and "ORCH-INV-206 (failure_is_request_scoped)" in told.stdout, told.stdout + told.stderr
    calm = _pytest("--omni-runtime=omni_runtime.testing:sim_factory", "--omni-runtime-fails-nothing")
    assert calm.returncode == 1 and "(may_fail)" in calm.stdout  # the kit's reference runtime fails requests itself


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


def test_kit_fails_an_engine_abort_nobody_asked_for():
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-101 \(engine_aborts_only_when_paused_in_abort_mode\) "
                                               r".*no pause in abort mode was asked for"):  # fmt: skip
        check_runtime(AbortsUnasked, max_examples=60, shrink=False)


def test_kit_fails_a_pause_in_abort_mode_answered_done_while_requests_run():
    machine = make_machine(IgnoresPauseAbort)()
    machine.start(AR)
    machine.add(req_id=3, tokens=[1], samples=2)
    machine.control(ControlMethod.PAUSE_SCHEDULER, frozenset({"abort"}))
    with pytest.raises(ConformanceError, match=r"for 3: StatusChanged after a pause in abort mode was answered done"):
        machine.step(steps=2)
        machine.stream_is_clean()


def test_a_pause_in_abort_mode_ends_each_request_in_flight_as_aborted_with_its_prefix():
    """Through the engine: the requests in flight end ``abort`` (never ``error``) with the tokens they made; one
    submitted while paused waits and runs after resume."""
    pipeline = simple_pipeline([StageKind.AR], max_tokens=8)
    engine = Engine(pipeline, [[OneTokenPerStep(pipeline.stages[0], 0, 0, False)]])
    first, second = engine.submit(Prompt((1,))), engine.submit(Prompt((2,)))
    engine.host.pump()
    engine.host.pump()
    engine.control(ControlMethod.PAUSE_SCHEDULER, tags=frozenset({"abort"}))
    late = engine.submit(Prompt((3,)))
    engine.control(ControlMethod.RESUME_SCHEDULER)
    ends = {rid: list(engine.outputs(rid)) for rid in (first, second, late)}
    for rid in (first, second):
        terminal = ends[rid][-1]
        streamed = sum(len(m.data) for m in ends[rid][:-1])
        assert (terminal.outcome, terminal.reason) == (Outcome.ABORTED, "abort") and streamed >= 1
        assert len(terminal.data) == streamed == terminal.cumulative
    assert (ends[late][-1].outcome, ends[late][-1].reason) == (Outcome.FINISHED, "length")
    engine.shutdown()
