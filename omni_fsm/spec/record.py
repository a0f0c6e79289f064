"""The small per-request record and the engine record the guards read, and how dependents' ids are laid out."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import attrs

from omni_fsm.spec.vocabulary import ControlMethod, EngineState, ReqState, Role, StageKind


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Record:
    """What the lifecycle keeps about one tracked request, and nothing more."""

    rid: int
    state: ReqState = ReqState.NEW
    role: Role = Role.CLIENT
    parent: int = -1  #: the parent's rid for a child or a companion
    stage: int = 0  #: the current stage
    last_stage: int = 0  #: the stage whose finish ends the request (0 for companions)
    fanout: int = 0  #: dependents (children or companions) at rids ``rid+1 .. rid+fanout``
    children_left: int = 0  #: ``n>1`` parent: children not yet terminal
    companions_left: int = 0  #: CFG parent: companions not yet done
    tokens: int = 0  #: generated at the current stage (the abort prefix)
    resume: ReqState | None = None  #: the state an abort interrupted (restored if it fails)
    worst: ReqState | None = None  #: most severe child outcome (``n>1``); FINISHED_ERROR: a companion lost
    sample: int = 0  #: a child's sample index
    #: the abort calls owed an answer: the client's call ids, and ``None`` for the parent's abort of a dependent
    abort_calls: frozenset[int | None] = frozenset()

    def snapshot(self) -> tuple[object, ...]:
        """Return the record's fields as a hashable tuple, in ``RECORD_FIELDS`` order (the explorer's state)."""
        return _record_fields(self)

    def load(self, snap: tuple[Any, ...]) -> None:
        """Restore the fields from :meth:`snapshot`'s tuple."""
        for name, value in zip(RECORD_FIELDS, snap, strict=True):
            setattr(self, name, value)


@attrs.define(slots=True, eq=False)
class Engine:
    """The engine-wide part of the lifecycle: control plane, pipeline shape and slots."""

    kinds: tuple[StageKind, ...]
    final: tuple[bool, ...]  #: per stage: does it emit outputs to the client?
    capacity: int = 1 << 30  #: running slots per stage (parked requests occupy them too)
    state: EngineState = EngineState.RUNNING
    slots_used: list[int] = attrs.field(factory=list)
    sleep_level: int = 0
    sleep_tags: frozenset[str] = frozenset()
    pending_rpcs: dict[int, tuple[ControlMethod, int, frozenset[str]]] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not self.slots_used:
            self.slots_used = [0] * len(self.kinds)

    def snapshot(self) -> tuple[object, ...]:
        """Return the mutable fields as a hashable tuple, in ``ENGINE_FIELDS`` order (lists and dicts as tuples)."""
        return tuple(_frozen(getattr(self, name)) for name in ENGINE_FIELDS)

    def load(self, snap: tuple[Any, ...]) -> None:
        """Restore the mutable fields from :meth:`snapshot`'s tuple."""
        for name, value in zip(ENGINE_FIELDS, snap, strict=True):
            kind = type(getattr(self, name))
            setattr(self, name, kind(value) if kind in (list, dict) else value)


def _frozen(value: Any) -> Any:
    """Return ``value`` hashable: a list as a tuple, a dict as its items sorted by key."""
    if type(value) is list:
        return tuple(value)
    if type(value) is dict:
        return tuple(sorted(value.items(), key=lambda kv: kv[0]))
    return value


#: The order of ``Record.snapshot()``'s fields (the explorer reads snapshots by these names): all but ``rid``.
RECORD_FIELDS = tuple(f.name for f in attrs.fields(Record) if f.name != "rid")
_record_fields = attrgetter(*RECORD_FIELDS)
#: The order of ``Engine.snapshot()``'s fields: the mutable ones (the pipeline's shape never changes).
ENGINE_FIELDS = tuple(f.name for f in attrs.fields(Engine) if f.name not in ("kinds", "final", "capacity"))


def fanout(n: int, companions: int) -> int:
    """Return how many dependent ids a request with ``n`` samples or ``companions`` owns after its own.

    A request submitted as ``rid`` owns ``rid+1 .. rid+fanout(n, companions)``: its ``n>1`` samples
    (the children; ``n == 1`` has none) or its CFG companions (a request has one kind or neither).
    """
    return n if n > 1 else companions


def dependent_id(rid: int, index: int) -> int:
    """Return the id of dependent ``index`` (0-based: a sample's index, or a companion's) of ``rid``."""
    return rid + 1 + index
