"""``omni-fsm registry``: validate ``specs/`` (contracts, invariant registry, ID lock), or issue new IDs.

Without options it runs every cross-check of ``omni_fsm.registry.validate`` (the tests that cover
each ID are read from their ``covers`` marks), prints each problem as ``FILE:LINE: reason`` on
stderr and a count of the invariants per kind on stdout; exit 1 if there is a problem. Without ``tests/``
beside ``specs/`` (an installed copy) which invariants have tests is not judged, and it says so. With
``--update-lock`` it appends newly issued IDs (and deferred -> checked promotions) to
``specs/ids.lock``, printing each line appended; exit 1 if it refused (an issued ID vanished or
changed meaning). Exit 2: a malformed file, as ``FILE:LINE: reason`` on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from omni_fsm.errors import MalformedInput
from omni_fsm.registry import KINDS, load_registry, update_lock, validate
from omni_fsm.registry.covers import discover_tests, has_tests


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``omni-fsm registry``'s options."""
    parser.add_argument("--root", type=Path, default=None,
                        help="the directory holding specs/ (default: the checkout around cwd, else the installed copy)")
    parser.add_argument("--update-lock", action="store_true", help="append newly issued IDs to specs/ids.lock")


def main(args: argparse.Namespace) -> int:
    """Validate ``specs/`` (or append to the lock with ``--update-lock``); return the exit code."""
    try:
        reg = load_registry(args.root)
        if args.update_lock:
            appended, refused = update_lock(reg)
            for line in appended:
                print(f"issued {line}")
            for problem in refused:
                print(problem, file=sys.stderr)
            return 1 if refused else 0
        tested = set(discover_tests(reg.root)) if has_tests(reg.root) else None
        problems = validate(reg, tested)
    except MalformedInput as exc:
        print(exc, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    kinds = {kind: sum(inv.kind == kind for inv in reg.invariants) for kind in KINDS}
    print(f"{len(reg.invariants)} invariants: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))
    if tested is None:
        print(f"{reg.root}: no tests/ beside specs/ (an installed copy): which invariants have tests is not judged")
    return 1 if problems else 0


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run the command; return the exit code."""
    parser = argparse.ArgumentParser(prog="omni-fsm registry", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return main(parser.parse_args(argv))


__all__ = ["add_arguments", "main", "run"]
