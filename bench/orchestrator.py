"""Benchmark the orchestrator: the sans-IO core alone and the full asyncio driver (zero-cost stages).

A 3-stage pipeline (AR -> AR -> diffusion) of zero-cost stages, 1,000 and 10,000 requests, with
and without 20% aborts. Each figure is the median of several runs, taken round-robin over the
workloads with core and driver runs alternating, so that every figure sees the same machine.
A hop is one request passing through one stage, counted where it happens (an aborted request
makes only the hops it really made), and ``lifecycle`` is the share of the core's time spent in
``omni_fsm.engine.core.Lifecycle.handle`` (measured in separate runs).

- core: events in, commands out; each dispatch is answered at once (scheduled, one output,
  finished: reports built before the clock starts, as a runtime would have built them), and an
  aborted request is aborted while at stage 1.
- driver: ``AsyncEngine`` (event-driven loop) over ``InstantReplica`` runtimes; an aborted
  request is aborted right after its submission, as a client would.

Memory: the ``tracemalloc`` delta per request in flight (mid-stage, its output buffered), after
``gc.collect()``: of the core (orchestrator and lifecycle state) and of the asyncio driver
(orchestrator, lifecycle and host state, with consumers that keep nothing per request). Reported
apart: the consumer-side mailboxes (the synchronous API's per-request queues) and what the
zero-cost runtimes keep themselves.

Last line: ``orchestrator: core_hops_per_s=... driver_hops_per_s=... us_per_hop=... bytes_per_inflight=...
lost=... duplicated=... [vs_vllm_omni=...]`` (the lowest median of each over the four workloads; ``us_per_hop``
is the core's; ``bytes_per_inflight`` is the larger of the core's and the driver's orchestrator-held
figures; ``vs_vllm_omni`` only with ``--vllm-omni``: see below).

- floor: ``bench/_floor.py``, a skeleton that passes the same objects per hop as the core (events,
  observations, commands, stage inputs) and checks nothing: the least any design of this shape
  costs in CPython on the machine of the moment. ``core/floor`` is the price of what the core
  checks and records.
- vLLM-Omni (``--vllm-omni PYTHON``, or ``OMNI_BENCH_VLLM_OMNI``): ``bench/vllm_omni_loop.py``, run with a
  Python that has vLLM-Omni 0.30 installed (``make vllm-omni-venv`` builds ``.venv-vllm-omni``), before
  and after the rounds, so that its figures and ours see the same machine. The same work: the
  same pipeline (AR -> AR -> diffusion, zero-cost stages, no detokenization on either side), the
  same workloads and the same aborted requests (passed to it: ``--workloads``, ``--seed``,
  ``--abort-stage``), aborted while at stage 1; its aborted counts and hops are checked against
  the core's. Per workload, the mean of its two medians (before, after) over the core's median is
  printed; the last line gains ``vs_vllm_omni=...``: the smallest of those per-workload ratios
  (vLLM-Omni's time per hop over the core's on the same workload).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from _floor import floor_run

from omni_fsm import StageKind
from omni_runtime import AsyncEngine, Orchestrator, Prompt, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import instant, instant_runtimes

PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION], replicas=1, max_running=1 << 20)
STAGES = len(PIPELINE.stages)
PROMPT = Prompt()
ROUNDS = 7  #: runs per figure (the median is reported)
WORKLOADS = [(requests, abort_rate) for requests in (1_000, 10_000) for abort_rate in (0.0, 0.2)]
_PAYLOADS = [None if kind is StageKind.DIFFUSION else (7,) for kind in PIPELINE.kinds]
_ABORT_STAGE = 1
SEED = 0  #: the aborted requests' draw (core, driver and vLLM-Omni alike)
_INSTANT = instant.__file__  #: the zero-cost runtimes' module: what it allocates is the stages' memory

Run = tuple[float, int, int, int]  #: (seconds, hops, lost, duplicated)


def aborted_rids(requests: int, abort_rate: float) -> set[int]:
    """The requests a run aborts: draw ``i`` of ``random.Random(SEED)`` below the rate (the driver draws the
    same sequence; ``bench/vllm_omni_loop.py`` is given the seed and applies the same rule)."""
    rng = random.Random(SEED)
    return {rid for rid in range(requests) if rng.random() < abort_rate}


def expected_hops(requests: int, abort_rate: float) -> int:
    """Hops a run makes: every stage for a request that ends, stages up to ``_ABORT_STAGE`` for an aborted one."""
    return requests * STAGES - len(aborted_rids(requests, abort_rate)) * (STAGES - _ABORT_STAGE - 1)


def core_run(requests: int, abort_rate: float, orch: Orchestrator | None = None) -> Run:
    """Run the core alone: events in, commands out.

    The runtime reports (the events in) are built before the clock starts, as a runtime would
    have built them; the abort results, whose ids the core assigns, are built in the loop.
    """
    orch = orch or Orchestrator(PIPELINE)
    aborted = aborted_rids(requests, abort_rate)
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
        rng = random.Random(SEED)
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


def driver_bytes_per_inflight(requests: int = 10_000) -> tuple[float, float, float]:
    """Return traced bytes per in-flight request under the asyncio driver: (orchestrator and host,
    consumer-side mailboxes, the runtimes' own).

    Requests are mid-stage (scheduled at stage 0, one output buffered) on replicas that hold them.
    Consumers that keep nothing per request (one shared listener) give the first figure, less
    what the runtimes allocated (told apart by the file that allocated it: a stage's memory, not
    the orchestrator's); consumers reading mailboxes (the synchronous API's) give the second, as
    the difference.
    """

    async def traced(mailboxes: bool) -> tuple[int, int]:
        engine = AsyncEngine(PIPELINE, instant_runtimes(PIPELINE, hold=True))
        await engine.start()
        routes = engine.host.orchestrator.routes
        listener = None if mailboxes else (lambda message: None)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for _ in range(requests):
            engine.submit(PROMPT, listener=listener)
        while any(route.result is None for route in routes.values()):  # until every output is buffered
            await asyncio.sleep(0)
        gc.collect()
        grown = tracemalloc.take_snapshot().compare_to(before, "filename")
        tracemalloc.stop()
        await engine.shutdown()
        runtime = sum(d.size_diff for d in grown if d.traceback[0].filename == _INSTANT)
        return sum(d.size_diff for d in grown) - runtime, runtime

    (held, runtime), (with_boxes, _) = asyncio.run(traced(False)), asyncio.run(traced(True))
    return held / requests, (with_boxes - held) / requests, runtime / requests


def _rate(runs: list[Run]) -> float:
    return statistics.median(hops / seconds for seconds, hops, _, _ in runs)


Workload = tuple[int, float]  #: (requests, abort rate)
_OMNI_LINE = re.compile(r"workload requests=(\d+) abort_rate=([0-9.]+) aborted=(\d+) hops=(\d+) "
                        r"us_per_hop=([0-9.]+) .*cpu_us_per_hop=([0-9.]+)")


def vllm_omni_figures(python: str) -> dict[Workload, tuple[float, float]]:
    """Run ``bench/vllm_omni_loop.py`` with ``python`` (a venv with vLLM-Omni) on this bench's workloads;
    return its median (us per hop, orchestrator-thread CPU us per hop) per workload.

    It is given the workloads, the seed and the abort stage, and must report, per workload, the same
    number of aborted requests and of hops as the core makes: otherwise it did not do the same work.
    """
    script = Path(__file__).with_name("vllm_omni_loop.py")
    workloads = ",".join(f"{requests}:{abort_rate}" for requests, abort_rate in WORKLOADS)
    argv = [python, str(script), "--workloads", workloads, "--seed", str(SEED), "--abort-stage", str(_ABORT_STAGE)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    lines = done.stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    if done.returncode != 0 or not last.startswith("vllm_omni:"):
        why = (done.stderr or last).strip()[-2000:]
        raise SystemExit(f"bench/vllm_omni_loop.py failed (exit {done.returncode}): {why}")
    figures: dict[Workload, tuple[float, float]] = {}
    for line in lines:
        found = _OMNI_LINE.match(line)
        if found is None:
            continue
        requests, rate, aborted, hops = int(found[1]), float(found[2]), int(found[3]), int(found[4])
        if (requests, rate) not in WORKLOADS:
            continue
        want = (len(aborted_rids(requests, rate)), expected_hops(requests, rate))
        if (aborted, hops) != want:
            raise SystemExit(f"bench/vllm_omni_loop.py did other work for requests={requests} aborts={rate:.0%}: "
                             f"{aborted} aborted, {hops} hops; the core: {want[0]} aborted, {want[1]} hops")
        figures[(requests, rate)] = (float(found[5]), float(found[6]))
    if set(figures) != set(WORKLOADS):
        raise SystemExit(f"bench/vllm_omni_loop.py reported workloads {sorted(figures)}, not {WORKLOADS}")
    print(f"  vLLM-Omni: {last}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vllm-omni", metavar="PYTHON", default=os.environ.get("OMNI_BENCH_VLLM_OMNI"),
                        help="a Python with vLLM-Omni 0.30: measure its loop before and after ours")  # fmt: skip
    args = parser.parse_args()
    started = time.perf_counter()
    omni_runs = [vllm_omni_figures(args.vllm_omni)] if args.vllm_omni else []
    for requests, abort_rate in WORKLOADS:
        core_run(requests, abort_rate)  # warm-up (imports, caches)
    core: dict[tuple[int, float], list[Run]] = {w: [] for w in WORKLOADS}
    driver: dict[tuple[int, float], list[Run]] = {w: [] for w in WORKLOADS}
    floor: dict[int, list[tuple[float, int]]] = {requests: [] for requests, _ in WORKLOADS}
    for _ in range(ROUNDS):  # round-robin over workloads, core and driver alternating: all see the same machine
        for workload in WORKLOADS:
            gc.collect()  # each run starts from a collected heap (the collector stays on, as in a host program)
            core[workload].append(core_run(*workload))
            gc.collect()
            driver[workload].append(driver_run(*workload))
            if workload[1] == 0.0:
                gc.collect()
                floor[workload[0]].append(floor_run(workload[0]))
    runs = [r for w in WORKLOADS for r in core[w] + driver[w]]
    lost, duplicated = sum(r[2] for r in runs), sum(r[3] for r in runs)
    for workload in WORKLOADS:  # the hops vLLM-Omni's runs were checked against are the core's
        hops = {r[1] for r in core[workload]}
        if hops != {expected_hops(*workload)}:
            raise SystemExit(f"core runs of {workload} made {sorted(hops)} hops, not {expected_hops(*workload)}")
    core_rates, driver_rates = [], []
    for workload in WORKLOADS:
        core_rates.append(_rate(core[workload]))
        driver_rates.append(_rate(driver[workload]))
        share = lifecycle_share(*workload)
        print(f"requests={workload[0]:>6} aborts={workload[1]:>3.0%}: core {core_rates[-1]:>8,.0f} hops/s "
              f"({1e6 / core_rates[-1]:.1f} us/hop, {share:.0%} in Lifecycle.handle), "
              f"driver {driver_rates[-1]:>8,.0f} hops/s ({1e6 / driver_rates[-1]:.1f} us/hop)")  # fmt: skip
    low_core, low_driver = min(core_rates), min(driver_rates)
    for requests, floor_runs in floor.items():
        rate = statistics.median(hops / seconds for seconds, hops in floor_runs)
        print(f"requests={requests:>6} floor {rate:>8,.0f} hops/s ({1e6 / rate:.1f} us/hop): the core takes "
              f"{rate / core_rates[WORKLOADS.index((requests, 0.0))]:.2f}x the floor's time")  # fmt: skip
    vs_vllm_omni = ""
    if args.vllm_omni:
        omni_runs.append(vllm_omni_figures(args.vllm_omni))
        ratios = []
        for workload, core_rate, driver_rate in zip(WORKLOADS, core_rates, driver_rates, strict=True):
            omni = statistics.mean(run[workload][0] for run in omni_runs)
            omni_cpu = statistics.mean(run[workload][1] for run in omni_runs)
            core_us, driver_us = 1e6 / core_rate, 1e6 / driver_rate
            ratios.append(omni / core_us)
            print(f"requests={workload[0]:>6} aborts={workload[1]:>3.0%}: vLLM-Omni {omni:.1f} us/hop (mean of the "
                  f"runs before and after; its orchestrator thread's CPU {omni_cpu:.1f}): {ratios[-1]:.1f}x the core's "
                  f"time ({omni_cpu / core_us:.1f}x on its thread's CPU alone), {omni / driver_us:.1f}x the driver's")
        vs_vllm_omni = f" vs_vllm_omni={min(ratios):.2f}"
    core_bytes = bytes_per_inflight()
    driver_bytes, mailbox_bytes, runtime_bytes = driver_bytes_per_inflight()
    print(f"memory per in-flight request: core {core_bytes:.0f} B, driver {driver_bytes:.0f} B (orchestrator and "
          f"host); apart: consumer-side mailboxes {mailbox_bytes:.0f} B, the runtimes' own {runtime_bytes:.0f} B")
    print(f"bench time {time.perf_counter() - started:.1f} s")
    print(f"orchestrator: core_hops_per_s={low_core:.0f} driver_hops_per_s={low_driver:.0f} "
          f"us_per_hop={1e6 / low_core:.2f} bytes_per_inflight={max(core_bytes, driver_bytes):.0f} "
          f"lost={lost} duplicated={duplicated}{vs_vllm_omni}")  # fmt: skip
    return 0 if lost == duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
