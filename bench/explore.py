"""Explorer throughput at the default bound (3 requests, 2 stages, 1 final stage, n=1, every
event family but abort races, <= 2 tokens per stage), liveness included; side by side, the same
bound with symmetry reduction (safety only), at 2 requests the reduction against the
definition (every successor computed on the whole state), and the default bound on every core
(``workers=0``) against one process: alternated, the median wall time of ``--repeats`` runs each,
the states, edges and verdicts checked identical.

Run: .venv/bin/python bench/explore.py [--repeats N]   (last line is the headline)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from omni_fsm.explore.explorer import Bound, Report, explore
from omni_fsm.explore.parallel import cores


def _line(name: str, r: Report) -> str:
    calls = sum(r.evaluations.values())
    return (f"{name:34} states={r.states:>9,} edges={r.edges:>11,} evaluations={calls:>10,} "
            f"seconds={r.seconds:6.1f} edges/s={r.edges / r.seconds:>9,.0f} ok={r.ok}")


def _verdict(r: Report) -> tuple[object, ...]:
    return r.states, r.edges, r.violations, r.stuck, r.liveness_checked


def _timed(bound: Bound, workers: int) -> tuple[float, Report]:
    start = time.perf_counter()  # around the call: the workers' start and end included
    report = explore(bound, workers=workers)
    return time.perf_counter() - start, report


def across_cores(bound: Bound, full: Report, seconds: float, repeats: int) -> tuple[int, float, bool]:
    """Time ``bound`` on every core against one, alternated (``full``, taking ``seconds``, is the first run on one);
    return (workers, median speedup, whether every run found the same states, edges and verdicts)."""
    workers = cores()
    if workers == 1:
        return 1, 1.0, True
    one, many, same = [seconds], [], True
    for i in range(2 * repeats - 1):
        took, report = _timed(bound, 0 if i % 2 == 0 else 1)
        (many if i % 2 == 0 else one).append(took)
        same = same and _verdict(report) == _verdict(full)
    print(f"default bound on {workers} cores: {statistics.median(many):.1f} s (median of {len(many)}: "
          f"{', '.join(f'{t:.1f}' for t in many)}), on one: {statistics.median(one):.1f} s "
          f"({', '.join(f'{t:.1f}' for t in one)}); same states, edges and verdicts: {same}")
    return workers, statistics.median(one) / statistics.median(many), same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3, help="runs each, on every core and on one (default 3)")
    repeats = max(1, parser.parse_args().repeats)
    bound, small = Bound(), Bound(requests=2)
    whole, reduced = explore(small, reduction=False), explore(small)
    sym = explore(bound, symmetry=True)
    seconds, full = _timed(bound, 1)
    for name, r in (("2 requests, whole-state successors", whole), ("2 requests, reduction", reduced),
                    ("symmetry (safety only)", sym), ("default bound, liveness included", full)):
        print(_line(name, r))
    same = (whole.states, whole.edges) == (reduced.states, reduced.edges)
    print(f"reduction at 2 requests: same states and edges: {same}; {whole.seconds / reduced.seconds:.1f}x faster, "
          f"{sum(whole.evaluations.values()) / sum(reduced.evaluations.values()):.1f}x fewer evaluations "
          f"(compared with the whole state on {reduced.verified} states)")
    print(f"symmetry reduction: {full.states / sym.states:.1f}x fewer states, {full.seconds / sym.seconds:.1f}x faster")
    workers, speedup, alike = across_cores(bound, full, seconds, repeats)
    print(f"explore: states={full.states} edges={full.edges} evaluations={sum(full.evaluations.values())} "
          f"seconds={full.seconds:.1f} edges_per_s={full.edges / full.seconds:.0f} workers={workers} "
          f"speedup={speedup:.2f}")
    return 0 if full.ok and sym.ok and same and alike else 1


if __name__ == "__main__":
    sys.exit(main())
