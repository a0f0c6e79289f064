"""The compiled fast path: the table as a dict of tuples, for hot loops."""

from __future__ import annotations

from typing import Any

from omni_fsm._guards import GUARDS, Guard, check_guard_names
from omni_fsm._record import Engine
from omni_fsm._table import Row

_Entry = tuple[tuple[Guard, ...], tuple[Guard, ...], Row]
_id = id


class CompiledTable:
    """``(state, event type) -> rows in match order``, guards resolved to functions."""

    __slots__ = ("_index", "lookup")

    def __init__(self, rows: tuple[Row, ...]) -> None:
        check_guard_names({g for r in rows for g in (*r.when, *r.unless)})
        lookup: dict[tuple[Any, type], list[_Entry]] = {}
        for row in rows:
            entry = (tuple(GUARDS[g] for g in row.when), tuple(GUARDS[g] for g in row.unless), row)
            lookup.setdefault((row.source, row.event), []).append(entry)
        self.lookup: dict[tuple[Any, type], tuple[_Entry, ...]] = {k: tuple(v) for k, v in lookup.items()}
        # The same entries as ``event type -> id(state) -> entries``: an Enum member hashes through
        # a Python-level ``__hash__`` (the slowest part of a tuple key); states are singletons, and
        # the rows keep them alive, so their identity is as good a key as their equality.
        index: dict[type, dict[int, tuple[_Entry, ...]]] = {}
        for (state, event), entries in self.lookup.items():
            index.setdefault(event, {})[_id(state)] = entries
        self._index = index

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Return the first row whose guards hold for ``subject`` and ``event``, else ``None``."""
        by_state = self._index.get(event.__class__)
        if by_state is None:
            return None
        entries = by_state.get(_id(subject.state))
        if entries is None:
            return None
        for when, unless, row in entries:
            for guard in when:
                if not guard(subject, event, engine):
                    break
            else:
                for guard in unless:
                    if guard(subject, event, engine):
                        break
                else:
                    return row
        return None

    def fire(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Select the row and move ``subject`` to its target; ``None`` (no change) if none."""
        # ``select`` inlined: one call fewer on the hottest path of the core.
        by_state = self._index.get(event.__class__)
        if by_state is None:
            return None
        entries = by_state.get(_id(subject.state))
        if entries is None:
            return None
        for when, unless, row in entries:
            for guard in when:
                if not guard(subject, event, engine):
                    break
            else:
                for guard in unless:
                    if guard(subject, event, engine):
                        break
                else:
                    subject.state = row.target
                    return row
        return None
