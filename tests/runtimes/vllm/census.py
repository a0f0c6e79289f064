"""The census of vLLM's status moves: every move the installed vLLM's schedulers make on the contract test's
fixed programs and on generated ones (derandomized: the same programs on every vLLM version).

Run: ``python -m tests.runtimes.vllm.census [--examples N]``. Prints one line per scheduler and move,
``<scheduler> <old> -> <new> <count>``, then ``census: vllm=<version> moves=<n> programs=<n> broken=<n>``;
two versions' outputs diffed show the moves that differ between them.
"""

from __future__ import annotations

import argparse
import collections
import sys

from hypothesis import HealthCheck, Phase, given, settings

import tests.runtimes.real_engines  # noqa: F401  (the engine environment)
from tests.runtimes.vllm import contract
from tests.runtimes.vllm.contract import execute, programs, setups


def census(examples: int) -> tuple[collections.Counter[tuple[str, str, str]], int, list[str]]:
    """Return (scheduler, old, new) -> count over the fixed and ``examples`` generated programs per scheduler,
    how many programs ran, and every broken rule seen."""
    moves: collections.Counter[tuple[str, str, str]] = collections.Counter()
    broken: list[str] = []
    ran = 0

    def record(scheduler: str, program: list, setup: contract.Setup) -> None:
        nonlocal ran
        run = execute(program, setup)
        ran += 1
        broken.extend(run.broken)
        for seen in run.moves.values():
            moves.update((scheduler, str(old), str(new)) for old, new in seen)

    def generate(scheduler: str) -> None:
        @settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(program=programs(), setup=setups(contract.SCHEDULERS[scheduler]))
        def generated(program: list, setup: contract.Setup) -> None:
            record(scheduler, program, setup)

        generated()

    for scheduler in contract.SCHEDULERS:
        for program, setup in contract.FIXED.values():
            record(scheduler, program, contract.on(setup, scheduler))
        generate(scheduler)
    return moves, ran, broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the status moves the installed vLLM's schedulers make")
    parser.add_argument("--examples", type=int, default=200, help="generated programs per scheduler (default 200)")
    args = parser.parse_args(argv)
    import vllm

    moves, ran, broken = census(args.examples)
    for (scheduler, old, new), count in sorted(moves.items()):
        print(f"{scheduler} {old} -> {new} {count}")
    for line in sorted(set(broken)):
        print(f"broken: {line}")
    print(f"census: vllm={vllm.__version__} moves={len(moves)} programs={ran} broken={len(broken)}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
