"""Cost of one ``Lifecycle.handle``, the plain core vs the ``transitions`` reference, and bytes per tracked request.

Run as ``.venv/bin/python bench/fsm_step.py`` (``--quick``: a small mix, few repeats, for a smoke test).

What is timed: ``omni_fsm.Lifecycle.handle`` per event over the event mix of
``bench/handle_instructions.py`` (``record_mix()``: a three-stage AR -> AR -> diffusion pipeline; one
request in eight with two samples, one in eight with a CFG companion, one in five aborted while its
second stage runs), replayed on a fresh core per repeat: the time of the whole replay divided by its
number of events, median over the repeats (the garbage collector off while a replay runs, as
``timeit`` does). The whole handle is timed: row selection, effects, observations, slot moves and the
fan-out drained. The plain core is ``Lifecycle(...)`` as made from ``SPEC``: a dict lookup of the
candidate rows of (event type, state), their guard functions called in row order, the chosen row's
effect functions run (``Lifecycle._fire_row``). The reference does the same work: a ``Lifecycle``
whose request and engine tables are replaced by the ``transitions`` machines of
``omni_fsm.engine.reference.build_reference(SPEC)``, so the core asks the reference for every row
selection and runs the row's plan as the plain core does (``Lifecycle._asked_steps``). Before any
timing both cores replay the whole mix once and must return identical observation lists for every
event (else ``AssertionError``). The paths alternate repeat by repeat, so machine noise falls on both
alike.
Memory: the ``tracemalloc`` delta of a ``Lifecycle`` (the mix's pipeline) tracking ``requests``
submitted requests (registry entry, record, id), divided by ``requests``.
Targets: the reference >= 5x slower than the plain handle (ratio), <= 256 bytes per tracked request.
Prints the figures side by side and, last line,
``fsm_step: handle_us=X transitions_us=Y ratio=R bytes_per_request=B`` (ratio = transitions_us / handle_us).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from omni_fsm import SPEC, Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm.engine.reference import build_reference


def _handle_instructions() -> Any:
    """Load ``bench/handle_instructions.py`` (a script, not a package) by its path."""
    path = Path(__file__).resolve().with_name("handle_instructions.py")
    spec = importlib.util.spec_from_file_location("handle_instructions_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIX = _handle_instructions()
KINDS = tuple(StageKind.AR if k == "ar" else StageKind.DIFFUSION for k in MIX.KINDS)
FINAL: tuple[bool, ...] = tuple(MIX.FINAL)
REFERENCE = build_reference(SPEC)


def record_mix(requests: int = MIX.REQUESTS) -> list[Any]:
    """Return the event mix of ``bench/handle_instructions.py`` for ``requests`` client requests."""
    mix: list[Any] = MIX.record_mix(requests)
    return mix


#: the paths timed: the plain core (its own table) and the ``transitions`` reference
PATHS = ("plain", "reference")


def fresh_core(reference: bool | str = False) -> Lifecycle:
    """Return a fresh core on the mix's pipeline; ``reference`` (or ``"reference"``): its tables replaced by
    ``transitions``."""
    core = Lifecycle(KINDS, FINAL)
    if reference in (True, "reference"):
        core.table, core.engine_table = REFERENCE.request, REFERENCE.engine
    return core


def observe(mix: list[Any], reference: bool | str = False) -> list[list[Any]]:
    """Replay ``mix`` on a fresh core; return each event's observations."""
    handle = fresh_core(reference).handle
    return [handle(event) for event in mix]


def check_same_work(mix: list[Any]) -> int:
    """Raise unless every path observes the same for every event of ``mix``; return the observations made."""
    fast = observe(mix)
    for path in PATHS[1:]:
        for i, (event, got, want) in enumerate(zip(mix, observe(mix, path), fast, strict=True)):
            if got != want:
                raise AssertionError(f"event {i} ({event!r}): {path} observed {got!r}, plain {want!r}")
    return sum(map(len, fast))


def replay_seconds(mix: list[Any], reference: bool | str) -> float:
    """Return the seconds per event of one replay of ``mix`` on a fresh core (construction not timed)."""
    handle = fresh_core(reference).handle
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for event in mix:
            handle(event)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed / len(mix)


def time_paths(mix: list[Any], repeats: int) -> dict[str, list[float]]:
    """Return the seconds per event of each repeat of each path (``PATHS``), alternating repeat by repeat."""
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for _ in range(repeats):
        for path in PATHS:
            times[path].append(replay_seconds(mix, path))
    return times


def bytes_per_request(requests: int, stride: int = 2) -> int:
    """Return the memory one tracked request costs a ``Lifecycle``: registry entry, record, id."""
    lifecycle = fresh_core()
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


def run(mix_requests: int = MIX.REQUESTS, repeats: int = 15, requests: int = 100_000, out: Any = sys.stdout) -> str:
    """Measure, print the figures side by side, and return the summary line (also printed last)."""
    mix = record_mix(mix_requests)
    observations = check_same_work(mix)
    times = time_paths(mix, repeats)
    fast, slow = times["plain"], times["reference"]
    per_request = bytes_per_request(requests)
    handle_us, slow_us = statistics.median(fast) * 1e6, statistics.median(slow) * 1e6
    ratio = slow_us / handle_us
    print(f"event mix: {len(mix):,} events of {mix_requests} requests (AR -> AR -> diffusion; n=2, CFG, aborts), "
          f"replayed on a fresh core, median of {repeats} repeats", file=out)  # fmt: skip
    print(f"  same work: all {len(PATHS)} paths made the same {observations:,} observations, event by event",
          file=out)
    rows = (
        ("Lifecycle.handle, the plain core", f"{handle_us:8.3f} us/event",
         f"(min {min(fast) * 1e6:.3f}, max {max(fast) * 1e6:.3f})"),
        ("Lifecycle.handle, transitions reference", f"{slow_us:8.2f} us/event",
         f"(min {min(slow) * 1e6:.2f}, max {max(slow) * 1e6:.2f})"),
        ("ratio (transitions / plain)", f"{ratio:8.1f} x       ", "(target >= 5)"),
        (f"tracked request ({requests:,} in a Lifecycle)", f"{per_request:8d} bytes   ", "(target <= 256)"),
    )  # fmt: skip
    for label, figure, note in rows:
        print(f"  {label:<44} {figure}  {note}", file=out)
    line = (f"fsm_step: handle_us={handle_us:.3f} transitions_us={slow_us:.2f} ratio={ratio:.1f} "
            f"bytes_per_request={per_request}")  # fmt: skip
    print(line, file=out)
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small mix, 3 repeats, 1,000 tracked requests")
    parser.add_argument("--repeats", type=int, help="replays of the mix per path (default 15; --quick: 3)")
    args = parser.parse_args(argv)
    mix_requests, repeats, requests = (40, 3, 1_000) if args.quick else (MIX.REQUESTS, 15, 100_000)
    run(mix_requests, args.repeats or repeats, requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
