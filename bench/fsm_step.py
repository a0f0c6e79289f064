"""Cost of one lifecycle transition, compiled table vs ``transitions``, and bytes per tracked request.

Run as ``.venv/bin/python bench/fsm_step.py``. Per transition: the time of a batch of prebuilt
events divided by its size, median over the batches, for the compiled path (``CompiledTable.fire``)
and for the shared static ``transitions.Machine(model=None)`` (``ReferenceTable.fire``) on the same
table and the same event list. Memory: the ``tracemalloc`` delta of a ``Lifecycle`` tracking
``requests`` submitted requests (registry, records and ids), divided by ``requests``.
Targets: compiled <= 1 us, >= 10x faster than transitions, <= 256 bytes per tracked request.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from omni_fsm import SPEC, Engine, Record, ReqState, StageKind
from omni_fsm import events as ev
from omni_fsm.engine.compiled import CompiledTable
from omni_fsm.engine.core import Lifecycle
from omni_fsm.engine.reference import ReferenceTable

Fire = Callable[[Any, Any, Engine], Any]
#: One record's round trip: WAITING -> RUNNING (outputs) -> PREEMPTED -> RUNNING (outputs)
#: -> WAITING_FOR_CHUNK -> WAITING. Every event has a matching row on a one-stage AR pipeline.
CYCLE: tuple[type[ev.StageEvent], ...] = (
    ev.Scheduled, ev.StageOutput, ev.StageOutput, ev.StageOutput, ev.Preempted,
    ev.Scheduled, ev.StageOutput, ev.StageOutput, ev.AwaitChunk, ev.InputReady,
)  # fmt: skip
START = ReqState.WAITING
RECORDS = 64


def build_workload(events: int, records: int = RECORDS) -> tuple[list[Record], Engine, list[tuple[Record, Any]]]:
    """Return the records, the engine and ``events`` prebuilt ``(record, event)`` pairs, interleaved."""
    engine = Engine(kinds=(StageKind.AR,), final=(True,))
    recs = [Record(rid, state=START) for rid in range(records)]
    per_record = [[kind(rec.rid, 0) for kind in CYCLE] for rec in recs]
    pairs = [(recs[i % records], per_record[i % records][(i // records) % len(CYCLE)]) for i in range(events)]
    return recs, engine, pairs


def reset(recs: list[Record]) -> None:
    for rec in recs:
        rec.state = START


def check_workload(fire: Fire, recs: list[Record], engine: Engine, pairs: list[tuple[Record, Any]]) -> list[Any]:
    """Run the workload once; raise if any event finds no row. Return the states reached."""
    reset(recs)
    for rec, event in pairs:
        if fire(rec, event, engine) is None:
            raise AssertionError(f"no row for {event!r} in {rec.state!r}")
    states = [rec.state for rec in recs]
    reset(recs)
    return states


def time_batches(fire: Fire, recs: list[Record], engine: Engine, pairs: list[tuple[Record, Any]],
                 batches: int) -> list[float]:  # fmt: skip
    """Return the seconds per transition of each batch."""
    per_event: list[float] = []
    clock = time.perf_counter
    for _ in range(batches):
        reset(recs)
        start = clock()
        for rec, event in pairs:
            fire(rec, event, engine)
        per_event.append((clock() - start) / len(pairs))
    reset(recs)
    return per_event


def bytes_per_request(requests: int, stride: int = 2) -> int:
    """Return the memory one tracked request costs a ``Lifecycle``: registry entry, record, id."""
    lifecycle = Lifecycle((StageKind.AR,), (True,))
    handle = lifecycle.handle
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for rid in range(0, requests * stride, stride):  # spaced: no dependent id collides
            handle(ev.Submit(rid))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if len(lifecycle.records) != requests:
        raise AssertionError(f"{len(lifecycle.records)} tracked, expected {requests}")
    return round((after - before) / requests)


def run(events: int = 100_000, batches: int = 15, requests: int = 100_000, out: Any = sys.stdout) -> str:
    """Measure, print the figures side by side, and return the summary line (also printed last)."""
    recs, engine, pairs = build_workload(events)
    fast, slow = CompiledTable(SPEC.rows), ReferenceTable(SPEC.rows)
    if check_workload(fast.fire, recs, engine, pairs) != check_workload(slow.fire, recs, engine, pairs):
        raise AssertionError("the two paths ended the workload in different states")
    fast_s = statistics.median(time_batches(fast.fire, recs, engine, pairs, batches))
    slow_s = statistics.median(time_batches(slow.fire, recs, engine, pairs, batches))
    per_request = bytes_per_request(requests)
    fast_us, slow_us = fast_s * 1e6, slow_s * 1e6
    print(f"{events:,} prebuilt events over {len(recs)} records, median of {batches} batches", file=out)
    print(f"  compiled table (CompiledTable.fire)           {fast_us:8.3f} us/transition  (target <= 1)",
          file=out)  # fmt: skip
    print(f"  transitions Machine(model=None) (.fire)       {slow_us:8.2f} us/transition", file=out)
    print(f"  ratio                                         {slow_us / fast_us:8.1f} x             (target >= 10)",
          file=out)  # fmt: skip
    print(f"  tracked request ({requests:,} in a Lifecycle)  {per_request:8d} bytes          (target <= 256)",
          file=out)  # fmt: skip
    line = (f"fsm_step: fast_us={fast_us:.3f} transitions_us={slow_us:.2f} ratio={slow_us / fast_us:.1f} "
            f"bytes_per_request={per_request}")  # fmt: skip
    print(line, file=out)
    return line


if __name__ == "__main__":
    run()
