"""``specs/facts.toml``: the observable facts each ``checked`` rule judges, as frozen values.

Per checked invariant of ``specs/invariants.toml`` one ``RuleFacts``: the identities its judgement
needs and the moment a violation becomes provable (each from the file's closed lists), the relations
between observations it speaks of, the event and observation fields that carry them (``observed_by``),
and what no field carries (``missing``) or the check leaves out (``gap``). ``load_facts`` validates the
file against itself and the registry and raises ``MalformedInput`` as ``FILE:LINE: reason``.

The registry may not import ``omni_fsm.spec`` (docs/architecture.md), so ``observed_by_problems``
resolves each ``Class.field`` against classes its caller hands in (``observable_fields``): the event
and observation classes a trace carries.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import attrs

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.model import Registry
from omni_fsm.registry.toml_lines import Fields, Lines, parse

FACTS_FILE = "specs/facts.toml"
#: the moment of a registry check: judged over ``specs/`` and the tests, so nothing observed carries it
AT_VALIDATION = "at validation"
#: the moment no finite prefix reaches: ``only_at_end`` would repeat it
AT_END = "at the end marker"
#: ``Class.field``, or ``Class`` alone (an observation with no fields: its occurrence is the fact)
_CARRIER = re.compile(r"(?P<cls>[A-Z][A-Za-z0-9]*)(?:\.(?P<field>[a-z_][a-z0-9_]*))?")


@attrs.frozen
class Carrier:
    """A field of an event or observation that carries a fact (``field`` ``None``: the occurrence itself)."""

    cls: str
    field: str | None
    line: int

    def __str__(self) -> str:
        return self.cls if self.field is None else f"{self.cls}.{self.field}"


@attrs.frozen
class RuleFacts:
    """The facts one checked rule judges."""

    id: str
    identities: tuple[str, ...]
    relations: tuple[str, ...]
    moment: str
    observed_by: tuple[Carrier, ...]
    line: int
    only_at_end: str | None = None
    missing: tuple[str, ...] = ()
    gap: str | None = None


@attrs.frozen
class Facts:
    """The closed vocabularies (name -> meaning, in file order) and the facts of every checked rule."""

    path: str
    identities: tuple[tuple[str, str], ...]
    moments: tuple[tuple[str, str], ...]
    rules: tuple[RuleFacts, ...]

    def get(self, invariant_id: str) -> RuleFacts | None:
        """Return the facts of ``invariant_id``, or ``None``."""
        return next((rule for rule in self.rules if rule.id == invariant_id), None)


# -- loading ----------------------------------------------------------------------------------


def load_facts(reg: Registry) -> Facts:
    """Return the facts in ``reg.root/specs/facts.toml``, one entry per checked invariant; raise ``MalformedInput``."""
    data, text = parse(reg.root / FACTS_FILE, FACTS_FILE)
    top = Fields(data, FACTS_FILE, None, 0, "facts file")
    top.only({"identities", "moments", "rule"})
    root_lines = Lines(text)
    identities = _vocabulary(top, root_lines, "identities")
    moments = _vocabulary(top, root_lines, "moments")
    lines = Lines(text, "rule")
    rules: list[RuleFacts] = []
    for n, table in enumerate(top.tables("rule")):
        f = Fields(table, FACTS_FILE, lines, n, f"rule {table.get('id', n + 1)}")
        rule = _rule(f, lines, dict(identities), dict(moments))
        inv = reg.get(rule.id)
        if inv is None or inv.kind != "checked":
            what = "not in" if inv is None else f"{inv.kind}, not checked, in"
            raise f.fail("id", f"{rule.id} is {what} {reg.path}: only checked rules have facts")
        if any(other.id == rule.id for other in rules):
            raise f.fail("id", f"a second entry for {rule.id}")
        rules.append(rule)
    for inv in reg.invariants:
        if inv.kind == "checked" and not any(rule.id == inv.id for rule in rules):
            raise MalformedInput(reg.path, inv.line, f"{inv.id} is checked but has no [[rule]] in {FACTS_FILE}")
    return Facts(FACTS_FILE, identities, moments, tuple(rules))


def _vocabulary(top: Fields, lines: Lines, key: str) -> tuple[tuple[str, str], ...]:
    table = Fields(top.table(key), FACTS_FILE, None, 0, f"[{key}]")
    if not table.data:
        raise MalformedInput(FACTS_FILE, lines.find(key), f"[{key}]: the closed list is empty or missing")
    for name, meaning in table.data.items():
        if not isinstance(meaning, str) or not meaning.strip():
            raise MalformedInput(FACTS_FILE, lines.find(key, 0, name), f"[{key}]: {name!r} needs a meaning (a string)")
    return tuple(table.data.items())


def _rule(f: Fields, lines: Lines, identities: Mapping[str, str], moments: Mapping[str, str]) -> RuleFacts:
    f.only({"id", "identities", "relations", "moment", "only_at_end", "observed_by", "missing", "gap"})
    names, relations, moment = f.texts("identities"), f.texts("relations"), f.text("moment")
    if not names or not relations:
        raise f.fail("identities" if not names else "relations", "needs at least one entry")
    for name in names:
        if name not in identities:
            raise f.fail("identities", f"identity {name!r} is not one of {', '.join(identities)}")
    if len(set(names)) != len(names):
        raise f.fail("identities", "an identity is named twice")
    if moment not in moments:
        raise f.fail("moment", f"moment {moment!r} is not one of {', '.join(moments)}")
    only_at_end = f.optional_text("only_at_end")
    if only_at_end is not None and moment in (AT_END, AT_VALIDATION):
        raise f.fail("only_at_end", f"only_at_end says nothing more when the moment is {moment!r}")
    observed = tuple(_carrier(f, lines, entry) for entry in f.texts("observed_by"))
    if (moment == AT_VALIDATION) != (not observed):
        need = "none (nothing observed carries a registry check)" if moment == AT_VALIDATION else "at least one"
        raise f.fail("observed_by", f"a rule judged {moment!r} has {need} in observed_by")
    return RuleFacts(f.text("id"), names, relations, moment, observed, f.line(), only_at_end, f.texts("missing"),
                     f.optional_text("gap"))


def _carrier(f: Fields, lines: Lines, entry: str) -> Carrier:
    match = _CARRIER.fullmatch(entry)
    if match is None:
        raise f.fail("observed_by", f"{entry!r} is not Class.field (or Class)")
    start = f.line("observed_by")
    quoted = re.compile(rf"""["']{re.escape(entry)}["']""")
    line = next((n for n in range(start, len(lines.lines) + 1) if quoted.search(lines.lines[n - 1])), start)
    return Carrier(match["cls"], match["field"], line)


# -- the fields a trace carries ---------------------------------------------------------------


def _field_names(cls: Any) -> tuple[str, ...]:
    """Return the field names of an event or observation class (or of a base class that declares some: ``rid``), of
    an attrs class, else none."""
    if hasattr(cls, "field_names"):
        return cls.field_names()  # type: ignore[no-any-return]
    return tuple(a.name for a in attrs.fields(cls)) if attrs.has(cls) else ()


def observable_fields(classes: Iterable[type]) -> dict[str, frozenset[str]]:
    """Return class name -> field names of ``classes``, and of their base classes that declare fields."""
    fields: dict[str, frozenset[str]] = {}
    for cls in classes:
        fields[cls.__name__] = frozenset(_field_names(cls))
        for base in cls.__mro__[1:]:
            if names := _field_names(base):  # ``StageEvent.stage``: every runtime report's
                fields[base.__name__] = frozenset(names)
    return fields


def observed_by_problems(facts: Facts, carried: Mapping[str, Collection[str]]) -> list[str]:
    """Return a problem for each ``observed_by`` entry that names no field of a class in ``carried``.

    ``carried`` maps a class name to its field names (``observable_fields``); ``Class`` alone is right
    only for a class with no fields.
    """
    problems = []
    for rule in facts.rules:
        for carrier in rule.observed_by:
            fields = carried.get(carrier.cls)
            where = f"{facts.path}:{carrier.line}: rule {rule.id}: observed_by {str(carrier)!r}"
            if fields is None:
                problems.append(f"{where}: {carrier.cls} is no event or observation a trace carries")
            elif carrier.field is None and fields:
                problems.append(f"{where}: {carrier.cls} has fields ({', '.join(sorted(fields))}): name one")
            elif carrier.field is not None and carrier.field not in fields:
                known = ", ".join(sorted(fields)) or "none"
                problems.append(f"{where}: {carrier.cls} has no field {carrier.field!r} (its fields: {known})")
    return problems


__all__ = ["AT_END", "AT_VALIDATION", "FACTS_FILE", "Carrier", "Facts", "RuleFacts", "load_facts",
           "observable_fields", "observed_by_problems"]  # fmt: skip
