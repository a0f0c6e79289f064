"""Explorer throughput at the default bound (3 requests, 2 stages, 1 final stage, n=1, every
event family but abort races, <= 2 tokens per stage), liveness included; side by side, the same
bound with symmetry reduction (safety only), and at 2 requests the reduction against the
definition (every successor computed on the whole state).

Run: .venv/bin/python bench/explore.py   (last line is the headline)
"""

from __future__ import annotations

import sys

from omni_fsm.explore.explorer import Bound, Report, explore


def _line(name: str, r: Report) -> str:
    calls = sum(r.evaluations.values())
    return (f"{name:34} states={r.states:>9,} edges={r.edges:>11,} evaluations={calls:>10,} "
            f"seconds={r.seconds:6.1f} edges/s={r.edges / r.seconds:>9,.0f} ok={r.ok}")


def main() -> int:
    bound, small = Bound(), Bound(requests=2)
    whole, reduced = explore(small, reduction=False), explore(small)
    sym = explore(bound, symmetry=True)
    full = explore(bound)
    for name, r in (("2 requests, whole-state successors", whole), ("2 requests, reduction", reduced),
                    ("symmetry (safety only)", sym), ("default bound, liveness included", full)):
        print(_line(name, r))
    same = (whole.states, whole.edges) == (reduced.states, reduced.edges)
    print(f"reduction at 2 requests: same states and edges: {same}; {whole.seconds / reduced.seconds:.1f}x faster, "
          f"{sum(whole.evaluations.values()) / sum(reduced.evaluations.values()):.1f}x fewer evaluations "
          f"(compared with the whole state on {reduced.verified} states)")
    print(f"symmetry reduction: {full.states / sym.states:.1f}x fewer states, {full.seconds / sym.seconds:.1f}x faster")
    print(f"explore: states={full.states} edges={full.edges} evaluations={sum(full.evaluations.values())} "
          f"seconds={full.seconds:.1f} edges_per_s={full.edges / full.seconds:.0f}")
    return 0 if full.ok and sym.ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
