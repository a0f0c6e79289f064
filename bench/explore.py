"""Explorer throughput at the default bound (3 requests, 2 stages, 1 final stage, n=1, every
event family but abort races, <= 2 tokens per stage), liveness included; side by side, the same
bound with symmetry reduction (safety only).

Run: .venv/bin/python bench/explore.py   (last line is the headline)
"""

from __future__ import annotations

import sys

from omni_fsm.explore.explorer import Bound, explore


def main() -> int:
    bound = Bound()
    sym = explore(bound, symmetry=True)
    full = explore(bound)
    for name, r in (("symmetry (safety only)", sym), ("full, liveness included", full)):
        print(f"{name:26} states={r.states:>9,} edges={r.edges:>11,} seconds={r.seconds:6.1f} "
              f"edges/s={r.edges / r.seconds:>9,.0f} ok={r.ok}")
    print(f"symmetry reduction: {full.states / sym.states:.1f}x fewer states, {full.seconds / sym.seconds:.1f}x faster")
    print(f"explore: states={full.states} edges={full.edges} seconds={full.seconds:.1f} "
          f"states_per_s={full.states / full.seconds:.0f} edges_per_s={full.edges / full.seconds:.0f}")
    return 0 if full.ok and sym.ok else 1


if __name__ == "__main__":
    sys.exit(main())
