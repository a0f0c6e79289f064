"""Factories and a parent program for the ``ProcessRuntime`` tests (module-level: they must be importable)."""

from __future__ import annotations

import os
import signal
import sys
import time

from omni_fsm import StageKind
from omni_runtime import Engine, Prompt, simple_pipeline
from omni_runtime.hosting.process import ProcessRuntime
from omni_runtime.runtimes.sim import SimAR

#: the simulator with its defaults (no injected faults), as a ProcessRuntime factory name
SIM = "omni_runtime.runtimes.sim:sim_replica"


def sim_in_process(spec, stage, replica, rpc_fails):
    """Return the conformance kit's reference runtime (the simulator, every legal behaviour on) in a child process."""
    return ProcessRuntime("omni_runtime.testing:sim_factory", spec, stage, replica, rpc_fails)


class RaisesInStep(SimAR):
    """The simulator, except that its ``raise_at``-th step reports one output, then raises."""

    def __init__(self, spec, stage, replica, raise_at):
        super().__init__(spec, stage, replica)
        self.raise_at = raise_at

    def step(self):
        busy = super().step()
        if self.steps == self.raise_at:
            raise ValueError(f"broken at step {self.steps}")
        return busy


def raises_in_step(spec, stage, replica, raise_at=2):
    """Return a ``RaisesInStep`` (run in the child)."""
    return RaisesInStep(spec, stage, replica, raise_at)


class SleepsInStep(SimAR):
    """The simulator, except that its steps never end (a hung engine): only a signal stops it."""

    def step(self):
        time.sleep(3600)
        return super().step()


def sleeps_in_step(spec, stage, replica):
    """Return a ``SleepsInStep`` (run in the child)."""
    return SleepsInStep(spec, stage, replica)


def cannot_build(spec, stage, replica):
    """Raise, as a factory given a bad configuration does."""
    raise RuntimeError("no such model")


_kept: list[Engine] = []  #: engines nobody shuts down (mode ``atexit``)


def parent(mode: str) -> None:
    """Run an engine of two ProcessRuntime stages, print the children's pids, then end as ``mode`` says.

    ``shutdown``: serve one request, shut the engine down and return; ``atexit``: serve one request
    and return without shutting down, the engine still referenced (the atexit hook stops the
    children); ``serve``: serve requests until a signal comes; ``stuck``: the second stage's runtime
    hangs in its first step (so its child never reads end-of-file) until a signal comes. SIGTERM and
    SIGINT raise ``SystemExit``, and the engine is shut down on the way out (``finally``); a parent
    killed with SIGKILL relies on the children's ``PR_SET_PDEATHSIG``.
    """

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR])
    second = f"{__name__}:sleeps_in_step" if mode == "stuck" else SIM
    runtimes = [[ProcessRuntime(SIM, pipeline.stages[0], 0, 0)], [ProcessRuntime(second, pipeline.stages[1], 1, 0)]]
    engine = Engine(pipeline, runtimes)
    if mode == "atexit":
        _kept.append(engine)
    try:
        print(" ".join(str(r.pid) for stage in runtimes for r in stage), flush=True)
        engine.generate(Prompt((1, 2, 3)))
        while mode in ("serve", "stuck"):
            engine.generate(Prompt((os.getpid() % 97,)))
            time.sleep(0.001)
    finally:
        if mode != "atexit":
            engine.shutdown()


if __name__ == "__main__":
    parent(sys.argv[1])


class BusyAndSilent(SimAR):
    """The simulator, except that once given a request it says it is busy for ever and reports nothing (a stall)."""

    def add_request(self, req_id, stage_input):
        self.held = True

    def step(self):
        return getattr(self, "held", False)


def busy_and_silent(spec, stage, replica):
    """Return a ``BusyAndSilent`` (run in the child)."""
    return BusyAndSilent(spec, stage, replica)
