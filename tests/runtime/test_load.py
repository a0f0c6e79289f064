"""Under load (10,000 requests, 20% aborted at random moments, simulator faults on) nothing is lost or kept.

Every request gets exactly one terminal; after the drain no state remains in the orchestrator,
the lifecycle or the host; and traced memory returns to within 1% of where it was after a warm-up
run. Outside the simulated runtimes, within 1% either way; all of it, no more than 1% higher (the
simulated runtimes' maps may shrink with CPython's dict resizing: that is no leak). The runtimes
are checked empty apart.
"""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing
import random
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from helpers import assert_drained

import omni_fsm
import omni_runtime
import omni_runtime.runtimes.sim
from omni_fsm import StageKind
from omni_runtime import ClientMessage, Engine, Prompt, simple_pipeline
from omni_runtime.runtimes.sim import SimConfig, sim_runtimes

REQUESTS = 10_000
ABORT_RATE = 0.2
WINDOW = 256  #: requests in flight at most (a client's concurrency)
PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION], final=[False, True, True],
                           replicas=2, max_running=64, max_tokens=2, steps=1)  # fmt: skip


#: the simulated runtimes' files: what they allocate is left out of the traced memory compared
_STAGES = tracemalloc.Filter(False, str(Path(omni_runtime.runtimes.sim.__file__).parent / "*"))
#: what the project's code allocated (a project frame anywhere in the allocation's traceback): another thread of
#: the test process (an earlier test's, the test runner's) allocates meanwhile, and that is not the engine's
_PROJECT = [tracemalloc.Filter(True, str(Path(package.__file__).parent / "*"), all_frames=True)
            for package in (omni_fsm, omni_runtime)]  # fmt: skip
_FRAMES = 5  #: traceback depth: enough to reach a project frame from inside the standard library (16: the same)


def _traced(stages: bool = False) -> int:
    """Return the bytes the project's code allocated and still holds, outside the simulated runtimes (``stages``:
    theirs too)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(_PROJECT)
    if not stages:
        snapshot = snapshot.filter_traces([_STAGES])
    return sum(trace.size for trace in snapshot.traces)


class _Load:
    """Submits ``requests`` through a window, aborts a fifth of them at random pump rounds, counts terminals."""

    def __init__(self, engine: Engine, requests: int, seed: int) -> None:
        self.engine, self.requests, self.rng = engine, requests, random.Random(seed)
        self.submitted = 0
        self.terminals: Counter[int] = Counter()
        self.aborts: dict[int, list[int]] = {}  #: pump round -> rids to abort then
        self.round = 0

    def on_message(self, message: ClientMessage) -> None:
        if message.finished:
            self.terminals[message.rid] += 1
            self.submit()  # keep the window full

    def submit(self) -> None:
        if self.submitted == self.requests:
            return
        self.submitted += 1
        roll = self.rng.random()
        n, companions = (2, 0) if roll < 0.1 else (1, 1) if roll < 0.2 else (1, 0)
        rid = self.engine.submit(Prompt((int(roll < 0.5), 2, 3)), n, companions, listener=self.on_message)
        if self.rng.random() < ABORT_RATE:  # before scheduling, mid-stage, between stages or after the end
            self.aborts.setdefault(self.round + 1 + self.rng.randint(0, 12), []).append(rid)

    def run(self) -> None:
        for _ in range(min(WINDOW, self.requests)):
            self.submit()
        host, idle = self.engine.host, 0
        while idle < 2:
            for rid in self.aborts.pop(self.round, ()):
                self.engine.abort_nowait(rid)
            moved = host.pump() or bool(self.aborts)
            idle = 0 if moved else idle + 1
            self.round += 1
            assert self.round < 200_000, "no progress"


def _run(engine: Engine, requests: int, seed: int) -> _Load:
    load = _Load(engine, requests, seed)
    load.run()
    return load


def test_load_every_request_ends_once_and_nothing_is_kept():
    """Run in a process of its own (spawned): the traced memory is then the engine's and the load's alone, whatever
    the tests that ran before in this process left behind (caches, free lists, other threads)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        print(pool.submit(measure_load).result(timeout=900))


def measure_load() -> str:
    """The load, its checks and its memory figures; return the summary line (raise ``AssertionError`` on a failure)."""
    started = time.perf_counter()
    tracemalloc.start(_FRAMES)  # the engine itself is part of the starting level
    try:
        engine = Engine(PIPELINE, sim_runtimes(PIPELINE, 1, SimConfig.faulty(0.05)))
        _run(engine, 1_000, seed=0)  # warm-up: caches, free lists and peak table sizes settle here
        _traced()  # the filter's pattern is compiled (and cached by ``re``) here, not between the two levels
        gc.collect()
        whole = _traced(stages=True)  # the simulated runtimes' memory too
        baseline = _traced()
        load = _run(engine, REQUESTS, seed=1)
        submitted, terminals = load.submitted, (len(load.terminals), set(load.terminals.values()))
        del load  # the test's own bookkeeping is not the engine's
        gc.collect()
        whole_after = _traced(stages=True)
        after = _traced()
    finally:
        tracemalloc.stop()
    orch, host = engine.orchestrator, engine.host

    assert submitted == REQUESTS
    assert terminals == (REQUESTS, {1})  # every request, exactly one terminal each
    assert_drained(orch)
    assert orch.idle() and not orch.lifecycle.records and not orch.routes
    assert not host.listeners and not host.mailboxes and not host.abort_answers and not host._unclaimed
    assert all(not r.requests and not r.busy() for replicas in host.runtimes for r in replicas)
    counters = orch.counters()
    assert counters["duplicates"] > 0  # the faults were really on
    assert abs(after - baseline) <= 0.01 * baseline, (baseline, after)
    assert whole_after - whole <= 0.01 * whole, (whole, whole_after)  # all of it grows no more (the maps may shrink)
    engine.shutdown()
    return (f"load: {REQUESTS} requests in {time.perf_counter() - started:.1f} s; traced memory "
            f"{baseline} -> {after} bytes ({(after - baseline) / baseline:+.3%}); {counters}")  # fmt: skip
