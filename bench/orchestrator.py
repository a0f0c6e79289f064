"""Benchmark the orchestrator: the sans-IO core alone and the full asyncio driver (zero-cost stages).

A 3-stage pipeline (AR -> AR -> diffusion) of zero-cost stages, 1,000 and 10,000 requests, with
and without 20% aborts. Each figure is the median of several runs, taken round-robin over the
workloads with core and driver runs alternating, so that every figure sees the same machine.
A hop is one request passing through one stage, counted where it happens (an aborted request
makes only the hops it really made), and ``lifecycle`` is the share of the core's time spent in
``omni_fsm.core.Lifecycle.handle`` (measured in separate runs).

- core: events in, commands out; each dispatch is answered at once (scheduled, one output,
  finished: reports built before the clock starts, as a runtime would have built them), and an
  aborted request is aborted while at stage 1.
- driver: ``AsyncEngine`` (event-driven loop) over ``InstantReplica`` runtimes; an aborted
  request is aborted right after its submission, as a client would.

Last line: ``orchestrator: core_hops_per_s=... driver_hops_per_s=... us_per_hop=... bytes_per_inflight=...
lost=... duplicated=...`` (the lowest median of each over the four workloads; ``us_per_hop`` is the
core's; ``bytes_per_inflight`` is orchestrator and lifecycle state per request in flight).

Not measured here: vLLM-Omni's own loop. For scale, the issue quotes 56-102 us per stage hop for
vLLM-Omni 0.30 on this machine kind (instant fake stage clients, its real output processor).
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from omni_fsm import StageKind
from omni_runtime import AsyncEngine, Orchestrator, Prompt, simple_pipeline
from omni_runtime import commands as cmd
from omni_runtime import protocol as rp
from omni_runtime.sim import instant_runtimes

PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION], replicas=1, max_running=1 << 20)
STAGES = len(PIPELINE.stages)
PROMPT = Prompt()
ROUNDS = 7  #: runs per figure (the median is reported)
WORKLOADS = [(requests, abort_rate) for requests in (1_000, 10_000) for abort_rate in (0.0, 0.2)]
_PAYLOADS = [None if kind is StageKind.DIFFUSION else (7,) for kind in PIPELINE.kinds]
_ABORT_STAGE = 1

Run = tuple[float, int, int, int]  #: (seconds, hops, lost, duplicated)


def core_run(requests: int, abort_rate: float, orch: Orchestrator | None = None) -> Run:
    """Run the core alone: events in, commands out.

    The runtime reports (the events in) are built before the clock starts, as a runtime would
    have built them; the abort results, whose ids the core assigns, are built in the loop.
    """
    orch = orch or Orchestrator(PIPELINE)
    rng = random.Random(0)
    aborted = {rid for rid in range(requests) if rng.random() < abort_rate}
    inputs = _reports(requests, aborted)
    terminals: dict[int, int] = {}
    report, submit, abort, abort_result = orch.report, orch.submit, orch.abort, rp.AbortResult
    dispatch, abort_at, deliver = cmd.Dispatch, cmd.AbortAt, cmd.Deliver
    hops = 0
    start = time.perf_counter()
    for _ in range(requests):
        rid, todo = submit(PROMPT)
        while todo:
            c = todo.pop()
            kind = c.__class__
            if kind is dispatch:
                hops += 1
                s = c.stage  # type: ignore[attr-defined]
                for r in inputs[rid][s]:
                    todo += report(s, 0, r)
                if s == _ABORT_STAGE and rid in aborted:
                    todo += abort(rid)[1]
            elif kind is abort_at:
                todo += report(c.stage, 0, abort_result(c.abort_id, rid, True))  # type: ignore[attr-defined]
            elif kind is deliver and c.message.finished:  # type: ignore[attr-defined]
                terminals[rid] = terminals.get(rid, 0) + 1
    elapsed = time.perf_counter() - start
    return elapsed, hops, requests - len(terminals), sum(v - 1 for v in terminals.values())


def _reports(requests: int, aborted: set[int]) -> list[list[tuple[rp.Report, ...]]]:
    """Return each request's reports per stage: scheduled, one output, finished (none if aborted there)."""
    scheduled = rp.Status.SCHEDULED
    inputs = []
    for rid in range(requests):
        per_stage = []
        for s in range(STAGES):
            made: tuple[rp.Report, ...] = (rp.StatusChanged(rid, 0, scheduled), rp.Output(rid, 1, 1, _PAYLOADS[s]))
            if not (s == _ABORT_STAGE and rid in aborted):
                made += (rp.Finished(rid, 2),)
            per_stage.append(made)
        inputs.append(per_stage)
    return inputs


def lifecycle_share(requests: int, abort_rate: float) -> float:
    """Return the fraction of a core run spent inside ``Lifecycle.handle`` (timed around each call)."""
    orch = Orchestrator(PIPELINE)
    handle, clock, spent = orch.lifecycle.handle, time.perf_counter, [0.0]

    def timed(event):  # type: ignore[no-untyped-def]
        t = clock()
        outputs = handle(event)
        spent[0] += clock() - t
        return outputs

    orch.lifecycle.handle = timed  # type: ignore[method-assign]
    elapsed = core_run(requests, abort_rate, orch)[0]
    return spent[0] / elapsed


def driver_run(requests: int, abort_rate: float) -> Run:
    """Run the full asyncio driver (event-driven loop) over zero-cost replicas."""

    async def main() -> Run:
        runtimes = instant_runtimes(PIPELINE)
        engine = AsyncEngine(PIPELINE, runtimes)
        await engine.start()
        rng = random.Random(0)
        terminals: dict[int, int] = {}
        done = asyncio.Event()

        def listener(message: cmd.ClientMessage) -> None:
            if message.finished:
                terminals[message.rid] = terminals.get(message.rid, 0) + 1
                if len(terminals) == requests:
                    done.set()

        start = time.perf_counter()
        for _ in range(requests):
            rid = engine.submit(PROMPT, listener=listener)
            if rng.random() < abort_rate:
                engine.abort_nowait(rid)
        await asyncio.wait_for(done.wait(), 120)
        elapsed = time.perf_counter() - start
        await engine.shutdown()
        hops = sum(r.accepted for replicas in runtimes for r in replicas)
        return elapsed, hops, requests - len(terminals), sum(v - 1 for v in terminals.values())

    return asyncio.run(main())


def bytes_per_inflight(requests: int = 10_000) -> float:
    """Return the traced memory the orchestrator holds per in-flight request (mid-stage, output buffered)."""
    orch = Orchestrator(PIPELINE)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(requests):
        rid, _ = orch.submit(PROMPT)
        orch.report(0, 0, rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
        orch.report(0, 0, rp.Output(rid, 1, 1, _PAYLOADS[0]))
    during = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (during - before) / requests


def _rate(runs: list[Run]) -> float:
    return statistics.median(hops / seconds for seconds, hops, _, _ in runs)


def main() -> int:
    started = time.perf_counter()
    for requests, abort_rate in WORKLOADS:
        core_run(requests, abort_rate)  # warm-up (imports, caches)
    core: dict[tuple[int, float], list[Run]] = {w: [] for w in WORKLOADS}
    driver: dict[tuple[int, float], list[Run]] = {w: [] for w in WORKLOADS}
    for _ in range(ROUNDS):  # round-robin over workloads, core and driver alternating: all see the same machine
        for workload in WORKLOADS:
            gc.collect()  # each run starts from a collected heap (the collector stays on, as in a host program)
            core[workload].append(core_run(*workload))
            gc.collect()
            driver[workload].append(driver_run(*workload))
    runs = [r for w in WORKLOADS for r in core[w] + driver[w]]
    lost, duplicated = sum(r[2] for r in runs), sum(r[3] for r in runs)
    core_rates, driver_rates = [], []
    for workload in WORKLOADS:
        core_rates.append(_rate(core[workload]))
        driver_rates.append(_rate(driver[workload]))
        share = lifecycle_share(*workload)
        print(f"requests={workload[0]:>6} aborts={workload[1]:>3.0%}: core {core_rates[-1]:>8,.0f} hops/s "
              f"({1e6 / core_rates[-1]:.1f} us/hop, {share:.0%} in Lifecycle.handle), "
              f"driver {driver_rates[-1]:>8,.0f} hops/s ({1e6 / driver_rates[-1]:.1f} us/hop)")  # fmt: skip
    low_core, low_driver = min(core_rates), min(driver_rates)
    print(f"bench time {time.perf_counter() - started:.1f} s")
    print(f"orchestrator: core_hops_per_s={low_core:.0f} driver_hops_per_s={low_driver:.0f} "
          f"us_per_hop={1e6 / low_core:.2f} bytes_per_inflight={bytes_per_inflight():.0f} "
          f"lost={lost} duplicated={duplicated}")  # fmt: skip
    return 0 if lost == duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
