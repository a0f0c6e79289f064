"""The invariant registry: ``specs/`` (both contracts, every invariant, the ID lock) as frozen values.

``load_registry`` reads the TOML files with ``tomllib`` and validates each one; a malformed file
raises ``MalformedInput`` as ``FILE:LINE: reason``. The cross-checks (reserved ranges, verbatim
rule text, coverage of every contract rule, the checks named, the append-only lock) return their
problems in the same ``FILE:LINE: reason`` form. ``python -m omni_fsm.registry`` runs them all;
``--update-lock`` appends newly issued IDs (and deferred -> checked promotions) to
``specs/ids.lock`` and never rewrites a line of it.

The values and their loading live in ``_registry_model``, the cross-checks in ``_registry_checks``,
the lock in ``_registry_lock``; this module is their public face, ``validate`` and the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.checks import (
    DERIVED,
    REGISTRY_CHECKS,
    RegistryCheck,
    check_problems,
    ids_outside_ranges,
    normalize,
    rule_text_problems,
    safe_change_topics_covered,
    uncovered_rules,
)
from omni_fsm.registry.lock import PROMOTIONS, UPDATE_LOCK, Issued, lock_problems, read_lock, rule_digest, update_lock
from omni_fsm.registry.model import (
    CONTRACTS_DIR,
    KINDS,
    LOCK_FILE,
    REGISTRY_FILE,
    ROLES,
    Contract,
    Invariant,
    Item,
    Range,
    Registry,
    Source,
    find_root,
    load_contract,
    load_registry,
)

__all__ = ["CONTRACTS_DIR", "DERIVED", "KINDS", "LOCK_FILE", "PROMOTIONS", "REGISTRY_CHECKS", "REGISTRY_FILE",
           "ROLES", "UPDATE_LOCK", "Contract", "Invariant", "Issued", "Item", "Range", "Registry", "RegistryCheck",
           "Source", "check_problems", "find_root", "ids_outside_ranges", "load_contract", "load_registry",
           "lock_problems", "main", "normalize", "read_lock", "rule_digest", "rule_text_problems",
           "safe_change_topics_covered", "uncovered_rules", "update_lock", "validate"]  # fmt: skip


def validate(reg: Registry, tested: Collection[str]) -> list[str]:
    """Return every cross-check problem of the registry (``tested``: the IDs that have tests)."""
    checks: tuple[list[str], ...] = (
        ids_outside_ranges(reg), rule_text_problems(reg), uncovered_rules(reg), check_problems(reg),
        lock_problems(reg, read_lock(reg.root)),
        *(check.run(reg, tested) for check in REGISTRY_CHECKS.values()),
    )
    return [problem for found in checks for problem in found]


# -- command line ---------------------------------------------------------------------------------


_SUMMARY = "validate specs/ (contracts, invariant registry, ID lock); --update-lock issues new IDs"


def main(argv: Sequence[str] | None = None) -> int:
    """Validate ``specs/`` (or append to the lock with ``--update-lock``); return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m omni_fsm.registry", description=_SUMMARY)
    parser.add_argument("--root", type=Path, default=None, help="the checkout (default: found from cwd)")
    parser.add_argument("--update-lock", action="store_true", help="append newly issued IDs to specs/ids.lock")
    args = parser.parse_args(argv)
    from omni_fsm.registry.traceability import discover_tests  # the test scan is traceability's business

    try:
        reg = load_registry(args.root)
        if args.update_lock:
            appended, refused = update_lock(reg)
            for line in appended:
                print(f"issued {line}")
            for problem in refused:
                print(problem, file=sys.stderr)
            return 1 if refused else 0
        problems = validate(reg, set(discover_tests(reg.root)))
    except MalformedInput as exc:
        print(exc, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    kinds = {kind: sum(inv.kind == kind for inv in reg.invariants) for kind in KINDS}
    print(f"{len(reg.invariants)} invariants: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
