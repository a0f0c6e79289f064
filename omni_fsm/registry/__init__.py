"""The invariant registry: ``specs/`` (both contracts, every invariant, the ID lock) as frozen values.

``load_registry`` reads the TOML files with ``tomllib`` and validates each one; a malformed file
raises ``MalformedInput`` as ``FILE:LINE: reason``. The cross-checks (reserved ranges, verbatim
rule text, coverage of every contract rule, the checks named, the append-only lock) return their
problems in the same ``FILE:LINE: reason`` form; ``validate`` runs them all. ``update_lock``
appends newly issued IDs (and deferred -> checked promotions) to ``specs/ids.lock`` and never
rewrites a line of it.

The values and their loading live in ``model`` (its TOML lines in ``toml_lines``), the
cross-checks in ``checks``, the lock in ``lock``, the facts each checked rule judges
(``specs/facts.toml``) in ``facts``, the tests' ``covers`` marks in ``covers`` and the generated
``docs/traceability.md`` in ``traceability``; this module is their public face and ``validate``.
The command that runs them (``omni-fsm registry [--update-lock]``) is ``omni_fsm.cli.registry``.
"""

from __future__ import annotations

from collections.abc import Collection

from omni_fsm.registry.checks import (
    REGISTRY_CHECKS,
    RegistryCheck,
    check_problems,
    ids_outside_ranges,
    normalize,
    rule_text_problems,
    safe_change_topics_covered,
    uncovered_rules,
)
from omni_fsm.registry.facts import (
    FACTS_FILE,
    Carrier,
    Facts,
    RuleFacts,
    load_facts,
    observable_fields,
    observed_by_problems,
)
from omni_fsm.registry.lock import PROMOTIONS, UPDATE_LOCK, Issued, lock_problems, read_lock, rule_digest, update_lock
from omni_fsm.registry.model import (
    CONTRACTS_DIR,
    DERIVED,
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
    packaged_root,
)

__all__ = ["CONTRACTS_DIR", "DERIVED", "FACTS_FILE", "KINDS", "LOCK_FILE", "PROMOTIONS", "REGISTRY_CHECKS",
           "REGISTRY_FILE", "ROLES", "UPDATE_LOCK", "Carrier", "Contract", "Facts", "Invariant", "Issued", "Item",
           "Range", "Registry", "RegistryCheck", "RuleFacts", "Source", "check_problems", "find_root",
           "ids_outside_ranges", "load_contract", "load_facts", "load_registry", "lock_problems", "normalize",
           "observable_fields", "observed_by_problems", "packaged_root", "read_lock", "rule_digest",
           "rule_text_problems", "safe_change_topics_covered", "uncovered_rules", "update_lock",
           "validate"]  # fmt: skip


def validate(reg: Registry, tested: Collection[str] | None) -> list[str]:
    """Return every cross-check problem of the registry (``tested``: the IDs that have tests; ``None``: no tests
    here, as in an installed copy, so which IDs have tests is not judged).

    Raises ``MalformedInput`` for a malformed ``specs/ids.lock`` or ``specs/facts.toml`` (a checked
    rule without its facts included).
    """
    load_facts(reg)
    checks: tuple[list[str], ...] = (
        ids_outside_ranges(reg), rule_text_problems(reg), uncovered_rules(reg), check_problems(reg),
        lock_problems(reg, read_lock(reg.root)),
        *(check.run(reg, tested) for check in REGISTRY_CHECKS.values()),
    )
    return [problem for found in checks for problem in found]
