"""The registry's values and their loading: contracts, items, ranges and invariants from ``specs/``.

``load_registry`` reads the TOML files with ``tomllib`` and validates each one; a malformed file
raises ``MalformedInput`` as ``FILE:LINE: reason``. Public through ``omni_fsm.registry``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import attrs

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.toml_lines import Fields, Lines, parse

CONTRACTS_DIR = "specs/contracts"
REGISTRY_FILE = "specs/invariants.toml"
LOCK_FILE = "specs/ids.lock"
KINDS = ("checked", "deferred", "process")
#: rule: must be covered; scope / context: may be cited; namespace: enforced by ranges and the lock
ROLES = ("rule", "scope", "context", "namespace")
DERIVED = " Derived: "  #: separates a derived rule's cited sentence from its refinement
#: An invariant ID: namespace (``ORCH-INV``) and a three-digit number.
ID_PATTERN = re.compile(r"(?P<ns>[A-Z]+-INV)-(?P<num>\d{3})")
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

    @property
    def statement(self) -> str:
        """Return the rule itself: the contract's text, or for a derived rule its refinement (not the contract's
        sentence it cites, which may be a whole paragraph about ownership or testing)."""
        if not self.source.derived or DERIVED not in self.rule:
            return self.rule
        refinement = self.rule.split(DERIVED, 1)[1].strip()
        return refinement[:1].upper() + refinement[1:]


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
    """Return the registry of ``root/specs`` (default: ``find_root()``); raise ``MalformedInput``."""
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
    if not ID_PATTERN.fullmatch(inv_id):
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
        valid = isinstance(ids, list) and ids and all(isinstance(i, str) and ID_PATTERN.fullmatch(i) for i in ids)
        if not valid:
            raise f.fail("topics", f"topic {name!r} must map to a non-empty list of invariant IDs")
        topics.append((name, tuple(ids)))
    return Invariant(inv_id, f.text("title"), f.text("rule"), source, topic, kind, f.line(), checks,
                     f.optional_text("deferred_to"), reason, bugs, tuple(topics), f.optional_text("note"))


def find_root(start: Path | None = None) -> Path:
    """Return the directory holding ``specs/invariants.toml``: ``start`` (cwd) or above, else ``packaged_root()``."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / REGISTRY_FILE).is_file():
            return candidate
    return packaged_root()


def packaged_root() -> Path:
    """Return the directory whose ``specs/`` this package ships: its checkout (editable), else its ``_data``."""
    specs = resources.files("omni_fsm") / "_data" / "specs"
    # In a checkout ``_data/specs`` links to the checkout's ``specs/``, so the parent is the checkout (tests and
    # docs beside it); in a wheel it is a copy, so the parent is ``_data``. pip unpacks wheels: a directory.
    return Path(str(specs)).resolve().parent
