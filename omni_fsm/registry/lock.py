"""The append-only lock of issued IDs: ``specs/ids.lock``, read, checked against the registry, appended to.

Public through ``omni_fsm.registry``; ``python -m omni_fsm.registry --update-lock`` (or ``omni-fsm registry
--update-lock``) appends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import attrs

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.checks import normalize
from omni_fsm.registry.model import ID_PATTERN, KINDS, LOCK_FILE, Registry

#: the command that issues new IDs, as messages name it
UPDATE_LOCK = "`omni-fsm registry --update-lock`"
PROMOTIONS = frozenset({("deferred", "checked")})  #: the only kind changes an issued ID may make


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
        well_formed = len(fields) == 3 and ID_PATTERN.fullmatch(fields[0]) and fields[1] in KINDS
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
