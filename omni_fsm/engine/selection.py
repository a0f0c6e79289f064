"""Row selection: a table indexed as ``event type -> state -> candidate rows``; the first whose guards hold wins.

Plain data, built once from a table's rows and the guard functions its ``Spec`` carries: a dict lookup,
then each candidate's guards called in table order, exactly what the ``transitions`` reference does (a
property test holds the two together). A guard's error shows the guard's own file and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_fsm.errors import ConfigError
from omni_fsm.spec.guards import GUARDS, Guard, check_guard_names
from omni_fsm.spec.record import Engine
from omni_fsm.spec.table import Row

#: one candidate row: the guards that must hold, the guards that must not, and the row
Candidate = tuple[tuple[Guard, ...], tuple[Guard, ...], Row]


def candidates(rows: tuple[Row, ...], guards: Mapping[str, Guard]) -> dict[type, dict[Any, tuple[Candidate, ...]]]:
    """Return ``event type -> state -> candidates in match order`` for ``rows``, their guards as ``guards`` has
    them; an unknown guard name is a ``KeyError``, an unguarded row before others of its pair a ``ConfigError``."""
    check_guard_names({g for r in rows for g in (*r.when, *r.unless)}, guards)
    by_pair: dict[tuple[type, Any], list[Candidate]] = {}
    for row in rows:
        made = by_pair.setdefault((row.event, row.source), [])
        if made and not made[-1][0] and not made[-1][1]:  # rows after an unguarded one could never match
            raise ConfigError(f"{row.source!r} --{row.event.__name__}-->: an unguarded row hides the rows after it")
        made.append((tuple(guards[g] for g in row.when), tuple(guards[g] for g in row.unless), row))
    index: dict[type, dict[Any, tuple[Candidate, ...]]] = {}
    for (event, state), made in by_pair.items():
        index.setdefault(event, {})[state] = tuple(made)
    return index


def first_holding(rows: tuple[Candidate, ...], subject: Any, event: Any, engine: Engine) -> Row | None:
    """Return the first candidate row whose ``when`` guards all hold and whose ``unless`` guards all fail."""
    for when, unless, row in rows:
        for guard in when:
            if not guard(subject, event, engine):
                break  # a ``when`` guard fails: the next candidate
        else:
            for guard in unless:
                if guard(subject, event, engine):
                    break  # an ``unless`` guard holds: the next candidate
            else:
                return row
    return None


class Selection:
    """A table's rows as ``event type -> state -> candidates`` (``index``), and the first that holds."""

    __slots__ = ("index",)

    def __init__(self, rows: tuple[Row, ...], guards: Mapping[str, Guard] = GUARDS) -> None:
        self.index = candidates(rows, guards)

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Return the first row whose guards hold for ``subject`` and ``event``, else ``None``."""
        by_state = self.index.get(event.__class__)
        rows = None if by_state is None else by_state.get(subject.state)
        return None if rows is None else first_holding(rows, subject, event, engine)

    def fire(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Select the row and move ``subject`` to its target; ``None`` (no change) if none."""
        row = self.select(subject, event, engine)
        if row is not None:
            subject.state = row.target
        return row


__all__ = ["Candidate", "Selection", "candidates", "first_holding"]
