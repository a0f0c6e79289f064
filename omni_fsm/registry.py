"""The invariant registry: ``specs/`` (both contracts, every invariant, the ID lock) as frozen values.

``load_registry`` reads the TOML files with ``tomllib`` and validates each one; a malformed file
raises ``MalformedInput`` as ``FILE:LINE: reason``. The cross-checks (reserved ranges, verbatim
rule text, coverage of every contract rule, the checks named, the append-only lock) return their
problems in the same ``FILE:LINE: reason`` form. ``python -m omni_fsm.registry`` runs them all;
``--update-lock`` appends newly issued IDs (and deferred -> checked promotions) to
``specs/ids.lock`` and never rewrites a line of it.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import attrs

from omni_fsm._toml_lines import Fields, Lines, parse
from omni_fsm.errors import MalformedInput
from omni_fsm.invariants import CHECKS, DIFFERENTIAL_CHECKS

CONTRACTS_DIR = "specs/contracts"
REGISTRY_FILE = "specs/invariants.toml"
LOCK_FILE = "specs/ids.lock"
KINDS = ("checked", "deferred", "process")
#: rule: must be covered; scope / context: may be cited; namespace: enforced by ranges and the lock
ROLES = ("rule", "scope", "context", "namespace")
DERIVED = " Derived: "  #: separates a derived rule's cited sentence from its refinement
UPDATE_LOCK = "`.venv/bin/python -m omni_fsm.registry --update-lock`"
PROMOTIONS = frozenset({("deferred", "checked")})  #: the only kind changes an issued ID may make
_ID = re.compile(r"(?P<ns>[A-Z]+-INV)-(?P<num>\d{3})")
_BUG = re.compile(r"B\d+")


# -- the values ------------------------------------------------------------------------------


@attrs.frozen
class Range:
    """A reserved block of ID numbers and the topic it is for."""

    first: int
    last: int
    topic: str
    text: str


@attrs.frozen
class Item:
    """One rule (or one clause, or one piece of context) of a contract, verbatim."""

    key: str
    section: str
    role: str
    text: str
    line: int
    invariant: str | None = None  #: a candidate invariant's own ID
    title: str | None = None
    topics: tuple[str, ...] = ()  #: a safe-change guide's topics, verbatim


@attrs.frozen
class Contract:
    """A contract document in machine-readable form."""

    name: str
    path: str
    file: str
    title: str
    namespace: str
    summary: str
    ranges: tuple[Range, ...]
    items: tuple[Item, ...]
    ranges_source: str | None = None

    def item(self, key: str) -> Item | None:
        """Return the item with ``key``, or ``None``."""
        return next((item for item in self.items if item.key == key), None)

    def range_for(self, topic: str) -> Range | None:
        """Return the reserved range for ``topic``, or ``None``."""
        return next((r for r in self.ranges if r.topic == topic), None)


@attrs.frozen
class Source:
    """Where an invariant comes from: a contract item (``derived``: a refinement of it)."""

    contract: str
    section: str
    item: str
    derived: bool = False


@attrs.frozen
class Invariant:
    """One registry entry."""

    id: str
    title: str
    rule: str
    source: Source
    topic: str
    kind: str
    line: int
    checks: tuple[str, ...] = ()
    deferred_to: str | None = None
    reason: str | None = None
    bugs: tuple[str, ...] = ()
    topics: tuple[tuple[str, tuple[str, ...]], ...] = ()  #: safe-change topic -> invariant IDs
    note: str | None = None

    @property
    def namespace(self) -> str:
        """Return the ID's namespace (``ORCH-INV``, ``AR-INV``)."""
        return self.id.rsplit("-", 1)[0]

    @property
    def number(self) -> int:
        """Return the ID's number."""
        return int(self.id.rsplit("-", 1)[1])

    def topic_map(self) -> dict[str, tuple[str, ...]]:
        """Return the safe-change topic mapping as a dict."""
        return dict(self.topics)


@attrs.frozen
class Registry:
    """Both contracts and every invariant, as loaded from ``root/specs``."""

    root: Path
    path: str
    contracts: tuple[Contract, ...]
    invariants: tuple[Invariant, ...]

    def get(self, invariant_id: str) -> Invariant | None:
        """Return the entry with ``invariant_id``, or ``None``."""
        return next((inv for inv in self.invariants if inv.id == invariant_id), None)

    def contract(self, name: str) -> Contract | None:
        """Return the contract called ``name``, or ``None``."""
        return next((c for c in self.contracts if c.name == name), None)

    def citing(self, contract: str, key: str) -> list[Invariant]:
        """Return the entries whose source is item ``key`` of ``contract``."""
        return [inv for inv in self.invariants if (inv.source.contract, inv.source.item) == (contract, key)]

    def where(self, inv: Invariant) -> str:
        """Return ``FILE:LINE`` of an entry."""
        return f"{self.path}:{inv.line}"


# -- loading ----------------------------------------------------------------------------------


def load_contract(path: Path, shown: str) -> Contract:
    """Return the contract in ``path`` (``shown`` is the name errors use); raise ``MalformedInput``."""
    data, text = parse(path, shown)
    top = Fields(data, shown, None, 0, "contract file")
    top.only({"contract", "range", "item"})
    head = Fields(top.table("contract"), shown, None, 0, "[contract]")
    head.only({"name", "file", "title", "namespace", "summary", "ranges_source"})
    name, namespace = head.text("name"), head.text("namespace")
    if name != path.stem:
        raise head.fail("name", f"name {name!r} must match the file name {path.stem!r}")
    if not re.fullmatch(r"[A-Z]+-INV", namespace):
        raise head.fail("namespace", f"namespace {namespace!r} is not of the form NAME-INV")
    range_lines = Lines(text, "range")
    ranges: list[Range] = []
    for n, table in enumerate(top.tables("range")):
        f = Fields(table, shown, range_lines, n, f"range {n + 1}")
        f.only({"first", "last", "topic", "text"})
        r = Range(f.integer("first"), f.integer("last"), f.text("topic"), f.text("text"))
        if not 1 <= r.first <= r.last <= 999:
            raise f.fail("first", f"range {r.first}-{r.last} is not within 001-999")
        if any(r.first <= o.last and o.first <= r.last for o in ranges) or any(o.topic == r.topic for o in ranges):
            raise f.fail("first", f"range {r.first}-{r.last} ({r.topic}) overlaps or repeats another")
        ranges.append(r)
    item_lines = Lines(text, "item")
    items: list[Item] = []
    for n, table in enumerate(top.tables("item")):
        items.append(_item(Fields(table, shown, item_lines, n, f"item {n + 1}"), namespace, items))
    return Contract(name, shown, head.text("file"), head.text("title"), namespace, head.text("summary"),
                    tuple(ranges), tuple(items), head.optional_text("ranges_source"))


def _item(f: Fields, namespace: str, earlier: Sequence[Item]) -> Item:
    f.only({"key", "section", "role", "text", "invariant", "title", "topics"})
    key, role, text = f.text("key"), f.text("role"), f.text("text")
    if any(item.key == key for item in earlier):
        raise f.fail("key", f"duplicate key {key!r}")
    if role not in ROLES:
        raise f.fail("role", f"role {role!r} is not one of {', '.join(ROLES)}")
    invariant = f.optional_text("invariant")
    if invariant is not None and not re.fullmatch(rf"{re.escape(namespace)}-\d{{3}}", invariant):
        raise f.fail("invariant", f"{invariant!r} is not an ID of namespace {namespace}")
    if (invariant is None) != ("title" not in f.data):
        raise f.fail("title", "a candidate invariant has both 'invariant' and 'title'")
    topics = f.texts("topics")
    for topic in topics:
        if topic not in text:
            raise f.fail("topics", f"topic {topic!r} does not occur in the item's text")
    return Item(key, f.text("section"), role, text, f.line(), invariant, f.optional_text("title"), topics)


def load_registry(root: Path | None = None) -> Registry:
    """Return the registry of ``root/specs`` (default: this checkout); raise ``MalformedInput``."""
    root = find_root() if root is None else root
    contracts_dir = root / CONTRACTS_DIR
    contracts = tuple(load_contract(p, p.relative_to(root).as_posix()) for p in sorted(contracts_dir.glob("*.toml")))
    if not contracts:
        raise MalformedInput(CONTRACTS_DIR, 0, "no contract files (*.toml)")
    data, text = parse(root / REGISTRY_FILE, REGISTRY_FILE)
    top = Fields(data, REGISTRY_FILE, None, 0, "registry")
    top.only({"invariant"})
    lines = Lines(text, "invariant")
    by_name = {c.name: c for c in contracts}
    invariants: list[Invariant] = []
    for n, table in enumerate(top.tables("invariant")):
        f = Fields(table, REGISTRY_FILE, lines, n, f"invariant {table.get('id', n + 1)}")
        inv = _invariant(f, by_name)
        if any(other.id == inv.id for other in invariants):
            raise f.fail("id", f"duplicate ID {inv.id}")
        invariants.append(inv)
    return Registry(root, REGISTRY_FILE, contracts, tuple(invariants))


def _invariant(f: Fields, contracts: Mapping[str, Contract]) -> Invariant:
    f.only({"id", "title", "rule", "source", "topic", "kind", "checks", "deferred_to", "reason", "bugs",
            "topics", "note"})
    inv_id, kind = f.text("id"), f.text("kind")
    if not _ID.fullmatch(inv_id):
        raise f.fail("id", f"ID {inv_id!r} is not of the form NAME-INV-NNN")
    if kind not in KINDS:
        raise f.fail("kind", f"kind {kind!r} is not one of {', '.join(KINDS)}")
    src = Fields(f.table("source"), f.path, f.lines, f.index, f"{f.what} source", anchor="source")
    src.only({"contract", "section", "item", "derived"})
    derived = src.data.get("derived", False)
    if not isinstance(derived, bool):
        raise f.fail("source", "source.derived must be true or false")
    source = Source(src.text("contract"), src.text("section"), src.text("item"), derived)
    contract = contracts.get(source.contract)
    item = contract.item(source.item) if contract is not None else None
    if contract is None or item is None:
        raise f.fail("source", f"source {source.contract!r} item {source.item!r} is not in specs/contracts/")
    if item.section != source.section:
        raise f.fail("source", f"item {source.item!r} is in section {item.section!r}, not {source.section!r}")
    if not inv_id.startswith(contract.namespace + "-"):
        raise f.fail("id", f"{inv_id} comes from {contract.name}, whose namespace is {contract.namespace}")
    topic = f.text("topic")
    if contract.range_for(topic) is None:
        raise f.fail("topic", f"topic {topic!r} is not a reserved range of {contract.namespace}")
    checks, bugs = f.texts("checks"), f.texts("bugs")
    for field, needed in (("checks", "checked"), ("deferred_to", "deferred"), ("reason", "process")):
        present = bool(checks) if field == "checks" else field in f.data
        if present != (kind == needed):
            raise f.fail(field, f"{field!r} is {'required for' if kind == needed else 'only for'} kind {needed!r}")
    reason = f.optional_text("reason")
    if reason is not None and "\n" in reason.strip():
        raise f.fail("reason", "the reason of a process rule is one line")
    for bug in bugs:
        if not _BUG.fullmatch(bug):
            raise f.fail("bugs", f"{bug!r} is not a historic bug ID (B1, B2, ...)")
    topics: list[tuple[str, tuple[str, ...]]] = []
    for name, ids in f.table("topics").items():
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and _ID.fullmatch(i) for i in ids):
            raise f.fail("topics", f"topic {name!r} must map to a non-empty list of invariant IDs")
        topics.append((name, tuple(ids)))
    return Invariant(inv_id, f.text("title"), f.text("rule"), source, topic, kind, f.line(), checks,
                     f.optional_text("deferred_to"), reason, bugs, tuple(topics), f.optional_text("note"))


def find_root(start: Path | None = None) -> Path:
    """Return the checkout holding ``specs/invariants.toml``: ``start`` (cwd) or above, else this package's."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / REGISTRY_FILE).is_file():
            return candidate
    return Path(__file__).resolve().parents[1]


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
            impl = CHECKS.get(name) or DIFFERENTIAL_CHECKS.get(name)
            if impl is not None and impl.invariant != inv.id:
                problems.append(f"{reg.where(inv)}: check {name} implements {impl.invariant}, not {inv.id}")
            elif impl is None and name not in REGISTRY_CHECKS:
                problems.append(f"{reg.where(inv)}: {inv.id} names an unknown check {name!r}")
    owners = {name: c.invariant for name, c in CHECKS.items()}
    owners.update((name, c.invariant) for name, c in DIFFERENTIAL_CHECKS.items())
    for name, invariant in sorted(owners.items()):
        if (invariant, name) not in named:
            problems.append(f"{reg.path}:0: check {name} ({invariant}) belongs to no entry of that ID")
    for name in sorted(REGISTRY_CHECKS):
        if not any(name in inv.checks for inv in reg.invariants):
            problems.append(f"{reg.path}:0: registry check {name} is named by no entry")
    return problems


def safe_change_topics_covered(reg: Registry, tested: Collection[str]) -> list[str]:
    """Return a problem for each safe-change topic not mapped to checked, tested invariants.

    ``tested`` holds the IDs that have at least one test. A deferred entry may map a topic to
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


def _topic_targets(reg: Registry, inv: Invariant, topics: Sequence[str], tested: Collection[str]) -> list[str]:
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
            elif target_id not in tested:
                problems.append(f"{reg.where(inv)}: topic {topic!r} maps to {target_id}, which has no test")
    return problems


@attrs.frozen
class RegistryCheck:
    """A check over the registry itself (not over a history), named by ``checks`` like any other."""

    name: str
    doc: str
    run: Callable[[Registry, Collection[str]], list[str]]


REGISTRY_CHECKS: dict[str, RegistryCheck] = {
    "safe_change_topics_covered": RegistryCheck(
        "safe_change_topics_covered",
        "each topic a safe-change guide names maps to checked invariants that have tests",
        safe_change_topics_covered,
    ),
}


# -- the append-only lock of issued IDs ----------------------------------------------------------


@attrs.frozen
class Issued:
    """One line of ``specs/ids.lock``: an ID, its kind then, and the hash of its rule."""

    id: str
    kind: str
    digest: str
    line: int


def rule_digest(rule: str) -> str:
    """Return ``sha256:<hex>`` of the normalized rule text."""
    return "sha256:" + hashlib.sha256(normalize(rule).encode("utf-8")).hexdigest()


def read_lock(root: Path) -> tuple[Issued, ...]:
    """Return the lines of ``root/specs/ids.lock`` (none if it does not exist); raise ``MalformedInput``."""
    path = root / LOCK_FILE
    if not path.is_file():
        return ()
    issued: list[Issued] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        well_formed = len(fields) == 3 and _ID.fullmatch(fields[0]) and fields[1] in KINDS
        if not well_formed or not fields[2].startswith("sha256:"):
            raise MalformedInput(LOCK_FILE, n, "expected 'ID KIND sha256:HEX'")
        first = next((i for i in issued if i.id == fields[0]), None)
        if first is not None and first.digest != fields[2]:
            raise MalformedInput(LOCK_FILE, n, f"{fields[0]} is locked again with another rule hash")
        issued.append(Issued(fields[0], fields[1], fields[2], n))
    return tuple(issued)


def _locked(issued: Sequence[Issued]) -> dict[str, tuple[Issued, Issued]]:
    """Return ID -> (first line, latest line)."""
    out: dict[str, tuple[Issued, Issued]] = {}
    for entry in issued:
        out[entry.id] = (out[entry.id][0] if entry.id in out else entry, entry)
    return out


def _lock_findings(reg: Registry, issued: Sequence[Issued]) -> list[tuple[str, str]]:
    """Return (what, message) per finding; what is vanished, changed, kind, promotion or new."""
    findings, locked = [], _locked(issued)
    for inv_id, (first, latest) in locked.items():
        inv, where = reg.get(inv_id), f"{LOCK_FILE}:{first.line}"
        if inv is None:
            findings.append(("vanished", f"{where}: {inv_id} was issued but is gone from {reg.path}: "
                                         "IDs are append-only"))
        elif rule_digest(inv.rule) != first.digest:
            findings.append(("changed", f"{reg.where(inv)}: {inv_id} changed meaning: its rule no longer matches "
                                        f"the text issued at {where}; restore the rule, or give the new rule "
                                        "a new ID"))
        elif inv.kind != latest.kind and (latest.kind, inv.kind) in PROMOTIONS:
            findings.append(("promotion", f"{reg.where(inv)}: {inv_id} was promoted {latest.kind} -> {inv.kind}: "
                                          f"record it with {UPDATE_LOCK}"))
        elif inv.kind != latest.kind:
            findings.append(("kind", f"{reg.where(inv)}: {inv_id} changed kind {latest.kind} -> {inv.kind}: "
                                     "only deferred -> checked is allowed; give the new rule a new ID"))
    for inv in reg.invariants:
        if inv.id not in locked:
            findings.append(("new", f"{reg.where(inv)}: {inv.id} is not in {LOCK_FILE}: issue it with {UPDATE_LOCK}"))
    return findings


def lock_problems(reg: Registry, issued: Sequence[Issued]) -> list[str]:
    """Return a problem for each issued ID that vanished or changed meaning, and each change not locked."""
    return [message for _, message in _lock_findings(reg, issued)]


def update_lock(reg: Registry) -> tuple[list[str], list[str]]:
    """Append new IDs and promotions to the lock; return (lines appended, problems that refused it).

    Nothing is appended while an issued ID vanished, changed meaning or changed kind illegally.
    """
    issued = read_lock(reg.root)
    refused = [msg for what, msg in _lock_findings(reg, issued) if what in ("vanished", "changed", "kind")]
    if refused:
        return [], refused
    locked = _locked(issued)
    lines = [f"{inv.id} {inv.kind} {rule_digest(inv.rule)}" for inv in reg.invariants
             if inv.id not in locked or locked[inv.id][1].kind != inv.kind]
    path = reg.root / LOCK_FILE
    header = "" if path.exists() else _LOCK_HEADER
    if lines or header:
        with path.open("a", encoding="utf-8") as lock:
            lock.write(header + "".join(line + "\n" for line in lines))
    return lines, []


_LOCK_HEADER = """\
# Every issued invariant ID: ID, kind when issued, sha256 of its normalized rule text.
# Append-only: a line is never changed or removed (tests/fsm/test_registry.py fails if an ID
# vanishes from specs/invariants.toml or its rule changes). A later line for the same ID records
# its promotion from deferred to checked. New IDs: .venv/bin/python -m omni_fsm.registry --update-lock
"""


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
    from omni_fsm.traceability import discover_tests  # the test scan is traceability's business

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
