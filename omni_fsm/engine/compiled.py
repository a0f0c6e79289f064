"""The compiled fast path: the table turned into one small Python function per
``(state, event type)``, for hot loops.

Each function tests its rows' guards in table order and returns the first row that matches,
exactly what the ``transitions`` reference does (a property test holds the two together). The
functions are generated from the rows, so nothing is typed twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_fsm.errors import ConfigError
from omni_fsm.spec.guards import NAMESPACE, check_guard_names, inlined
from omni_fsm.spec.record import Engine
from omni_fsm.spec.table import Row

_Entry = tuple[tuple[str, ...], tuple[str, ...], Row]
_Selector = Callable[[Any, Any, Engine], Row | None]


def _selector(entries: tuple[_Entry, ...]) -> _Selector:
    """Generate ``select(r, e, g)`` for one (state, event type)'s rows, guard expressions inlined."""
    names: dict[str, Any] = dict(NAMESPACE)
    lines = ["def select(r, e, g):"]
    for i, (when, unless, row) in enumerate(entries):
        names[f"row{i}"] = row
        tests = [f"({inlined(g)})" for g in when] + [f"not ({inlined(g)})" for g in unless]
        if not tests:
            if i != len(entries) - 1:  # rows after an unguarded one could never match: a table bug
                raise ConfigError(f"{row.source!r} --{row.event.__name__}-->: an unguarded row hides the rows after it")
            lines.append(f"    return row{i}")
            break
        lines.append(f"    if {' and '.join(tests)}:\n        return row{i}")
    else:
        lines.append("    return None")
    exec("\n".join(lines), names)  # generated from the table's own rows and guards, nothing else
    selector: _Selector = names["select"]
    return selector


class CompiledTable:
    """``(state, event type) -> rows in match order``, one generated selector each (guards inlined)."""

    __slots__ = ("index", "lookup")

    def __init__(self, rows: tuple[Row, ...]) -> None:
        check_guard_names({g for r in rows for g in (*r.when, *r.unless)})
        lookup: dict[tuple[Any, type], list[_Entry]] = {}
        for row in rows:
            entry = (row.when, row.unless, row)
            lookup.setdefault((row.source, row.event), []).append(entry)
        self.lookup: dict[tuple[Any, type], tuple[_Entry, ...]] = {k: tuple(v) for k, v in lookup.items()}
        # ``event type -> state -> selector`` (states hash by identity, in C: see ``IdentityHashedEnum``)
        index: dict[type, dict[Any, _Selector]] = {}
        for (state, event), entries in self.lookup.items():
            index.setdefault(event, {})[state] = _selector(entries)
        self.index = index  #: event type -> state -> selector (a hot loop may look it up inline)

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Return the first row whose guards hold for ``subject`` and ``event``, else ``None``."""
        by_state = self.index.get(event.__class__)
        if by_state is None:
            return None
        selector = by_state.get(subject.state)
        return None if selector is None else selector(subject, event, engine)

    def fire(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Select the row and move ``subject`` to its target; ``None`` (no change) if none."""
        by_state = self.index.get(event.__class__)
        if by_state is None:
            return None
        selector = by_state.get(subject.state)
        if selector is None:
            return None
        row = selector(subject, event, engine)
        if row is not None:
            subject.state = row.target
        return row
