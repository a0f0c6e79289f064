"""Benchmark the orchestrator: the sans-IO core alone and the full asyncio driver (zero-cost stages).

Last line: ``orchestrator: core_hops_per_s=... driver_hops_per_s=... us_per_hop=... bytes_per_inflight=...
lost=... duplicated=...``. A hop is one request passing through one stage.
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
RUNS = 5


def core_run(requests: int, abort_rate: float) -> tuple[float, int, int]:
    """Return (seconds, lost, duplicated) for the core alone: events in, commands out."""
    orch = Orchestrator(PIPELINE)
    rng = random.Random(0)
    terminals: dict[int, int] = {}
    start = time.perf_counter()
    for _ in range(requests):
        rid, out = orch.submit(PROMPT)
        aborted = rng.random() < abort_rate
        todo = list(out)
        while todo:
            c = todo.pop()
            if isinstance(c, cmd.Dispatch):
                s = c.stage
                payload = None if PIPELINE.kinds[s] is StageKind.DIFFUSION else (7,)
                todo += orch.report(s, 0, rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
                todo += orch.report(s, 0, rp.Output(rid, 1, 1, payload))
                if aborted and s == 1:
                    todo += orch.abort(rid)[1]
                else:
                    todo += orch.report(s, 0, rp.Finished(rid, 2))
            elif isinstance(c, cmd.AbortAt):
                todo += orch.report(c.stage, 0, rp.AbortResult(c.abort_id, rid, True))
            elif isinstance(c, cmd.Deliver) and c.message.finished:
                terminals[rid] = terminals.get(rid, 0) + 1
    elapsed = time.perf_counter() - start
    return elapsed, requests - len(terminals), sum(v - 1 for v in terminals.values())


def driver_run(requests: int, abort_rate: float) -> tuple[float, int, int]:
    """Return (seconds, lost, duplicated) for the full asyncio driver (event-driven loop)."""

    async def main() -> tuple[float, int, int]:
        engine = AsyncEngine(PIPELINE, instant_runtimes(PIPELINE))
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
        return elapsed, requests - len(terminals), sum(v - 1 for v in terminals.values())

    return asyncio.run(main())


def bytes_per_inflight(requests: int = 10_000) -> float:
    """Return the tracemalloc delta of orchestrator-held state per in-flight request."""
    orch = Orchestrator(PIPELINE)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(requests):
        orch.submit(PROMPT)
    during = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (during - before) / requests


def main() -> int:
    core_rates, driver_rates, lost, duplicated = [], [], 0, 0
    for requests in (1_000, 10_000):
        for abort_rate in (0.0, 0.2):
            c = [core_run(requests, abort_rate) for _ in range(RUNS)]
            d = [driver_run(requests, abort_rate) for _ in range(RUNS)]
            core_rate = requests * STAGES / statistics.median(x[0] for x in c)
            driver_rate = requests * STAGES / statistics.median(x[0] for x in d)
            lost += sum(x[1] for x in c + d)
            duplicated += sum(x[2] for x in c + d)
            core_rates.append(core_rate)
            driver_rates.append(driver_rate)
            print(f"requests={requests} aborts={abort_rate:.0%}: core {core_rate:,.0f} hops/s, "
                  f"driver {driver_rate:,.0f} hops/s")  # fmt: skip
    core, driver = min(core_rates), min(driver_rates)
    print(f"orchestrator: core_hops_per_s={core:.0f} driver_hops_per_s={driver:.0f} us_per_hop={1e6 / core:.2f} "
          f"bytes_per_inflight={bytes_per_inflight():.0f} lost={lost} duplicated={duplicated}")  # fmt: skip
    return 0 if lost == duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
