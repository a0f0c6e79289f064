"""The registry's cross-checks: each returns its problems as ``FILE:LINE: reason``.

Reserved ranges, verbatim rule text, coverage of every contract rule, the checks named, and the
registry checks (``REGISTRY_CHECKS``) such as safe-change topic coverage. Public through
``omni_fsm.registry``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Sequence

import attrs

from omni_fsm.invariants import CHECKS, DIFFERENTIAL_CHECKS, RUNTIME_CHECKS
from omni_fsm.registry.model import DERIVED, LOCK_FILE, Invariant, Registry

# -- cross-checks: each returns its problems as ``FILE:LINE: reason`` --------------------------


def normalize(text: str) -> str:
    """Return ``text`` with Unicode and whitespace normalized (what a rule hash is taken of)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def ids_outside_ranges(reg: Registry) -> list[str]:
    """Return a problem for each ID outside its namespace's reserved range for its topic."""
    problems = []
    for inv in reg.invariants:
        contract = reg.contract(inv.source.contract)
        r = contract.range_for(inv.topic) if contract is not None else None
        if r is None or not r.first <= inv.number <= r.last:
            span = f"{r.first:03d}-{r.last:03d}" if r is not None else "none"
            problems.append(f"{reg.where(inv)}: {inv.id} is outside the range reserved for {inv.topic} ({span})")
    return problems


def rule_text_problems(reg: Registry) -> list[str]:
    """Return a problem for each rule that is not its source's text (or that text + a refinement)."""
    problems = []
    for inv in reg.invariants:
        contract = reg.contract(inv.source.contract)
        item = contract.item(inv.source.item) if contract is not None else None
        if item is None:
            continue
        rule, cited = normalize(inv.rule), normalize(item.text)
        if not inv.source.derived and rule != cited:
            problems.append(f"{reg.where(inv)}: {inv.id}'s rule is not the verbatim text of {item.key}")
        elif inv.source.derived:
            refinement = rule.removeprefix(cited + DERIVED) if rule.startswith(cited + DERIVED) else ""
            if not refinement.endswith(".") or ". " in refinement:
                problems.append(f"{reg.where(inv)}: {inv.id} is derived: its rule must be the text of "
                                f"{item.key}, then {DERIVED.strip()!r} and one sentence")
        if item.invariant is None or inv.source.derived:
            continue
        if item.invariant != inv.id:
            problems.append(f"{reg.where(inv)}: {item.key} is candidate {item.invariant}, not {inv.id}")
        elif item.title != inv.title:
            problems.append(f"{reg.where(inv)}: {inv.id}'s title differs from the contract's {item.title!r}")
    return problems


def uncovered_rules(reg: Registry) -> list[str]:
    """Return a problem for each contract rule no entry states (a derived refinement does not count)."""
    problems = []
    for contract in reg.contracts:
        for item in contract.items:
            where = f"{contract.path}:{item.line}"
            if item.role == "namespace" and not contract.ranges:
                problems.append(f"{where}: the namespace rule needs [[range]] tables")
            if item.role != "rule":
                continue
            stating = [inv for inv in reg.citing(contract.name, item.key) if not inv.source.derived]
            if not stating:
                problems.append(f"{where}: rule {item.key} ({item.section}) has no entry in {reg.path}")
            if item.invariant is not None and item.invariant not in {inv.id for inv in stating}:
                problems.append(f"{where}: candidate {item.invariant} has no entry of that ID")
    has_namespace_rule = any(item.role == "namespace" for c in reg.contracts for item in c.items)
    if has_namespace_rule and not (reg.root / LOCK_FILE).is_file():
        problems.append(f"{LOCK_FILE}:0: the namespace rule (append-only IDs) needs the lock file")
    return problems


def check_problems(reg: Registry) -> list[str]:
    """Return a problem for each unknown check, misplaced check, or check no entry names."""
    problems = []
    named: set[tuple[str, str]] = set()
    for inv in reg.invariants:
        for name in inv.checks:
            named.add((inv.id, name))
            impl = CHECKS.get(name) or DIFFERENTIAL_CHECKS.get(name) or RUNTIME_CHECKS.get(name)
            if impl is not None and impl.invariant != inv.id:
                problems.append(f"{reg.where(inv)}: check {name} implements {impl.invariant}, not {inv.id}")
            elif impl is None and name not in REGISTRY_CHECKS:
                problems.append(f"{reg.where(inv)}: {inv.id} names an unknown check {name!r}")
    owners = {name: c.invariant for name, c in CHECKS.items()}
    owners.update((name, c.invariant) for name, c in DIFFERENTIAL_CHECKS.items())
    owners.update((name, c.invariant) for name, c in RUNTIME_CHECKS.items())
    for name, invariant in sorted(owners.items()):
        if (invariant, name) not in named:
            problems.append(f"{reg.path}:0: check {name} ({invariant}) belongs to no entry of that ID")
    for name in sorted(REGISTRY_CHECKS):
        if not any(name in inv.checks for inv in reg.invariants):
            problems.append(f"{reg.path}:0: registry check {name} is named by no entry")
    return problems


def safe_change_topics_covered(reg: Registry, tested: Collection[str] | None) -> list[str]:
    """Return a problem for each safe-change topic not mapped to checked, tested invariants.

    ``tested`` holds the IDs that have at least one test (``None``: the tests are not here, as in an
    installed copy, so whether the IDs have tests is not judged). A deferred entry may map a topic to
    itself (that topic is then checked by what it is deferred to).
    """
    problems = []
    for contract in reg.contracts:
        for item in (i for i in contract.items if i.topics):
            entries = [inv for inv in reg.citing(contract.name, item.key) if inv.topics]
            mapped = {topic for inv in entries for topic, _ in inv.topics}
            for topic in item.topics:
                if topic not in mapped:
                    problems.append(f"{contract.path}:{item.line}: safe-change topic {topic!r} is mapped to no "
                                    f"invariant in {reg.path}")
            for inv in entries:
                problems += _topic_targets(reg, inv, item.topics, tested)
    return problems


def _topic_targets(reg: Registry, inv: Invariant, topics: Sequence[str], tested: Collection[str] | None) -> list[str]:
    problems = []
    for topic, ids in inv.topics:
        if topic not in topics:
            problems.append(f"{reg.where(inv)}: {inv.id} maps {topic!r}, which its source does not name")
        for target_id in ids:
            target = reg.get(target_id)
            if target_id == inv.id and inv.kind == "deferred":
                continue
            if target is None or target.kind != "checked":
                problems.append(f"{reg.where(inv)}: topic {topic!r} maps to {target_id}, not a checked invariant")
            elif tested is not None and target_id not in tested:
                problems.append(f"{reg.where(inv)}: topic {topic!r} maps to {target_id}, which has no test")
    return problems


@attrs.frozen
class RegistryCheck:
    """A check over the registry itself (not over a history), named by ``checks`` like any other."""

    name: str
    doc: str
    run: Callable[[Registry, Collection[str] | None], list[str]]  #: ``None``: no tests here to judge


REGISTRY_CHECKS: dict[str, RegistryCheck] = {
    "safe_change_topics_covered": RegistryCheck(
        "safe_change_topics_covered",
        "each topic a safe-change guide names maps to checked invariants that have tests",
        safe_change_topics_covered,
    ),
}
