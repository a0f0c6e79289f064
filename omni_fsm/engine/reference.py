"""The ``transitions`` reference executor: the same table, run by a library state machine.

Each table gets ONE shared, static ``transitions.Machine(model=None)`` (never one per request,
never ``add_model``): every row becomes one transition, added in table order, so the library's
"first transition whose conditions pass wins" is the table's first match. It is slow and
plainly correct; the tests hold the core's own selection (``engine.selection``) to it.
Imported lazily: ``import omni_fsm`` never loads ``transitions``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from transitions import Machine, MachineError

from omni_fsm.errors import ConfigError
from omni_fsm.spec.guards import GUARDS, Guard, check_guard_names
from omni_fsm.spec.record import Engine
from omni_fsm.spec.table import SPEC, Row, Spec
from omni_fsm.spec.vocabulary import EngineState, ReqState

Condition = Callable[[Any], bool]


class _Scratch:
    """Stands in for a subject during ``select``: its own ``state``, every other field read through."""

    __slots__ = ("_subject", "state")

    def __init__(self, subject: Any) -> None:
        self._subject = subject
        self.state = subject.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._subject, name)


def _condition(name: str, guard: Guard) -> Condition:
    """Return ``guard`` as a transitions condition (``send_event=True``: one EventData)."""

    def condition(event_data: Any) -> bool:
        event, engine = event_data.args
        return guard(event_data.model, event, engine)

    condition.__name__ = name
    return condition


class _StaticMachine:
    """One static ``Machine(model=None)`` for one table, and the row its last trigger fired."""

    __slots__ = ("fired", "guards", "machine")

    def __init__(self, rows: tuple[Row, ...], states: type[enum.Enum], guards: dict[str, Guard]) -> None:
        self.guards = guards
        names: dict[str, type] = {}
        for row in rows:
            if names.setdefault(row.event.__name__, row.event) is not row.event:
                raise ConfigError(f"two event classes named {row.event.__name__!r}")
        self.fired: Row | None = None
        self.machine: Any = Machine(
            model=None,
            states=states,
            initial=None,
            transitions=[self._transition(row) for row in rows],  # in table order: first match wins
            auto_transitions=False,
            send_event=True,
        )

    def _transition(self, row: Row) -> dict[str, Any]:
        return {
            "trigger": row.event.__name__,
            "source": row.source,
            "dest": row.target,
            "conditions": [_condition(g, self.guards[g]) for g in row.when],
            "unless": [_condition(g, self.guards[g]) for g in row.unless],
            "before": [functools.partial(self._note, row)],  # runs only once every condition passed
        }

    def _note(self, row: Row, event_data: Any) -> None:
        self.fired = row

    def trigger(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Trigger ``event`` on ``subject``; return the row whose transition fired, else ``None``."""
        library_event = self.machine.events.get(event.__class__.__name__)  # machine.events[name]
        if library_event is None:  # no row for this event type at all
            return None
        self.fired = None
        try:
            moved = library_event.trigger(subject, event, engine)
        except MachineError:  # no row for this event type from this state
            return None
        row, self.fired = self.fired, None
        return row if moved else None


@functools.cache
def _static_machine(rows: tuple[Row, ...], states: type[enum.Enum],
                    guards: tuple[tuple[str, Guard], ...]) -> _StaticMachine:
    """Return the one machine for ``rows`` (keyed by the guard functions too: a patched guard rebuilds)."""
    return _StaticMachine(rows, states, dict(guards))


class ReferenceTable:
    """``Selection``'s interface, answered by the table's shared static ``transitions`` machine."""

    __slots__ = ("_static", "rows")

    def __init__(self, rows: tuple[Row, ...], states: type[enum.Enum] | None = None,
                 guards: Mapping[str, Guard] = GUARDS) -> None:
        if states is None:
            if not rows:
                raise ConfigError("an empty table needs its states named")
            states = type(rows[0].source)
        names = {g for r in rows for g in (*r.when, *r.unless)}
        check_guard_names(names, guards)
        self.rows = rows
        self._static = _static_machine(rows, states, tuple((g, guards[g]) for g in sorted(names)))

    @property
    def machine(self) -> Any:
        """Return the shared static ``transitions.Machine`` behind this table."""
        return self._static.machine

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Return the first row whose guards hold for ``subject`` and ``event``, else ``None``; no change."""
        return self._static.trigger(_Scratch(subject), event, engine)

    def fire(self, subject: Any, event: Any, engine: Engine) -> Row | None:
        """Move ``subject`` through ``transitions`` and return the row fired; ``None`` (no change) if none."""
        return self._static.trigger(subject, event, engine)


@attrs.frozen
class Reference:
    """The reference executors of one ``Spec``: the request table and the control plane's."""

    request: ReferenceTable
    engine: ReferenceTable


@functools.cache
def build_reference(spec: Spec = SPEC) -> Reference:
    """Return the (cached) reference executors built from ``spec``'s two tables and the guards it carries."""
    return Reference(ReferenceTable(spec.rows, ReqState, spec.guards),
                     ReferenceTable(spec.engine_rows, EngineState, spec.guards))


__all__ = ["Reference", "ReferenceTable", "build_reference"]
