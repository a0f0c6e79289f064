"""The engines at their edges: who hears a listener's error, reports before the loop starts, engine
death, unread mailboxes, a failing shutdown, and what a failed engine keeps of decided work.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from helpers import WatchedDriver, assert_drained

from omni_fsm import ControlMethod, EngineState, Outcome, StageKind
from omni_runtime import AsyncEngine, ClientMessage, Engine, EngineNotRunning, OmniRuntimeError, Prompt, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.engines.host import Host
from omni_runtime.runtimes.sim import SimConfig, instant_runtimes, sim_runtimes

LOOPS = ["event", "poll"]


def _broken(message: ClientMessage) -> None:
    raise ValueError("consumer of B broke")


class Holding:
    """Schedules every request and holds it; aborts and control RPCs are answered only by ``answer()``."""

    def __init__(self) -> None:
        self.sink = None
        self.aborts: list[tuple[int, int]] = []
        self.rpcs: list[int] = []
        self.shut = False

    def bind(self, sink) -> None:
        self.sink = sink

    def add_request(self, req_id, stage_input) -> None:
        self.sink(rp.StatusChanged(req_id, 0, rp.Status.SCHEDULED))

    def abort_requests(self, abort_id, req_ids) -> None:
        self.aborts += [(abort_id, req_id) for req_id in req_ids]

    def control(self, call_id, method, level, tags) -> None:
        self.rpcs.append(call_id)

    def answer(self) -> None:
        for abort_id, req_id in self.aborts:
            self.sink(rp.AbortResult(abort_id, req_id, True))
        for call_id in self.rpcs:
            self.sink(rp.RpcResult(call_id, True))
        self.aborts, self.rpcs = [], []

    def step(self) -> bool:
        return False

    def shutdown(self) -> None:
        self.shut = True


def _one_ar() -> object:
    return simple_pipeline([StageKind.AR], replicas=1, max_running=4)


# -- C2: the synchronous engine: a listener's error is its own request's, and no answer is stranded --


def test_a_listener_error_of_another_request_does_not_end_the_request_being_read():
    pipeline = _one_ar()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1))
    a = engine.submit(Prompt((1, 2)))
    b = engine.submit(Prompt((3, 4)), listener=_broken)
    messages = list(engine.outputs(a))
    assert [m.finished for m in messages].count(True) == 1
    assert messages[-1].outcome is Outcome.FINISHED
    with pytest.raises(OmniRuntimeError, match=f"^the listener of request {b} raised ValueError"):
        engine.run_until_idle()
    assert b not in engine.orchestrator.routes and engine.host.mailboxes == {}
    engine.run_until_idle()  # reported once
    engine.shutdown()
    assert_drained(engine.orchestrator)


def test_an_abort_is_answered_although_another_listener_raises_meanwhile():
    pipeline = _one_ar()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1))
    x = engine.submit(Prompt((5,)))
    engine.host.pump()
    engine.submit(Prompt((6,)), listener=_broken)
    assert engine.abort(x) is True
    assert engine.host.abort_answers == {}
    with pytest.raises(OmniRuntimeError, match="the listener of request 1 raised"):
        engine.run_until_idle()


def test_a_control_call_is_answered_although_another_listener_raises_meanwhile():
    pipeline = _one_ar()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1))
    engine.submit(Prompt((6,)), listener=_broken)
    assert engine.control(ControlMethod.PAUSE_SCHEDULER) is None
    assert engine.host.rpc_answers == {}


def test_outputs_that_cannot_progress_keeps_its_request_and_mailbox():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1), max_idle_rounds=5)
    engine.control(ControlMethod.PAUSE_SCHEDULER)
    rid = engine.submit(Prompt((1,)))
    with pytest.raises(OmniRuntimeError, match="no progress"):
        list(engine.outputs(rid))
    assert rid in engine.orchestrator.routes and rid in engine.host.mailboxes
    engine.control(ControlMethod.RESUME_SCHEDULER)
    messages = list(engine.outputs(rid))
    assert [m.finished for m in messages].count(True) == 1 and messages[-1].outcome is Outcome.FINISHED
    assert engine.host.mailboxes == {}


def test_a_consumer_that_breaks_early_aborts_its_request_and_drops_its_mailbox():
    pipeline = _one_ar()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1))
    rid = engine.submit(Prompt((1,), max_tokens=50))
    for _ in engine.outputs(rid):
        break
    engine.run_until_idle()
    assert rid not in engine.orchestrator.routes and engine.host.mailboxes == {}
    assert engine.host._unclaimed == set() and engine.host.abort_answers == {}


def test_an_abort_whose_wait_raises_leaves_no_answer_behind():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    runtime = Holding()
    engine = Engine(pipeline, [[runtime]], max_idle_rounds=3)
    rid = engine.submit(Prompt((1,)))
    with pytest.raises(OmniRuntimeError, match="no progress"):
        engine.abort(rid)
    runtime.answer()
    engine.run_until_idle()
    assert engine.host.abort_answers == {} and engine.host._unclaimed == set()


def test_a_control_call_whose_wait_raises_leaves_no_answer_behind():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    runtime = Holding()
    engine = Engine(pipeline, [[runtime]], max_idle_rounds=3)
    with pytest.raises(OmniRuntimeError, match="no progress"):
        engine.control(ControlMethod.PAUSE_SCHEDULER)
    runtime.answer()
    engine.run_until_idle()
    assert engine.host.rpc_answers == {} and engine.host._unclaimed == set()


def test_the_sync_shutdown_raises_a_listener_error_nobody_was_told_of():
    pipeline = _one_ar()
    engine = Engine(pipeline, sim_runtimes(pipeline, seed=1))
    b = engine.submit(Prompt((3, 4)), listener=_broken)
    list(engine.outputs(engine.submit(Prompt((1,)))))
    with pytest.raises(OmniRuntimeError, match=f"^the listener of request {b} raised ValueError"):
        engine.shutdown()
    assert engine.host.runtimes_stopped and engine.host.listener_errors == []
    engine.shutdown()  # reported once


# -- C3: the event loop takes reports buffered before it started; abort and control start it --------


def test_control_before_start_starts_the_loop():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)

    async def main():
        engine = AsyncEngine(pipeline, instant_runtimes(pipeline))
        await asyncio.wait_for(engine.control(ControlMethod.RESUME_SCHEDULER), 2)
        await engine.shutdown()
        return engine

    assert asyncio.run(main()).host.rpc_answers == {}


def test_abort_before_start_starts_the_loop():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    got: list[ClientMessage] = []

    async def main():
        engine = AsyncEngine(pipeline, [[Holding()]])
        rid = engine.submit(Prompt((1,)), listener=got.append)
        runtime = engine.host.runtimes[0][0]
        abort = asyncio.ensure_future(engine.abort(rid))
        for _ in range(20):
            await asyncio.sleep(0)
        runtime.answer()
        ok = await asyncio.wait_for(abort, 2)
        await engine.shutdown()
        return ok

    assert asyncio.run(main()) is True
    assert [(m.finished, m.outcome) for m in got] == [(True, Outcome.ABORTED)]


def test_a_report_buffered_before_start_is_taken_when_the_event_loop_starts():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)

    async def main():
        engine = AsyncEngine(pipeline, instant_runtimes(pipeline))
        engine.host.control(ControlMethod.RESUME_SCHEDULER)  # answered at once, into the buffer
        await engine.start()
        messages = await asyncio.wait_for(_consume(engine.generate(Prompt((1,)))), 2)
        buffered = [list(b) for replicas in engine.host.buffers for b in replicas]
        await engine.shutdown()
        return messages, buffered

    messages, buffered = asyncio.run(main())
    assert [m.finished for m in messages] == [False, True] and messages[-1].outcome is Outcome.FINISHED
    assert buffered == [[]]


async def _consume(stream) -> list[ClientMessage]:
    return [m async for m in stream]


# -- C6: engine death ends every request and shuts the system down in order, by itself -------------


DEATHS = {
    "engine_dead": SimConfig(engine_death=(1, 0, 3)),
    "last_replica_lost": SimConfig(replica_deaths=((1, 0, 3),)),
}
STOPPED_IN_ORDER = ["orchestrator stopped", "runtime 0/0 shut down", "runtime 1/0 shut down"]


def _two_stages():
    return simple_pipeline([StageKind.AR, StageKind.AR], final=[False, True], replicas=1, max_running=8)


@pytest.mark.parametrize("death", sorted(DEATHS))
def test_engine_death_shuts_the_sync_engine_down_in_order(death):
    pipeline = _two_stages()
    runtimes = sim_runtimes(pipeline, 1, DEATHS[death])
    engine = Engine(pipeline, runtimes)
    rids = [engine.submit(Prompt((i,), max_tokens=200)) for i in range(4)]
    ends = [list(engine.outputs(rid)) for rid in rids]
    assert [[m.finished for m in ms].count(True) for ms in ends] == [1, 1, 1, 1]
    assert [ms[-1].outcome for ms in ends] == [Outcome.FATAL] * 4
    assert engine.host.engine_state is EngineState.STOPPED
    assert engine.host.history == STOPPED_IN_ORDER
    assert [r.closed for replicas in runtimes for r in replicas] == [True, True]
    engine.shutdown()  # idempotent, and nothing to raise
    assert engine.host.history == STOPPED_IN_ORDER
    assert_drained(engine.orchestrator)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("death", sorted(DEATHS))
def test_engine_death_shuts_the_async_engine_down_in_order_without_a_shutdown_call(death, loop):
    pipeline = _two_stages()
    runtimes = sim_runtimes(pipeline, 1, DEATHS[death])

    async def main():
        engine = AsyncEngine(pipeline, runtimes, loop=loop)
        await engine.start()
        ends = await asyncio.wait_for(
            asyncio.gather(*(_consume(engine.generate(Prompt((i,), max_tokens=200))) for i in range(4))), 10)
        for _ in range(1000):
            if engine.host.runtimes_stopped:
                break
            await asyncio.sleep(0.001)
        stopped_by_itself = (engine.host.runtimes_stopped, list(engine.host.history), engine._tasks)
        with pytest.raises(EngineNotRunning):
            await _consume(engine.generate(Prompt((9,))))
        await engine.shutdown()
        await engine.shutdown()
        return ends, stopped_by_itself, engine

    ends, (stopped, history, tasks), engine = asyncio.run(main())
    assert [[m.finished for m in ms].count(True) for ms in ends] == [1, 1, 1, 1]
    assert [ms[-1].outcome for ms in ends] == [Outcome.FATAL] * 4
    assert stopped and tasks == []
    assert history == ["orchestrator stopped", "orchestrator loop ended", *STOPPED_IN_ORDER[1:]]
    assert engine.host.history == history
    assert [r.closed for replicas in runtimes for r in replicas] == [True, True]
    assert_drained(engine.host.orchestrator)


def _cannot_stop(runtime) -> None:
    real = runtime.shutdown

    def shutdown() -> None:
        real()
        raise RuntimeError("cannot stop")

    runtime.shutdown = shutdown


def test_a_runtime_that_cannot_stop_after_engine_death_is_raised_by_the_sync_shutdown_once():
    pipeline = _two_stages()
    runtimes = sim_runtimes(pipeline, 1, DEATHS["engine_dead"])
    _cannot_stop(runtimes[0][0])
    engine = Engine(pipeline, runtimes)
    rids = [engine.submit(Prompt((i,), max_tokens=200)) for i in range(2)]
    ends = [list(engine.outputs(rid)) for rid in rids]
    assert [ms[-1].outcome for ms in ends] == [Outcome.FATAL] * 2
    assert engine.host.history == ["orchestrator stopped", "runtime 0/0 raised in shutdown", "runtime 1/0 shut down"]
    with pytest.raises(OmniRuntimeError, match=r"^shutdown raised in runtime 0/0: RuntimeError: cannot stop$"):
        engine.shutdown()
    engine.shutdown()


def test_a_runtime_that_cannot_stop_after_engine_death_is_raised_by_the_async_shutdown_once():
    pipeline = _two_stages()
    runtimes = sim_runtimes(pipeline, 1, DEATHS["engine_dead"])
    _cannot_stop(runtimes[0][0])

    async def main():
        engine = AsyncEngine(pipeline, runtimes)
        ends = await asyncio.wait_for(_consume(engine.generate(Prompt((1,), max_tokens=200))), 10)
        for _ in range(1000):
            if engine.host.runtimes_stopped:
                break
            await asyncio.sleep(0.001)
        with pytest.raises(OmniRuntimeError, match=r"^shutdown raised in runtime 0/0: RuntimeError: cannot stop$"):
            await engine.shutdown()
        await engine.shutdown()
        return ends, engine

    ends, engine = asyncio.run(main())
    assert ends[-1].outcome is Outcome.FATAL
    assert engine.host.history == ["orchestrator stopped", "orchestrator loop ended", "runtime 0/0 raised in shutdown",
                                   "runtime 1/0 shut down"]  # fmt: skip


# -- C7: a request submitted without a listener is read with ``outputs`` and leaves no mailbox -----


def test_an_async_request_without_a_listener_is_read_with_outputs_and_leaves_no_mailbox():
    pipeline = _one_ar()

    async def main():
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, seed=1)) as engine:
            rids = [engine.submit(Prompt((i,))) for i in range(3)]
            ends = [await asyncio.wait_for(_consume(engine.outputs(rid)), 10) for rid in rids]
        return ends, engine

    ends, engine = asyncio.run(main())
    assert [[m.finished for m in ms].count(True) for ms in ends] == [1, 1, 1]
    assert [ms[-1].outcome for ms in ends] == [Outcome.FINISHED] * 3
    assert engine.host.mailboxes == {}


def test_an_async_reader_that_stops_early_aborts_its_request_and_drops_its_mailbox():
    pipeline = _one_ar()

    async def main():
        async with AsyncEngine(pipeline, sim_runtimes(pipeline, seed=1)) as engine:
            rid = engine.submit(Prompt((1,), max_tokens=100))
            stream = engine.outputs(rid)
            first = await asyncio.wait_for(stream.__anext__(), 10)
            await stream.aclose()
            for _ in range(1000):
                if rid not in engine.host.orchestrator.routes:
                    break
                await asyncio.sleep(0.001)
            held = (dict(engine.host.mailboxes), rid in engine.host.orchestrator.routes)
        return first, held

    first, (mailboxes, open_) = asyncio.run(main())
    assert not first.finished and mailboxes == {} and open_ is False


# -- C8 / S1: the async engine reports what went wrong, once, and keeps no unbounded tracebacks -----


def test_async_listener_errors_are_logged_and_raised_by_shutdown_and_not_kept(caplog):
    pipeline = _one_ar()

    async def main():
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, seed=1))
        await engine.start()
        rids = [engine.submit(Prompt((i,)), listener=_broken) for i in range(40)]
        for _ in range(2000):
            if not engine.host.orchestrator.routes:
                break
            await asyncio.sleep(0.001)
        kept = len(engine.host.listener_errors)
        with pytest.raises(OmniRuntimeError, match=r"^the listeners of 40 requests raised") as raised:
            await engine.shutdown()
        await engine.shutdown()  # reported once
        return rids, kept, str(raised.value), engine

    with caplog.at_level(logging.ERROR, logger="omni_runtime"):
        rids, kept, text, engine = asyncio.run(main())
    assert kept == Host.LISTENER_ERRORS_KEPT
    assert f"request {rids[0]} raised ValueError('consumer of B broke')" in text
    assert engine.host.listener_errors == [] and engine.host.runtimes_stopped
    logged = [r for r in caplog.records if r.name == "omni_runtime" and "listener of request" in r.getMessage()]
    assert len(logged) == 40


def test_a_failing_orchestrator_shutdown_is_raised_and_ends_open_consumers():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)

    async def main():
        engine = AsyncEngine(pipeline, sim_runtimes(pipeline, 1, SimConfig(park=1.0)))
        await engine.start()

        def broken_shutdown():
            raise RuntimeError("bug while shutting down")

        engine.host.orchestrator.shutdown = broken_shutdown
        consumer = asyncio.ensure_future(_consume(engine.generate(Prompt((1,), max_tokens=100000))))
        await asyncio.sleep(0.002)
        with pytest.raises(OmniRuntimeError, match="shutting down failed: RuntimeError: bug while shutting down"):
            await engine.shutdown()
        ended = await asyncio.wait_for(asyncio.gather(consumer, return_exceptions=True), 2)
        return engine, ended[0]

    engine, ended = asyncio.run(main())
    assert engine.host.runtimes_stopped
    assert isinstance(ended, EngineNotRunning) and "shut down before request 0 ended" in str(ended)


# -- S2: a failed engine still delivers what was decided and carries out no more runtime work -------


def test_failing_the_engine_keeps_decided_deliveries_and_answers_and_drops_runtime_commands():
    pipeline = simple_pipeline([StageKind.AR], replicas=1)
    runtime = Holding()
    engine = Engine(pipeline, [[runtime]])
    host = engine.host
    rid = engine.submit(Prompt((1,)))
    dispatched: list[int] = []
    runtime.add_request = lambda req_id, stage_input: dispatched.append(req_id)

    def broken_answered(answer):
        raise RuntimeError("a bug while answering")

    driver, host.driver = host.driver, WatchedDriver(host.driver, broken_answered)
    partial = ClientMessage(rid, 0, data=(5,))
    with pytest.raises(RuntimeError, match="a bug while answering"):
        host.execute([cmd.AbortAnswer(90, rid, True), cmd.Dispatch(rid, 0, 0, None), cmd.Deliver(partial),
                      cmd.RpcAnswer(91, ControlMethod.PAUSE_SCHEDULER, True)])  # fmt: skip
    host.driver = driver
    host.fail_engine()
    assert dispatched == []
    box = list(host.mailboxes[rid])
    assert box[0] is partial and len(box) == 2 and box[1].finished and box[1].outcome is Outcome.FATAL
    assert sorted(host.rpc_answers) == [91] and sorted(host.abort_answers) == [90]
    assert host.history == ["orchestrator stopped", "runtime 0/0 shut down"] and runtime.shut


# -- review: shutdown cancelled, shutdown twice at once, abort after the engine stopped ---------------


class Dying(Holding):
    """A ``Holding`` replica that can report the engine's death."""

    def die(self) -> None:
        self.sink(rp.EngineDead())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_shutdown_cancelled_after_engine_death_leaves_the_runtimes_shut_down(loop):
    replicas = [Dying(), Dying()]

    async def main() -> list[str]:
        engine = AsyncEngine(_two_stages(), [[replicas[0]], [replicas[1]]], loop=loop)
        await engine.start()
        engine.submit(Prompt((1,)))
        await asyncio.sleep(0.01)
        replicas[0].die()  # the engine stops its orchestrator by itself, then ends its loops
        first = asyncio.ensure_future(engine.shutdown())
        await asyncio.sleep(0)
        first.cancel()  # a timeout or Ctrl-C around the caller's shutdown
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(engine.shutdown(), 5)  # neither cancelled nor half-done
        return engine.host.history

    history = asyncio.run(main())
    assert history == ["orchestrator stopped", "orchestrator loop ended", "runtime 0/0 shut down",
                       "runtime 1/0 shut down"]  # fmt: skip
    assert [r.shut for r in replicas] == [True, True]


@pytest.mark.parametrize("loop", LOOPS)
def test_two_shutdowns_at_once_both_return_after_the_loops_ended_and_the_runtimes_stopped_once(loop):
    pipeline = _two_stages()
    runtimes = sim_runtimes(pipeline, 1)
    stopped: list[int] = []

    async def main() -> list[str]:
        engine = AsyncEngine(pipeline, runtimes, loop=loop)
        await engine.start()
        for i in range(3):
            engine.submit(Prompt((i,), max_tokens=100))
        await asyncio.sleep(0.01)
        loops = list(engine._tasks)
        real = engine.host.shutdown_runtimes

        def counted() -> None:
            stopped.append(sum(not t.done() for t in loops))
            real()

        engine.host.shutdown_runtimes = counted  # type: ignore[method-assign]

        async def one() -> int:
            await engine.shutdown()
            return sum(not t.done() for t in loops)

        left = await asyncio.gather(one(), one())
        assert left == [0, 0]
        return engine.host.history

    history = asyncio.run(main())
    assert stopped == [0]  # once, after every loop task ended
    assert history == ["orchestrator stopped", "orchestrator loop ended", "runtime 0/0 shut down",
                       "runtime 1/0 shut down"]  # fmt: skip


def test_an_async_abort_after_the_engine_died_has_nothing_left_to_abort():
    replica = Dying()

    async def main() -> tuple[bool, list[tuple[bool, Outcome | None]]]:
        engine = AsyncEngine(_one_ar(), [[replica]])
        await engine.start()
        rid = engine.submit(Prompt((1,)))
        await asyncio.sleep(0.01)
        replica.die()
        await asyncio.sleep(0.01)
        ok = await engine.abort(rid)
        rest = [(m.finished, m.outcome) async for m in engine.outputs(rid)]
        await engine.shutdown()
        return ok, rest

    assert asyncio.run(main()) == (True, [(True, Outcome.FATAL)])


class SlowAndSilent(Holding):
    """Works ``steps`` steps on each request without a word (a long diffusion sample), then finishes it."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.left, self.queue = steps, {}, []

    def add_request(self, req_id, stage_input) -> None:
        super().add_request(req_id, stage_input)
        self.left[req_id] = self.steps

    def step(self) -> bool:
        for req_id in list(self.left):
            self.left[req_id] -= 1
            if not self.left[req_id]:
                del self.left[req_id]
                self.sink(rp.Finished(req_id, 1))
        return bool(self.left)


def test_a_runtime_busy_and_silent_for_long_is_waited_for_unless_a_silence_limit_is_set():
    assert Engine(_one_ar(), [[SlowAndSilent(1500)]]).generate(Prompt())[-1].outcome is Outcome.FINISHED
    engine = Engine(_one_ar(), [[SlowAndSilent(1500)]], max_silent_rounds=1000)
    with pytest.raises(OmniRuntimeError, match="busy but reported nothing for 1000 rounds"):
        engine.generate(Prompt())


def test_a_closing_task_cancelled_by_someone_else_is_made_again_by_shutdown():
    replicas = [Dying(), Dying()]

    async def main() -> list[str]:
        engine = AsyncEngine(_two_stages(), [[replicas[0]], [replicas[1]]])
        await engine.start()
        engine.submit(Prompt((1,)))
        await asyncio.sleep(0.01)
        replicas[0].die()
        while engine._closing is None:
            await asyncio.sleep(0)
        engine._closing.cancel()  # an application (or a loop's teardown) cancelling every task
        await asyncio.sleep(0)
        await asyncio.wait_for(engine.shutdown(), 5)
        return engine.host.history

    assert asyncio.run(main())[-2:] == ["runtime 0/0 shut down", "runtime 1/0 shut down"]
    assert [r.shut for r in replicas] == [True, True]


def test_an_abort_after_a_shutdown_that_failed_is_refused_not_left_waiting(monkeypatch):
    def breaks(self) -> None:
        raise RuntimeError("shutdown broke")

    async def main() -> None:
        engine = AsyncEngine(_one_ar(), [[Holding()]])
        await engine.start()
        rid = engine.submit(Prompt((1,)))
        await asyncio.sleep(0.01)
        monkeypatch.setattr(type(engine.host.orchestrator), "shutdown", breaks)
        with pytest.raises(OmniRuntimeError, match="shutdown broke"):
            await engine.shutdown()
        with pytest.raises(EngineNotRunning, match="the engine is shut down"):
            await asyncio.wait_for(engine.abort(rid), 5)

    asyncio.run(main())


def test_a_hook_that_raises_at_shutdown_is_raised_by_shutdown_which_still_completes():
    def breaks_on_shutdown(event, outputs) -> None:
        if type(event).__name__ == "Shutdown":
            raise RuntimeError("hook broke")

    async def main() -> tuple[list[str], bool]:
        engine = AsyncEngine(_one_ar(), [[Holding()]], on_step=breaks_on_shutdown)
        await engine.start()
        rid = engine.submit(Prompt((1,)))
        await asyncio.sleep(0.01)
        with pytest.raises(OmniRuntimeError, match="the on_step hook raised RuntimeError: hook broke"):
            await engine.shutdown()
        return engine.host.history, await asyncio.wait_for(engine.abort(rid), 5)  # nothing left to abort

    assert asyncio.run(main()) == (["orchestrator stopped", "orchestrator loop ended", "runtime 0/0 shut down"], True)
