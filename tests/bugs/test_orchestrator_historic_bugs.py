"""Historic bugs at the orchestrator, its host and its asyncio driver (B9, B10, B11).

A runtime's legal failure (a worker error in a control RPC, an engine death) and a caller that
gives up before its answer comes are handled: nothing else breaks. Each negative test switches the
historic bug back into our orchestrator, host or driver (monkeypatched for that test only) and
shows what catches it. Every run is a fixed sequence on a seeded simulator; the asyncio runs are
fixed by their ``await`` points, not by time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faulty_runtimes import Raising
from helpers import assert_drained, demo_pipeline, monitor_for, monitored_engine, record_answers, verdict

from omni_fsm import ControlMethod, EngineState, Outcome
from omni_runtime import AsyncEngine, EngineNotRunning, OmniRuntimeError, Prompt, RpcError
from omni_runtime.core import commands as cmd
from omni_runtime.core import intake as intake_module
from omni_runtime.core import protocol as rp
from omni_runtime.core.intake import Intake
from omni_runtime.engines.host import Host
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes
from omni_runtime.testing import RawStreamChecker

LOOPS = ["event", "poll"]
PAUSE, RESUME = ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER


async def _outcome(call) -> Any:
    """Return what awaiting ``call`` returned, or the exception it raised."""
    try:
        return await call
    except Exception as exc:
        return exc


async def _read(engine: AsyncEngine, rid: int) -> Outcome | None:
    """Read ``rid`` to its end; return its terminal's outcome."""
    messages = [m async for m in engine.outputs(rid)]
    assert [m.finished for m in messages].count(True) == 1
    return messages[-1].outcome


# -- B10 (vllm-omni#5983) in the driver: a late answer to a caller that gave up -----------------------


def _b10_answer_outlives_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """B10 switched into the driver: the answer pump keeps the waiter of a caller that gave up and sets
    its result unguarded (``InvalidStateError`` on a cancelled future, raised in the orchestrator loop)."""

    async def answer(self, kind, call, answers):
        if call in answers:
            return answers.pop(call)
        future = asyncio.get_running_loop().create_future()
        self._waiters[(kind, call)] = future  # never removed: the pump still holds it
        try:
            return await future
        finally:
            if future.cancelled():
                self.host.unclaim(call)
            answers.pop(call, None)

    def answered(self, answer):
        future = self._waiters.get((answer.__class__, answer.call_id))
        if future is not None:  # no `not future.done()`
            future.set_result(answer)

    monkeypatch.setattr(AsyncEngine, "_answer", answer)
    monkeypatch.setattr(AsyncEngine, "answered", answered)


def _cancel_a_wait_before_its_answer(wait: str, loop: str) -> dict[str, Any]:
    """Four requests in flight; a caller waits on ``control(PAUSE)`` or ``abort(request 3)`` and is
    cancelled (as by a timeout) before its answer comes. Return what everyone got in the end.

    The fixed sequence: submit, start the waiting call, ``sleep(0)`` (the call is sent and its
    caller waits), cancel it; then one more call (resume, or read the aborted request), read the
    three others, shut down.
    """
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)

    async def main() -> dict[str, Any]:
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, 1), loop=loop, on_step=monitor.step)
        await engine.start()
        answers = record_answers(engine.host)
        rids = [engine.submit(Prompt(max_tokens=8)) for _ in range(4)]
        readers = [asyncio.ensure_future(_read(engine, rid)) for rid in rids[:3]]
        waiting = asyncio.ensure_future(engine.control(PAUSE) if wait == "control" else engine.abort(rids[3]))
        await asyncio.sleep(0)
        assert answers == [] and not waiting.done()  # sent, not answered yet
        waiting.cancel()
        assert isinstance((await asyncio.gather(waiting, return_exceptions=True))[0], asyncio.CancelledError)
        then = await _outcome(engine.control(RESUME) if wait == "control" else _read(engine, rids[3]))
        others = [await reader for reader in readers]
        left = (engine.host.rpc_answers, engine.host.abort_answers, engine.host._unclaimed, set(engine._waiters))
        loop_error = engine.loop_error
        stopped = await _outcome(engine.shutdown())
        return {"late answer": (type(answers[0]).__name__, answers[0].call_id), "then": then,
                "others": others, "loop error": loop_error, "shutdown": stopped, "left": left,
                "monitor": verdict(monitor)}  # fmt: skip

    return asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("wait", ["control", "abort"])
def test_b10_a_late_answer_to_a_cancelled_wait_breaks_nothing(wait, loop):
    """B10 (vllm-omni#5983) at the driver: the answer comes after its caller gave up; it is dropped.

    The other requests finish, the loop stays up, later calls are answered, nothing is kept.
    """
    run = _cancel_a_wait_before_its_answer(wait, loop)
    late = ("RpcAnswer", 1) if wait == "control" else ("AbortAnswer", 1)  # the cancelled call's answer
    assert run == {"late answer": late, "then": None if wait == "control" else Outcome.ABORTED,
                   "others": [Outcome.FINISHED] * 3, "loop error": None, "shutdown": None,
                   "left": ({}, {}, set(), set()), "monitor": []}  # fmt: skip


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("wait", ["control", "abort"])
def test_b10_switched_into_the_driver_is_caught(wait, loop, monkeypatch: pytest.MonkeyPatch):
    """B10 switched in: the late answer raises ``InvalidStateError`` in the orchestrator loop, which fails
    every open request (FATAL), refuses later calls, and ``shutdown()`` raises that failure.

    The monitor sees only a legal engine death; the driver's own failure report names the bug.
    """
    _b10_answer_outlives_its_caller(monkeypatch)
    run = _cancel_a_wait_before_its_answer(wait, loop)
    assert isinstance(run.pop("loop error"), asyncio.InvalidStateError)
    shutdown, then = run.pop("shutdown"), run.pop("then")
    assert isinstance(shutdown, OmniRuntimeError)
    assert str(shutdown) == "the orchestrator loop failed: InvalidStateError: invalid state"
    if wait == "control":
        assert isinstance(then, EngineNotRunning) and str(then) == "the engine is shut down"
    else:  # the aborted request got its terminal before the answer broke the loop
        assert then is Outcome.ABORTED
    late = cmd.RpcAnswer if wait == "control" else cmd.AbortAnswer
    assert run == {"late answer": (late.__name__, 1), "others": [Outcome.FATAL] * 3,
                   "left": ({}, {}, set(), {(late, 1)}), "monitor": []}  # the waiter is kept


# -- B11 (vllm-omni#7685): a worker's failure in a control RPC ------------------------------------------


def _rpc_answers_judged(calls: list[tuple[bool, Any]]) -> list[tuple[str, str, int | None]]:
    """Judge what each control caller got by the conformance kit's RPC rule (ORCH-INV-205).

    The rule a runtime is held to, held here to the engine as its callers see it: call ``i``
    (``calls[i]``: whether a worker raised, what the call returned or raised) is answered once,
    with the worker's error (``RpcError``) if one raised; any other exception is no answer.
    """
    checker = RawStreamChecker()
    for call, (raised, got) in enumerate(calls):
        checker.rpc(call, raised)
        if got is None or isinstance(got, RpcError):
            checker(rp.RpcResult(call, got is None, None if got is None else str(got)))
    return [(v.invariant, v.check, v.subject) for v in checker.at_end()]


def _b11_orchestrator_swallows_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """B11 switched into the orchestrator: a worker's error is never recorded; the RPC answers success."""
    record = Intake.rpc_result
    monkeypatch.setattr(Intake, "rpc_result", lambda self, call, where, error: record(self, call, where, None))


def _b11_host_lets_it_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    """B11 switched into the host, exactly vllm-omni#7685: a runtime's exception in ``control()`` escapes
    the command handler, in whatever runs the queued commands (a caller, or the orchestrator loop)."""
    carry_out = Host._do

    def escaping(self, c):
        if isinstance(c, cmd.RpcCall):
            self.runtimes[c.stage][c.replica].control(c.call_id, c.method, c.level, c.tags)
            self.driver.work_given(c.stage, c.replica)
        else:
            carry_out(self, c)

    monkeypatch.setattr(Host, "_do", escaping)


def _a_worker_error_in_pause_scheduler() -> dict[str, Any]:
    """Sync engine; every worker raises in every RPC (``SimConfig(rpc_error=1.0)``); four requests in flight
    when ``pause_scheduler`` is called. Return what the caller, the requests and the monitor got."""
    pipeline = demo_pipeline()
    engine, monitor = monitored_engine(pipeline, sim_runtimes(pipeline, 2, SimConfig(rpc_error=1.0)))
    rids = [engine.submit(Prompt()) for _ in range(4)]
    engine.host.pump()  # every request is scheduled
    try:
        got = engine.control(PAUSE)
    except Exception as exc:
        got = exc
    state = engine.host.engine_state
    ends = [list(engine.outputs(rid))[-1].outcome for rid in rids]
    engine.shutdown()
    assert_drained(engine.orchestrator)
    return {"got": repr(got), "judged": _rpc_answers_judged([(True, got)]), "state": state, "ends": ends,
            "monitor": verdict(monitor)}  # fmt: skip


def test_b11_a_worker_error_reaches_its_caller_and_ends_no_request():
    """B11 (vllm-omni#7685) from a runtime: every worker raises in ``pause_scheduler``; the caller gets
    ``RpcError`` with the worker's error, the engine is not paused, every request finishes."""
    assert _a_worker_error_in_pause_scheduler() == {
        "got": "RpcError('pause_scheduler failed: WorkerError: injected failure in a worker')", "judged": [],
        "state": EngineState.RUNNING, "ends": [Outcome.FINISHED] * 4, "monitor": []}  # fmt: skip


def test_b11_an_orchestrator_swallowing_the_worker_error_is_caught(monkeypatch: pytest.MonkeyPatch):
    """B11 switched into the orchestrator: the caller is told the pause worked ({"supported": False}
    style), and the engine pauses; ORCH-INV-205 (rpc_errors_propagated) names it."""
    _b11_orchestrator_swallows_the_error(monkeypatch)
    assert _a_worker_error_in_pause_scheduler() == {
        "got": "None", "judged": [("ORCH-INV-205", "rpc_errors_propagated", 0)], "state": EngineState.PAUSED,
        "ends": [Outcome.FINISHED] * 4, "monitor": []}  # fmt: skip


def _a_runtime_raises_in_a_control_rpc(loop: str) -> dict[str, Any]:
    """Async engine; both replicas of stage 1 raise in their first ``control()`` call. Three requests in
    flight; one caller pauses, the loop takes the answers (``sleep(0)``), another caller resumes."""
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)
    runtimes: list[list[Any]] = sim_runtimes(pipeline, 2)
    runtimes[1] = [Raising.around(runtime, control=1) for runtime in runtimes[1]]

    async def main() -> dict[str, Any]:
        engine = AsyncEngine(pipeline, runtimes, loop=loop, on_step=monitor.step)
        await engine.start()
        readers = [asyncio.ensure_future(_read(engine, engine.submit(Prompt(max_tokens=8)))) for _ in range(3)]
        await asyncio.sleep(0)
        paused = await _outcome(engine.control(PAUSE))
        await asyncio.sleep(0)
        resumed = await _outcome(engine.control(RESUME))
        ends = [await reader for reader in readers]
        loop_error = engine.loop_error
        stopped = await _outcome(engine.shutdown())
        return {"got": [repr(paused), repr(resumed)], "judged": _rpc_answers_judged([(True, paused), (False, resumed)]),
                "ends": ends, "loop error": repr(loop_error), "shutdown": repr(stopped),
                "monitor": verdict(monitor)}  # fmt: skip

    return asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_b11_a_runtime_raising_in_a_control_rpc_reaches_only_its_caller(loop):
    """B11 (vllm-omni#7685) from a runtime: ``control()`` raises in two workers; that caller gets
    ``RpcError``, the next caller is answered, the requests in flight finish, the loop stays up."""
    assert _a_runtime_raises_in_a_control_rpc(loop) == {
        "got": ["RpcError('pause_scheduler failed: RuntimeError: control broke')", "None"], "judged": [],
        "ends": [Outcome.FINISHED] * 3, "loop error": "None", "shutdown": "None", "monitor": []}  # fmt: skip


@pytest.mark.parametrize("loop", LOOPS)
def test_b11_a_host_letting_the_runtime_error_escape_is_caught(loop, monkeypatch: pytest.MonkeyPatch):
    """vllm-omni#7685 switched into the host: the first worker's exception reaches the caller raw; the
    second's escapes in the orchestrator loop, which fails every request in flight (FATAL) and refuses the
    next caller. ORCH-INV-205 (rpc_errors_propagated) names it: neither call is answered."""
    _b11_host_lets_it_escape(monkeypatch)
    assert _a_runtime_raises_in_a_control_rpc(loop) == {
        "got": ["RuntimeError('control broke')", "EngineNotRunning('the engine is shut down')"],
        "judged": [("ORCH-INV-205", "rpc_errors_propagated", 0), ("ORCH-INV-205", "rpc_errors_propagated", 1)],
        "ends": [Outcome.FATAL] * 3, "loop error": "RuntimeError('control broke')",
        "shutdown": "OmniRuntimeError('the orchestrator loop failed: RuntimeError: control broke')",
        "monitor": []}  # fmt: skip


@pytest.mark.parametrize("loop", LOOPS)
def test_b11_an_orchestrator_swallowing_a_runtime_error_is_caught(loop, monkeypatch: pytest.MonkeyPatch):
    """B11 switched into the orchestrator, with a runtime that raises: the caller is told the pause
    worked; ORCH-INV-205 (rpc_errors_propagated) names it."""
    _b11_orchestrator_swallows_the_error(monkeypatch)
    assert _a_runtime_raises_in_a_control_rpc(loop) == {
        "got": ["None", "None"], "judged": [("ORCH-INV-205", "rpc_errors_propagated", 0)],
        "ends": [Outcome.FINISHED] * 3, "loop error": "None", "shutdown": "None", "monitor": []}  # fmt: skip


# -- B9 (vllm-omni#322): a runtime reports the engine dead ---------------------------------------------

B9_DEATH = SimConfig(engine_death=(1, 0, 3))  #: seed 0: requests in flight at every stage when 1/0 dies
STOPPED_IN_ORDER = ["orchestrator stopped", *(f"runtime {s}/{r} shut down" for s in range(3) for r in range(2))]


def _b9_orchestrator_ignores_engine_death(monkeypatch: pytest.MonkeyPatch) -> None:
    """B9 switched into the orchestrator: a runtime's ``EngineDead`` is not acted on."""
    monkeypatch.setitem(intake_module._REPORTS, rp.EngineDead, lambda self, stage, replica, report: [])


def _engine_dies_under_four_requests() -> dict[str, Any]:
    """Sync engine, seed 0; replica 1/0 reports ``EngineDead`` at its third step, four requests in
    flight. Read each; return its terminals (count, outcome, stage), the shutdown order, the verdicts."""
    pipeline = demo_pipeline()
    engine, monitor = monitored_engine(pipeline, sim_runtimes(pipeline, 0, B9_DEATH))
    rids = [engine.submit(Prompt(max_tokens=8)) for _ in range(4)]
    ends: list[Any] = []
    for rid in rids:
        try:
            messages = list(engine.outputs(rid))
        except OmniRuntimeError as exc:
            ends.append(str(exc).split(":")[0])
        else:
            ends.append(([m.finished for m in messages].count(True), messages[-1].outcome, messages[-1].stage))
    return {"ends": ends, "state": engine.host.engine_state, "history": engine.host.history,
            "monitor": verdict(monitor)}  # fmt: skip


def test_b9_engine_death_ends_every_request_once_and_shuts_down_in_order():
    """B9 (vllm-omni#322) from a runtime: one FATAL terminal per request in flight; the orchestrator
    stops before every runtime shuts down."""
    assert _engine_dies_under_four_requests() == {
        "ends": [(1, Outcome.FATAL, 0), (1, Outcome.FATAL, 1), (1, Outcome.FATAL, 2), (1, Outcome.FATAL, 0)],
        "state": EngineState.STOPPED, "history": STOPPED_IN_ORDER, "monitor": []}


def test_b9_an_orchestrator_ignoring_engine_death_is_caught(monkeypatch: pytest.MonkeyPatch):
    """B9 switched into the orchestrator: the request on the dead replica never ends (the sync engine
    says no progress), the engine runs on; the monitor names it: ORCH-INV-101 and ORCH-INV-208."""
    _b9_orchestrator_ignores_engine_death(monkeypatch)
    assert _engine_dies_under_four_requests() == {
        "ends": ["no progress", *[(1, Outcome.FINISHED, 2)] * 3],
        "state": EngineState.RUNNING, "history": [],
        "monitor": [("ORCH-INV-101", "one_terminal_per_request", 0), ("ORCH-INV-208", "no_state_after_terminal", 0)]}
