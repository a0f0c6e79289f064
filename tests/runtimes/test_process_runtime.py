"""ProcessRuntime: a stage runtime in a child process keeps the protocol, dies loudly once, and never outlives us."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omni_fsm import Outcome, StageKind
from omni_runtime import Engine, Prompt, StageInput, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.errors import ConfigError
from omni_runtime.hosting.process import ChildRaised, ProcessRuntime, process_runtimes
from omni_runtime.testing import check_runtime
from tests.runtimes.process_factories import SIM, sim_in_process
from tests.runtimes.real_engines import RecordsReports

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = "tests.runtimes.process_factories"


def gone(pid: int) -> bool:
    """Return whether process ``pid`` has exited (a zombie, exited but not reaped yet, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"  # the state follows the command name, which may hold spaces


def all_gone(pids, within: float = 10.0) -> list[int]:
    """Wait up to ``within`` seconds for every pid to be gone; return those still alive."""
    deadline = time.monotonic() + within
    while True:
        alive = [pid for pid in pids if not gone(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


class Recorded(RecordsReports, ProcessRuntime):
    """A ProcessRuntime that also keeps every report it hands to its sink (in the parent)."""


def test_the_conformance_kit_passes_on_the_simulator_in_a_child_process():
    check_runtime(sim_in_process, max_examples=10)


def test_requests_finish_through_the_engine_and_the_children_are_gone_after_shutdown():
    pipeline = simple_pipeline([StageKind.AR])
    runtimes = process_runtimes(pipeline, SIM)
    engine = Engine(pipeline, runtimes)
    rids = [engine.submit(Prompt((i, 1, 2))) for i in range(5)]
    ends = [list(engine.outputs(rid))[-1] for rid in rids]
    assert [m.outcome for m in ends] == [Outcome.FINISHED] * 5
    pids = [r.pid for r in runtimes[0]]
    engine.shutdown()
    assert all_gone(pids, within=0) == []
    engine.shutdown()  # idempotent


def test_a_killed_child_fails_its_requests_once_and_the_other_replica_serves_on():
    pipeline = simple_pipeline([StageKind.AR], replicas=2)
    runtimes = [[Recorded(SIM, pipeline.stages[0], 0, r) for r in range(2)]]
    engine = Engine(pipeline, runtimes)
    rids = [engine.submit(Prompt((i, 5), max_tokens=200)) for i in range(6)]
    routes = engine.orchestrator.routes
    bound = {rid: routes[rid].replica for rid in rids}
    assert sorted(set(bound.values())) == [0, 1]
    engine.host.pump()  # mid-run: work started on both replicas
    assert all(rid in routes for rid in rids)  # none has ended yet
    victim = runtimes[0][0]
    os.kill(victim.pid, signal.SIGKILL)
    messages = {rid: list(engine.outputs(rid)) for rid in rids}
    engine.run_until_idle()
    for rid, ms in messages.items():
        assert [m.finished for m in ms].count(True) == 1 and ms[-1].finished
        assert ms[-1].outcome is (Outcome.FAILED if bound[rid] == 0 else Outcome.FINISHED), (rid, ms[-1])
    died = [r for r in victim.reports if isinstance(r, rp.ReplicaDied)]
    assert len(died) == 1 and victim.reports[-1] == rp.ReplicaDied() and victim.lost
    assert not any(isinstance(r, rp.ReplicaDied) for r in runtimes[0][1].reports)
    assert victim.step() is False  # a lost child: every call is a no-op
    victim.add_request(99, StageInput((1,)))
    assert len([r for r in victim.reports if isinstance(r, rp.ReplicaDied)]) == 1
    engine.shutdown()
    assert all_gone([r.pid for r in runtimes[0]], within=0) == []


def test_an_exception_in_the_child_is_raised_in_the_parent_and_the_host_loses_that_replica():
    pipeline = simple_pipeline([StageKind.AR])
    runtime = Recorded(f"{FACTORIES}:raises_in_step", pipeline.stages[0], 0, 0, 2)
    engine = Engine(pipeline, [[runtime]])
    messages = engine.generate(Prompt((1, 2), max_tokens=200))
    assert messages[-1].outcome is Outcome.FATAL  # its only replica is lost: the engine is dead
    assert any("raised in step: ChildRaised: ValueError: broken at step 2" in h for h in engine.host.history)
    assert runtime.lost is None  # raising is not dying: the child lives on until shutdown
    assert type(runtime.reports[-1]) is rp.Output  # what step 2 reported before it raised went to the sink first
    assert not any(isinstance(r, rp.ReplicaDied) for r in runtime.reports)  # the host reports the loss, not it
    engine.shutdown()
    assert all_gone([runtime.pid], within=0) == []


def test_the_child_traceback_comes_with_the_exception():
    pipeline = simple_pipeline([StageKind.AR])
    runtime = ProcessRuntime(f"{FACTORIES}:raises_in_step", pipeline.stages[0], 0, 0, 1)
    runtime.bind(lambda report: None)
    with pytest.raises(ChildRaised, match="ValueError: broken at step 1") as caught:
        runtime.step()
    assert "raise ValueError" in (caught.value.child_traceback or "")
    runtime.shutdown()


def test_a_factory_that_raises_in_the_child_makes_bind_raise():
    runtime = ProcessRuntime(f"{FACTORIES}:cannot_build", simple_pipeline([StageKind.AR]).stages[0], 0, 0)
    with pytest.raises(ChildRaised, match=r"cannot build .*RuntimeError: no such model"):
        runtime.bind(lambda report: None)
    assert all_gone([runtime.pid], within=0) == []


def test_a_factory_name_without_a_colon_is_refused_before_any_process_starts():
    with pytest.raises(ConfigError, match=r"package\.module:callable"):
        ProcessRuntime("omni_runtime.runtimes.sim.sim_replica")


def test_shutdown_is_idempotent_and_nothing_is_reported_after_it():
    runtime = Recorded(SIM, simple_pipeline([StageKind.AR]).stages[0], 0, 0)
    runtime.bind(lambda report: None)
    runtime.add_request(1, StageInput((1, 2)))
    runtime.shutdown()
    runtime.shutdown()
    assert runtime.step() is False
    runtime.add_request(2, StageInput((1,)))
    assert runtime.reports == [] and runtime.lost is None
    assert all_gone([runtime.pid], within=0) == []


def test_a_runtime_nobody_shuts_down_stops_its_child_when_collected():
    runtime = ProcessRuntime(SIM, simple_pipeline([StageKind.AR]).stages[0], 0, 0)
    runtime.bind(lambda report: None)
    pid = runtime.pid
    del runtime
    gc.collect()
    assert all_gone([pid], within=5) == []


@pytest.mark.parametrize(("mode", "end"), [
    ("shutdown", None), ("atexit", None),
    ("serve", "SIGTERM"), ("serve", "SIGINT"), ("serve", "SIGINT to the group"), ("serve", "SIGKILL"),
    ("stuck", "SIGTERM"), ("stuck", "SIGINT to the group"), ("stuck", "SIGKILL"),
])  # fmt: skip
def test_no_child_outlives_its_parent(mode, end):
    parent = subprocess.Popen([sys.executable, "-c", f"from {FACTORIES} import parent; parent({mode!r})"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    try:
        line = parent.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, (line, parent.stderr.read() if parent.poll() is not None else "")
        if end is not None:
            time.sleep(0.3)  # serving, or hung in the second stage's step
            signum = getattr(signal, end.split()[0])
            if end.endswith("group"):  # Ctrl-C in a terminal: the children get it too, and ignore it
                os.killpg(parent.pid, signum)
            else:
                parent.send_signal(signum)
        parent.wait(timeout=20)
        assert all_gone(pids, within=5) == []
        if end is not None and not end.startswith("SIGKILL"):  # the handler's SystemExit shut the engine down
            assert parent.returncode == 128 + signum, parent.stderr.read()[-3000:]
        assert "Traceback" not in parent.stderr.read()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
        parent.stderr.close()
