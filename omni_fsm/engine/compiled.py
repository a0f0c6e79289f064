"""Row selection for hot loops: the table indexed as ``event type -> state -> select(record, event, engine)``.

Each selector tests its rows' guards (the functions of ``GUARDS``) in table order and returns the
first row that matches, exactly what the ``transitions`` reference does (a property test holds the
two together). Selectors are plain closures over the rows and the guard functions: no code is
generated, so a guard's error shows the guard's own file and line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from omni_fsm.errors import ConfigError
from omni_fsm.spec import selection as generated
from omni_fsm.spec.guards import GUARDS, Guard, check_guard_names
from omni_fsm.spec.record import Engine
from omni_fsm.spec.table import Row, Spec, rows_digest

_Entry = tuple[tuple[str, ...], tuple[str, ...], Row]
Selector = Callable[[Any, Any, Engine], Row | None]


def _always(row: Row) -> Selector:
    """Return the selector of one unguarded row (most (state, event type) pairs have just that)."""

    def select(record: Any, event: Any, engine: Engine) -> Row:
        return row

    return select


def _first_holding(tests: tuple[tuple[tuple[Guard, ...], tuple[Guard, ...], Row], ...]) -> Selector:
    """Return the selector that tries ``(when, unless, row)`` in order: every ``when`` holds, no ``unless`` does."""

    def select(record: Any, event: Any, engine: Engine) -> Row | None:
        for when, unless, row in tests:
            for guard in when:
                if not guard(record, event, engine):
                    break
            else:
                for guard in unless:
                    if guard(record, event, engine):
                        break
                else:
                    return row
        return None

    return select


def selector(entries: tuple[_Entry, ...], guards: dict[str, Guard]) -> Selector:
    """Return ``select(record, event, engine)`` for one (state, event type)'s rows, in match order."""
    for when, unless, row in entries[:-1]:
        if not when and not unless:  # rows after an unguarded one could never match: a table bug
            raise ConfigError(f"{row.source!r} --{row.event.__name__}-->: an unguarded row hides the rows after it")
    if len(entries) == 1 and not entries[0][0] and not entries[0][1]:
        return _always(entries[0][2])
    tests = tuple((tuple(guards[g] for g in when), tuple(guards[g] for g in unless), row)
                  for when, unless, row in entries)  # fmt: skip
    return _first_holding(tests)


def is_generated_for(rows: tuple[Row, ...], guards: dict[str, Guard]) -> bool:
    """Return whether ``spec/selection.py`` was generated from ``rows`` and these very guard functions."""
    return rows_digest(rows) == generated.DIGEST and all(guards.get(n) is g for n, g in generated.MADE_WITH.items())


class CompiledTable:
    """``(state, event type) -> rows in match order``, one selector each: the generated ones
    (``spec/selection.py``, guards inlined) for the table they were made from, else closures over
    the guard functions (``closures=True`` forces those)."""

    __slots__ = ("index", "lookup")

    def __init__(self, rows: tuple[Row, ...], guards: dict[str, Guard] | None = None, closures: bool = False) -> None:
        guards = GUARDS if guards is None else guards
        check_guard_names({g for r in rows for g in (*r.when, *r.unless)})
        lookup: dict[tuple[Any, type], list[_Entry]] = {}
        for row in rows:
            lookup.setdefault((row.source, row.event), []).append((row.when, row.unless, row))
        self.lookup: dict[tuple[Any, type], tuple[_Entry, ...]] = {k: tuple(v) for k, v in lookup.items()}
        # ``event type -> state -> selector`` (states hash by identity, in C: see ``IdentityHashedEnum``)
        index: dict[type, dict[Any, Selector]] = {}
        for (state, event), entries in self.lookup.items():
            index.setdefault(event, {})[state] = selector(entries, guards)  # also checks the rows' order
        if not closures and is_generated_for(rows, guards):
            index = generated.INDEX
        self.index = index  #: event type -> state -> selector (a hot loop may look it up inline)

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Return the first row whose guards hold for ``subject`` and ``event``, else ``None``."""
        by_state = self.index.get(event.__class__)
        if by_state is None:
            return None
        select = by_state.get(subject.state)
        return None if select is None else select(subject, event, engine)

    def fire(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Select the row and move ``subject`` to its target; ``None`` (no change) if none."""
        row = self.select(subject, event, engine)
        if row is not None:
            subject.state = row.target
        return row


def policy_digest(spec: Spec) -> str:
    """Return a digest of what a program takes from ``spec`` beyond its rows: fan-outs, terminal effects, slots."""
    made_of = (sorted((e.name, repr(f)) for e, f in spec.fan_out.items()), [e.name for e in spec.on_terminal],
               sorted(s.name for s in spec.holds_slot))
    return hashlib.sha256(repr(made_of).encode()).hexdigest()[:16]


__all__ = ["CompiledTable", "Selector", "is_generated_for", "policy_digest", "selector"]
