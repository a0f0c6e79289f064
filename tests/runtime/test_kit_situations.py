"""Each situation of a runtime's life the conformance kit exercises, its rule, and a faulty runtime caught there.

``specs/kit.toml`` lists them; the first half of this file checks that list against the kit (its
rules, its checks, the faulty runtimes and the tests it names), the second half holds the
fixed-sequence negative tests of the situations that had none: the kit's own rules called by hand,
as the kit would call them, and the violation it names. Where the kit does not catch a faulty
runtime yet (``caught = false``), the test is a strict xfail that wants it to, and a second test
drives the runtime there by hand to show the checker would.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from faulty_runtimes import (
    AbortMissesStreamingSession,
    AbortsUnasked,
    AnswersAbortsAtShutdown,
    BindRaises,
    ControlRaisesWorkerError,
    DeathAtShutdown,
    DiesAtOnce,
    EmptyPromptRaises,
    FailsRequestsOnRpcError,
    FeedByKey,
    FlushesOpenRequestsAtShutdown,
    HonoursPause,
    KeepsFailedRequest,
    LosesRpcWhileRunning,
    RefusesSleep,
    ResumeIgnored,
    ShutdownNotIdempotent,
    ShutdownRaisesWhilePaused,
    SpeaksAfterDeath,
    StallsAfterRpcError,
    SwallowedRpcError,
)
from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER

from omni_fsm import ControlMethod, StageKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.runtimes.sim import SimConfig, sim_replica
from omni_runtime.testing import ConformanceError, _checker, check_runtime, make_machine, sim_factory

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "kit.toml"
AR = StageSpec(name="s", kind=StageKind.AR, final=True, replicas=1, max_running=1, max_tokens=8, steps=1)

REQUIRED = ("id", "life", "what", "kit_rules", "invariant", "check", "faulty", "test")
OPTIONAL = ("raised", "caught", "gap", "proposal", "would_catch", "note")


def _load() -> dict[str, Any]:
    with SPEC.open("rb") as file:
        return tomllib.load(file)


KIT = _load()
SITUATIONS: list[dict[str, Any]] = KIT["situation"]
#: the checker's check constants: (invariant, check) by name (ONE_FINISH, NO_ROW, ...)
CONSTANTS = {name: value for name, value in vars(_checker).items()
             if name.isupper() and isinstance(value, tuple) and len(value) == 2
             and all(isinstance(part, str) for part in value)}  # fmt: skip
#: what the kit reports when a runtime raises out of a call: (invariant, check) by call
RAISED = {call: (invariant, check) for call, (invariant, check, _) in _checker.RAISED.items()}
REPORTED = set(CONSTANTS.values()) | set(RAISED.values())


def _caught(situation: dict[str, Any]) -> bool:
    return bool(situation.get("caught", True))


def _kit_rules() -> set[str]:
    """Return the names of the kit's rules: its initializers and ``@rule`` methods, and ``teardown``."""
    machine = make_machine(sim_factory)
    marked = {name for name in dir(machine)
              if getattr(getattr(machine, name), RULE_MARKER, None) is not None
              or getattr(getattr(machine, name), INITIALIZE_RULE_MARKER, None) is not None}  # fmt: skip
    return marked | {"teardown"}


def _test_function(node_id: str) -> Any:
    """Return the test function a node id names (its module imported from tests/runtime)."""
    path, _, name = node_id.partition("::")
    module = importlib.import_module(Path(path).stem)
    return getattr(module, name.partition("[")[0])


@pytest.fixture(scope="module")
def collected() -> set[str]:
    """Return the node ids pytest collects from the test files the spec names."""
    files = sorted({node.partition("::")[0] for s in SITUATIONS for node in (s["test"], s.get("would_catch", ""))
                    if node})  # fmt: skip
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    done = subprocess.run([*command, *files], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


# -- the spec itself ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.get("id", "?"))
def test_each_situation_names_its_life_rules_check_and_faulty_runtime(situation, collected):
    missing = [field for field in REQUIRED if field not in situation]
    unknown = sorted(set(situation) - set(REQUIRED) - set(OPTIONAL))
    assert not missing and not unknown, f"missing {missing}, unknown {unknown}"
    assert situation["life"] in KIT["lives"]
    assert situation["kit_rules"] and set(situation["kit_rules"]) <= _kit_rules()
    pair = (situation["invariant"], situation["check"])
    assert pair in REPORTED, f"{pair} is no check the kit reports"
    if "raised" in situation:
        assert pair == RAISED[situation["raised"]]
    module, _, name = situation["faulty"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    for node_id in (situation["test"], situation.get("would_catch")):
        if node_id is not None:
            assert node_id in collected, f"no test {node_id}"
    marks = [m for m in getattr(_test_function(situation["test"]), "pytestmark", []) if m.name == "xfail"]
    if _caught(situation):
        assert not marks and not {"gap", "proposal", "would_catch"} & set(situation)
    else:  # a gap is said plainly: why, what would close it, and a strict xfail that wants it closed
        assert situation.get("gap") and situation.get("proposal")
        assert marks and marks[0].kwargs.get("strict") is True


def test_situation_ids_are_unique_and_every_life_has_one():
    ids = [s["id"] for s in SITUATIONS]
    assert len(ids) == len(set(ids))
    assert len(KIT["lives"]) == len(set(KIT["lives"]))
    assert {s["life"] for s in SITUATIONS} == set(KIT["lives"])


def test_every_check_of_the_kit_has_a_situation_that_catches_a_runtime_there():
    """A new check constant in the checker, or a new runtime call in RAISED, needs its situation in the spec."""
    caught = [s for s in SITUATIONS if _caught(s)]
    plain = {(s["invariant"], s["check"]) for s in caught if "raised" not in s}
    assert sorted(name for name, pair in CONSTANTS.items() if pair not in plain) == []
    assert sorted(set(_checker.RAISED) - {s["raised"] for s in caught if "raised" in s}) == []


# -- the kit's situations, each a fixed sequence of its rules --------------------------------------------------


def calm_sim(spec, stage, replica, rpc_fails):
    """The simulator as the faulty runtimes built on ``_calm`` run it, without their fault."""
    return sim_replica(spec, stage, replica, 3, SimConfig(rpc_error=float(rpc_fails)))


def _machine(factory, rpc_fails=False, **kwargs):
    machine = make_machine(factory, rpc_fails, **kwargs)()
    machine.start(AR)
    return machine


def _kit_fails(pair: tuple[str, str], rest: str = "") -> Any:
    """Return ``pytest.raises`` for the kit's failure naming ``pair`` (invariant, check), then ``rest`` (a pattern; its
    ``$`` ends the first line: the other violations of the failing step follow it)."""
    invariant, check = pair
    return pytest.raises(ConformanceError, match=rf"(?m)\A{invariant} \({check}\){rest}")


NEVER_FINISHED = r" for {}: accepted but never finished \(stepped until idle, before shutdown\)"


def _parked_between_turns(machine, req_id: int) -> None:
    """Add a streaming-input session and step it until it reports that it waits for its next part."""
    machine.add(req_id=req_id, tokens=[1, 2], streaming=True)
    for _ in range(4):
        machine.step(steps=4)  # stops at the step after which it waits
    assert machine.checker.waiting == {req_id: rp.Status.AWAIT_STREAMING} and machine.input_open == {req_id}


def test_kit_binds_its_sink_and_fails_a_runtime_whose_bind_raises():
    machine = make_machine(BindRaises)()
    with _kit_fails(RAISED["bind"], r": bind\(<the kit's sink>\) raised TypeError: bind\(\) wants an asyncio.Queue"):
        machine.start(AR)
    machine.teardown()  # drives it no further


def test_kit_adds_an_empty_prompt_and_fails_a_runtime_that_raises_on_it():
    machine = _machine(EmptyPromptRaises)
    machine.add(req_id=5, tokens=[1])
    raised = r" for 6: add_request\(6, tokens=\(\)\) raised ValueError: request 6: empty prompt"
    with _kit_fails(RAISED["add_request"], raised):
        machine.add(req_id=6, tokens=[])


def test_kit_steps_requests_nobody_paused_and_fails_an_engine_that_aborts_one():
    machine = _machine(AbortsUnasked)
    machine.add(req_id=3, tokens=[1])
    machine.step(steps=4)  # its third token is not made: the engine ends it as aborted
    unasked = r" for 3: the runtime ended the request as aborted, but no pause in abort mode was asked for"
    with _kit_fails(_checker.ENGINE_ABORTS, unasked):
        machine.stream_is_clean()


@pytest.mark.parametrize("runtime", [calm_sim, AbortMissesStreamingSession], ids=lambda f: f.__name__)
def test_kit_aborts_a_session_parked_between_turns_and_fails_a_runtime_that_keeps_it(runtime):
    """B5's kin for streamed input: the abort of a session waiting for its next part; the part fed after it must
    wake nothing."""
    machine = _machine(runtime)
    _parked_between_turns(machine, 7)
    machine.abort_waiting()
    assert machine.checker.aborted == {7}
    machine.feed(pick=0, tokens=[5], last=True)
    machine.step(steps=1)
    if runtime is calm_sim:
        machine.teardown()
        return
    with _kit_fails(_checker.NO_OUTPUT_AFTER_ABORT, r" for 7: StatusChanged after the abort was acknowledged"):
        machine.stream_is_clean()


@pytest.mark.parametrize("runtime", [calm_sim, FeedByKey], ids=lambda f: f.__name__)
def test_kit_feeds_a_session_it_aborted_and_fails_a_runtime_that_raises_there(runtime):
    machine = _machine(runtime)
    _parked_between_turns(machine, 7)
    machine.abort(picks=[0])
    if runtime is calm_sim:
        machine.feed(pick=0, tokens=[5], last=True)
        machine.teardown()
        return
    with _kit_fails(RAISED["feed_input"], r" for 7: feed_input\(7, tokens=\(5,\), last=True\) raised KeyError: 7"):
        machine.feed(pick=0, tokens=[5], last=True)


def test_kit_steps_a_request_that_fails_and_fails_a_runtime_that_reports_it_on():
    machine = _machine(KeepsFailedRequest)
    machine.add(req_id=1, tokens=[1])
    machine.step(steps=1)
    with _kit_fails(_checker.ONE_FINISH, r" for 1: Output after the request finished"):
        machine.stream_is_clean()


def test_kit_fails_a_death_with_requests_open_unless_the_runtime_may_die():
    machine = _machine(DiesAtOnce)
    machine.add(req_id=1, tokens=[1], samples=2)
    machine.step(steps=1)
    with _kit_fails(_checker.ONE_FINISH, r" for 1: ReplicaDied though this run does not let the runtime die "
                    r"\(may_die\): a death excuses the 2 request\(s\) still owed a finish"):  # fmt: skip
        machine.stream_is_clean()
    may_die = _machine(DiesAtOnce, may_die=True)
    may_die.add(req_id=1, tokens=[1], samples=2)
    may_die.step(steps=1)
    may_die.teardown()  # a runtime that really can die: its death excuses both


def test_kit_fails_a_dead_replica_that_reports_on():
    machine = _machine(SpeaksAfterDeath, may_die=True)
    machine.add(req_id=1, tokens=[1])
    machine.step(steps=1)
    with _kit_fails(_checker.ONE_FINISH, r" for 1: \w+ after the replica reported its death"):
        machine.stream_is_clean()


def _rpc_fails_while_requests_run(machine) -> None:
    """Add two requests, step once, then call a control RPC whose workers raise, and step to its answer."""
    machine.add(req_id=1, tokens=[1], samples=2)
    machine.step(steps=1)
    assert machine.checker.open_requests() == [1, 2]
    machine.control(ControlMethod.SLEEP)
    machine.step(steps=1)
    assert machine.checker.answered == {10_000}


def test_kit_wants_the_worker_error_back_from_an_rpc_called_while_requests_run():
    machine = make_machine(SwallowedRpcError, rpc_fails=True)()
    machine.start(AR)
    machine.add(req_id=1, tokens=[1], samples=2)
    machine.step(steps=1)
    machine.control(ControlMethod.SLEEP)
    machine.step(steps=1)
    with _kit_fails(_checker.RPC_ERRORS, r" for 10000: a worker raised but the RPC answered without the error"):
        machine.stream_is_clean()


@pytest.mark.parametrize("runtime", [calm_sim, StallsAfterRpcError], ids=lambda f: f.__name__)
def test_kit_wants_requests_to_run_on_after_an_rpc_failed_in_a_worker(runtime):
    machine = _machine(runtime, rpc_fails=True)
    _rpc_fails_while_requests_run(machine)
    if runtime is calm_sim:
        machine.teardown()
        assert set(machine.checker.finished) == {1, 2}
        return
    with _kit_fails(_checker.ONE_FINISH, NEVER_FINISHED.format(1)):
        machine.teardown()


def test_kit_fails_a_runtime_that_fails_its_requests_when_an_rpc_fails_unless_it_may_fail():
    """A ``Failed`` end is legal, so only a run told the runtime fails no request (``may_fail=False``)
    can prove that the RPC's failure reached them; told nothing, the kit takes the ends as the runtime's own."""
    machine = _machine(FailsRequestsOnRpcError, rpc_fails=True, may_fail=False)
    with _kit_fails(_checker.RPC_FAILURE_SCOPED, r" for 1: Failed after RPC 10000 failed in its workers, though "
                    r"this run does not let the runtime fail requests \(may_fail\)"):  # fmt: skip
        _rpc_fails_while_requests_run(machine)
        machine.stream_is_clean()
    lenient = _machine(FailsRequestsOnRpcError, rpc_fails=True)
    _rpc_fails_while_requests_run(lenient)
    assert lenient.checker.finished.keys() == {1, 2}  # both ended Failed when the RPC's worker raised
    lenient.teardown()
    calm = _machine(calm_sim, rpc_fails=True, may_fail=False)  # requests that run on after the RPC failed
    _rpc_fails_while_requests_run(calm)
    calm.teardown()


def always_fails(spec, stage, replica, rpc_fails):
    """The simulator failing every request it runs (a legal end, unless the kit is told the runtime fails none)."""
    return sim_replica(spec, stage, replica, 3, SimConfig(stage_fail=1.0, rpc_error=float(rpc_fails)))


def test_kit_fails_a_failed_end_in_a_run_that_does_not_let_the_runtime_fail_requests():
    lenient = _machine(always_fails)
    lenient.add(req_id=1, tokens=[1])
    lenient.teardown()
    assert lenient.checker.finished == {1: 1}
    machine = _machine(always_fails, may_fail=False)
    machine.add(req_id=1, tokens=[1])
    with _kit_fails(_checker.ONE_FINISH, r" for 1: Failed though this run does not let the runtime fail requests"):
        machine.step(steps=20)
        machine.stream_is_clean()


def test_kit_fails_a_control_call_that_raises_the_worker_error():
    machine = _machine(ControlRaisesWorkerError, rpc_fails=True)
    machine.add(req_id=1, tokens=[1])
    with _kit_fails(RAISED["control"], r" for 10000: control\(10000, pause_scheduler, 1, tags=\[\]\) raised "
                    r"RuntimeError: WorkerError"):  # fmt: skip
        machine.control(ControlMethod.PAUSE_SCHEDULER)


def test_kit_fails_an_rpc_refused_though_no_worker_raised_unless_told():
    machine = _machine(RefusesSleep)
    machine.control(ControlMethod.SLEEP)
    with _kit_fails(_checker.RPC_ERRORS, r" for 10000: RPC failed though no worker raised: NotImplementedError"):
        machine.stream_is_clean()
    told = _machine(RefusesSleep, refused=(ControlMethod.SLEEP,))  # an engine without sleep mode, and the kit knows
    told.add(req_id=1, tokens=[1])
    told.control(ControlMethod.SLEEP)
    told.teardown()


def test_kit_fails_an_rpc_dropped_while_requests_run():
    machine = _machine(LosesRpcWhileRunning)
    machine.add(req_id=1, tokens=[1])
    machine.control(ControlMethod.PAUSE_SCHEDULER)
    with _kit_fails(_checker.RPC_ERRORS, r" for 10000: RPC never answered$"):
        machine.teardown()


def test_kit_resumes_before_judging_and_fails_a_runtime_that_stays_paused():
    machine = _machine(ResumeIgnored)
    machine.add(req_id=1, tokens=[1])
    machine.control(ControlMethod.PAUSE_SCHEDULER)
    with _kit_fails(_checker.ONE_FINISH, NEVER_FINISHED.format(1)):
        machine.teardown()
    assert machine.runtime.methods == [ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER]


def test_kit_shuts_down_twice_and_fails_a_second_shutdown_that_raises():
    machine = _machine(ShutdownNotIdempotent)
    machine.add(req_id=1, tokens=[1])
    with _kit_fails(RAISED["shutdown"], r": shutdown\(\) raised RuntimeError: already shut down"):
        machine.teardown()


def test_kit_wants_silence_after_shutdown_and_fails_a_death_reported_there():
    machine = _machine(DeathAtShutdown)
    machine.add(req_id=1, tokens=[1])
    with _kit_fails(_checker.SILENT_AFTER_SHUTDOWN, r": ReplicaDied after shutdown\(\) was called$"):
        machine.teardown()


# -- shutdown at any moment: the kit's ``shutdown_now``, with work in flight ------------------------------------


class DropsAbortsAtShutdown(AnswersAbortsAtShutdown):
    """Carries out an abort at its next step, as ``AnswersAbortsAtShutdown``; its ``shutdown()`` drops those still
    owed, unanswered (not faulty: a shutdown cuts off what the runtime owes)."""

    def shutdown(self):
        self.owed.clear()
        self.inner.shutdown()


def _offered(machine) -> list[str]:
    """Return the rules Hypothesis may pick now (a rule called by hand skips its preconditions)."""
    return sorted(r.function.__name__ for r in machine.rules if all(p(machine) for p in r.preconditions))


def _requests_open(runtime):
    machine = _machine(runtime)
    machine.add(req_id=1, tokens=[1], samples=2)
    machine.step(steps=1)
    assert machine.checker.open_requests() == [1, 2]
    return machine


def _mid_abort(runtime):
    machine = _requests_open(runtime)
    machine.abort(picks=[0])
    assert machine.checker.asked_aborts == {1000: {1}}  # carried out (and answered) at the next step
    return machine


def _paused(runtime):
    machine = _machine(runtime)
    machine.add(req_id=1, tokens=[1])
    machine.control(ControlMethod.PAUSE_SCHEDULER)
    return machine


def _shut_down_now(machine) -> None:
    """Call the kit's ``shutdown_now``, offered while the runtime holds work; after it, no rule that drives the
    runtime is offered."""
    assert "shutdown_now" in _offered(machine)
    machine.shutdown_now()
    assert _offered(machine) == ["shutdown_now"] and machine.checker.closed


def _cut_off_quietly(machine) -> None:
    """Judge a sound runtime after ``shutdown_now``: teardown owes it nothing it cut off, resumes and steps nothing,
    and only shuts it down once more."""
    machine.stream_is_clean()
    machine.teardown()
    assert machine.calls[-1] == ["shutdown()", 2]


@pytest.mark.parametrize("runtime", [calm_sim, FlushesOpenRequestsAtShutdown], ids=lambda f: f.__name__)
def test_kit_shuts_down_a_runtime_with_requests_open_and_fails_one_that_reports_them(runtime):
    machine = _requests_open(runtime)
    _shut_down_now(machine)
    if runtime is calm_sim:
        _cut_off_quietly(machine)
        assert machine.checker.open_requests() == [1, 2]  # never finished, and not judged so
        return
    with _kit_fails(_checker.SILENT_AFTER_SHUTDOWN, r" for 1: Failed after shutdown\(\) was called$"):
        machine.stream_is_clean()


@pytest.mark.parametrize("runtime", [DropsAbortsAtShutdown, AnswersAbortsAtShutdown], ids=lambda f: f.__name__)
def test_kit_shuts_down_a_runtime_mid_abort_and_fails_one_that_answers_the_abort_there(runtime):
    machine = _mid_abort(runtime)
    _shut_down_now(machine)
    if runtime is DropsAbortsAtShutdown:
        _cut_off_quietly(machine)
        assert machine.checker.asked_aborts == {1000: {1}}  # never answered, and not judged so
        return
    with _kit_fails(_checker.SILENT_AFTER_SHUTDOWN, r" for 1: AbortResult after shutdown\(\) was called$"):
        machine.stream_is_clean()


@pytest.mark.parametrize("runtime", [HonoursPause, ShutdownRaisesWhilePaused], ids=lambda f: f.__name__)
def test_kit_shuts_down_a_paused_runtime_and_fails_one_whose_shutdown_raises(runtime):
    machine = _paused(runtime)
    if runtime is HonoursPause:
        _shut_down_now(machine)
        _cut_off_quietly(machine)
        assert machine.runtime.methods == [ControlMethod.PAUSE_SCHEDULER]  # teardown did not resume it
        return
    with _kit_fails(RAISED["shutdown"], r": shutdown\(\) raised RuntimeError: cannot shut down a paused scheduler"):
        machine.shutdown_now()
    machine.teardown()  # drives it no further


def test_kit_shuts_down_once_more_after_shutdown_now_and_fails_a_second_shutdown_that_raises():
    machine = _machine(ShutdownNotIdempotent)
    machine.add(req_id=1, tokens=[1])
    _shut_down_now(machine)
    with _kit_fails(RAISED["shutdown"], r": shutdown\(\) raised RuntimeError: already shut down"):
        machine.teardown()


#: what the kit's drawn examples fail each runtime for, once one shuts it down mid-run
SHUT_DOWN_MID_RUN = {FlushesOpenRequestsAtShutdown: _checker.SILENT_AFTER_SHUTDOWN,
                     AnswersAbortsAtShutdown: _checker.SILENT_AFTER_SHUTDOWN,
                     ShutdownRaisesWhilePaused: RAISED["shutdown"]}  # fmt: skip


@pytest.mark.parametrize("runtime", list(SHUT_DOWN_MID_RUN), ids=lambda f: f.__name__)
def test_kit_drawing_examples_shuts_each_runtime_down_mid_run(runtime):
    with _kit_fails(SHUT_DOWN_MID_RUN[runtime]):
        check_runtime(runtime, max_examples=40, shrink=False, derandomize=True)
