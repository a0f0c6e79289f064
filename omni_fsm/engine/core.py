"""The lifecycle core: events in, observations out; every decision read from the table.

Sans-IO: no I/O, no threads, no asyncio. ``Lifecycle.handle`` takes one event and returns
what happened as a list of observations, which double as commands for a driver (dispatch,
forward, emit, abort at a stage, answer an RPC, stop).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Protocol

from omni_fsm.engine.compiled import CompiledTable
from omni_fsm.engine.effects import EFFECTS as _EFFECTS
from omni_fsm.engine.effects import ENGINE_EFFECTS as _ENGINE_EFFECTS
from omni_fsm.engine.effects import Fx, Out, follow_interrupted
from omni_fsm.errors import ConfigError, InternalError, LifecycleError
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.record import Engine, Record
from omni_fsm.spec.table import MISS_POLICY, SPEC, STAGE_LIVE, Effect, Miss, Row, Spec
from omni_fsm.spec.vocabulary import (
    BOUND,
    TERMINAL,
    ReqState,
    Role,
    StageKind,
    pipeline_shape,
)

_id = id  # rows hash by value (attrs); the per-row plans are keyed by identity, a C-level hash


def fanout(n: int, companions: int) -> int:
    """Return how many dependent ids a request with ``n`` samples or ``companions`` owns after its own.

    A request submitted as ``rid`` owns ``rid+1 .. rid+fanout(n, companions)``: its ``n>1`` samples
    (the children; ``n == 1`` has none) or its CFG companions (a request has one kind or neither).
    """
    return n if n > 1 else companions


def dependent_id(rid: int, index: int) -> int:
    """Return the id of dependent ``index`` (0-based: a sample's index, or a companion's) of ``rid``."""
    return rid + 1 + index


class Counters:
    """What the core dropped or failed instead of forwarding (the 'late events' report)."""

    __slots__ = ("dropped_stale", "dropped_unknown", "failed_illegal")

    def __init__(self) -> None:
        self.dropped_stale = 0
        self.dropped_unknown = 0
        self.failed_illegal = 0

    def as_dict(self) -> dict[str, int]:
        """Return the counters by name."""
        return {name: getattr(self, name) for name in self.__slots__}


class Lifecycle:
    """The request lifecycle of one engine: a registry of small records and the table.

    ``kinds`` and ``final`` describe the pipeline (one entry per stage; the last stage must be
    a final-output stage); ``capacity`` is the number of running slots per stage.
    Internal request ids are the caller's: a request submitted as ``rid`` with ``n>1`` children
    or ``companions`` owns the ids ``rid+1 .. rid+n`` (or ``+companions``) for them.
    """

    def __init__(self, kinds: Iterable[StageKind], final: Iterable[bool], capacity: int = 1 << 30,
                 spec: Spec = SPEC) -> None:
        kinds_t, final_t = pipeline_shape(kinds, final)  # "ar" is StageKind.AR; anything else is refused
        if not final_t[-1]:
            raise ConfigError("the last stage must be a final-output stage")
        if capacity < 1:
            raise ConfigError("capacity must be at least 1")
        self.spec = spec
        self.engine = Engine(kinds=kinds_t, final=final_t, capacity=capacity)
        self.table = _compiled(spec.rows)  # sets ``_index`` too (see the property)
        self.engine_table: Table = _compiled(spec.engine_rows)
        self.records: dict[int, Record] = {}
        self.counters = Counters()
        # per row (by identity): its effect functions, whether it enters a terminal state, and
        # whether it frees / takes a slot (``None``: an abort decides, at run time). The compiled
        # table is shared by equal tables, so its rows may be equal copies of the spec's: both count.
        shared = (r for rows in self.table.lookup.values() for _, _, r in rows)
        self._plans = {_id(r): _plan(r, spec.holds_slot) for r in (*spec.rows, *shared)}
        self._on_terminal = _effect_functions(spec.on_terminal, "on_terminal")
        self._queue: deque[ev.Event] = deque()

    @property
    def table(self) -> Table:
        """The request table the core selects rows from (the compiled one unless replaced)."""
        return self._table

    @table.setter
    def table(self, table: Table) -> None:
        self._table = table
        # ``_fire`` looks selectors up inline: ``event type -> state -> select(r, e, g)``
        self._index: Any = table.index if isinstance(table, CompiledTable) else {
            kind: dict.fromkeys(ReqState, table.select) for kind in ev.REQUEST_EVENTS}  # every case asks ``select``

    # -- queries -------------------------------------------------------------------------

    def state_of(self, rid: int) -> ReqState | None:
        """Return the state of ``rid``, or ``None`` if it is not tracked (never, or ended)."""
        rec = self.records.get(rid)
        return rec.state if rec is not None else None

    def holds_slot(self, rec: Record) -> bool:
        """Return whether ``rec`` occupies a slot of its current stage."""
        return self._holds(rec.state, rec.resume)

    def _holds(self, state: ReqState, resume: ReqState | None) -> bool:
        """Return whether a record in ``state`` holds a slot (while aborting: as the state it interrupted)."""
        return (resume if state is ReqState.ABORTING else state) in self.spec.holds_slot

    # -- the one entry point ---------------------------------------------------------------

    def handle(self, event: ev.Event) -> Out:
        """Apply ``event`` (and the internal events it fans out to); return the observations.

        Raises ``LifecycleError`` (and changes nothing) when the embedding program's call is not
        allowed in the current state, ``TypeError`` when ``event`` is no event.
        """
        out: Out = []
        if isinstance(event, ev.RequestEvent):
            self._request(event, out, True)
        elif isinstance(event, ev.Event):
            self._engine(event, out)
        else:
            raise TypeError(f"Lifecycle.handle takes an event of omni_fsm.events, got {event!r}")
        if self._queue:
            self._drain(out)
        return out

    def _drain(self, out: Out) -> None:
        queue = self._queue
        while queue:
            event = queue.popleft()
            if not isinstance(event, ev.RequestEvent):  # pragma: no cover - only request events are queued
                raise InternalError(f"queued engine event {event!r}")
            try:
                self._request(event, out, top=False)
            except LifecycleError as exc:  # the core's own fan-out was refused: a table bug, not a client's
                queue.clear()
                raise InternalError(f"fan-out {event!r} refused: {exc}") from None

    # -- requests --------------------------------------------------------------------------

    def _request(self, event: ev.RequestEvent, out: Out, top: bool) -> None:
        rec = self.records.get(event.rid)
        if event.__class__ is ev.Submit:
            if rec is None:
                rec = self._admit_client(event)
                out.append(ob.Submitted(rec.rid, Role.CLIENT, -1, event.n, event.companions))
                try:
                    self._fire(rec, event, out)
                except LifecycleError:  # refused: nothing changes, the record goes again
                    del self.records[rec.rid]
                    raise
                return
            if rec.state is not ReqState.NEW or top:  # a spawned dependent is submitted by its parent only
                raise LifecycleError(rec.rid, rec.state, event, "id already tracked")
        elif rec is None:
            if top:  # fan-out to a dependent that already ended is silent
                self.counters.dropped_unknown += 1
                out.append(ob.Dropped(event.rid, type(event).__name__, "unknown"))
            return
        elif isinstance(event, ev.StageEvent) and (event.stage != rec.stage or rec.state not in STAGE_LIVE):
            self.counters.dropped_stale += 1
            out.append(ob.Dropped(event.rid, type(event).__name__, "stale"))
            return
        self._fire(rec, event, out)

    def _admit_client(self, event: ev.Submit) -> Record:
        if event.rid < 0:
            raise LifecycleError(event.rid, ReqState.NEW, event, "request ids are non-negative")
        if event.n < 1 or event.companions < 0 or (event.n > 1 and event.companions > 0):
            raise LifecycleError(event.rid, ReqState.NEW, event, "need n >= 1, companions >= 0, not both")
        owned = fanout(event.n, event.companions)
        for k in range(owned):
            if (dep := dependent_id(event.rid, k)) in self.records:
                raise LifecycleError(dep, self.records[dep].state, event, "dependent id already tracked")
        rec = Record(event.rid, last_stage=len(self.engine.kinds) - 1, fanout=owned,
                     children_left=event.n if event.n > 1 else 0, companions_left=event.companions)
        self.records[event.rid] = rec
        return rec

    def _fire(self, rec: Record, event: ev.RequestEvent, out: Out) -> Row:
        by_state = self._index.get(event.__class__)  # ``self.table.select``, inline: the hottest call there is
        select = None if by_state is None else by_state.get(rec.state)
        row: Row | None = None if select is None else select(rec, event, self.engine)
        if row is None:
            miss = MISS_POLICY[event.ORIGIN]
            if miss is Miss.REFUSE:
                raise LifecycleError(rec.rid, rec.state, event)
            if miss is Miss.BUG:
                raise InternalError(f"no row for internal {event!r} in {rec.state!r}")
            if event.__class__ is ev.StageFailed:  # the fallback itself has no row: a table bug
                raise InternalError(f"no row for {event!r} in {rec.state!r}")
            self.counters.failed_illegal += 1
            out.append(ob.Rejected(rec.rid, type(event).__name__))
            return self._fire(rec, ev.StageFailed(rec.rid, rec.stage), out)
        effects, terminal, free, take = self._plans[_id(row)]
        source, held_stage = rec.state, rec.stage
        held = free is None and self._holds(source, rec.resume)  # an abort is involved: decided at run time
        rec.state = row.target  # type: ignore[assignment]
        for effect in effects:
            effect(self, rec, event, source, out)
        if free is None:  # slots follow the state the abort interrupted (or restores)
            holds = self._holds(rec.state, rec.resume)
            moved = rec.stage != held_stage
            free, take = _slot_moves(held, holds, moved)
        if free:
            self.engine.slots_used[held_stage] -= 1
            out.append(ob.SlotFreed(rec.rid, held_stage))
        if take:
            self.engine.slots_used[rec.stage] += 1
            out.append(ob.SlotTaken(rec.rid, rec.stage))
        if terminal:
            for effect in self._on_terminal:
                effect(self, rec, event, source, out)
        return row

    def _spawn(self, parent: Record, role: Role, count: int, out: Out) -> None:
        last = 0 if role is Role.COMPANION else parent.last_stage
        for k in range(count):
            rid = dependent_id(parent.rid, k)
            self.records[rid] = Record(rid, role=role, parent=parent.rid, last_stage=last, sample=k)
            out.append(ob.Submitted(rid, role, parent.rid))
            self._queue.append(ev.Submit(rid))

    def _dependents(self, rec: Record) -> list[int]:
        return [d for d in (dependent_id(rec.rid, k) for k in range(rec.fanout)) if d in self.records]

    def _client_of(self, rec: Record) -> tuple[int, int]:
        return (rec.parent, rec.sample) if rec.role is Role.CHILD else (rec.rid, -1)

    # -- the engine's control plane -----------------------------------------------------------

    def _engine(self, event: ev.Event, out: Out) -> None:
        eng = self.engine
        if isinstance(event, (ev.RpcDone, ev.RpcFailed)) and event.call_id not in eng.pending_rpcs:
            self.counters.dropped_unknown += 1
            out.append(ob.Dropped(-1, type(event).__name__, "unknown"))
            return
        if isinstance(event, ev.Control) and event.call_id in eng.pending_rpcs:
            raise LifecycleError(None, eng.state, event, "call id already in flight")
        row = self.engine_table.select(eng, event, eng)
        if row is None:
            miss = MISS_POLICY[event.ORIGIN]
            if miss is Miss.REFUSE:
                raise LifecycleError(None, eng.state, event)
            if miss is Miss.BUG:  # pragma: no cover - no internal engine event exists
                raise InternalError(f"no engine row for internal {event!r} in {eng.state!r}")
            self.counters.dropped_stale += 1
            out.append(ob.Dropped(-1, type(event).__name__, "stale"))
            return
        source = eng.state
        eng.state = row.target  # type: ignore[assignment]
        if eng.state is not source:
            out.append(ob.EngineChanged(eng.state))
        for effect in row.effects:
            _ENGINE_EFFECTS[effect](self, event, out)

    # -- explorer support: the whole core as a hashable value --------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """Return the core's state (engine and every record) as a hashable tuple."""
        recs = tuple((rid, r.snapshot()) for rid, r in sorted(self.records.items()))
        return (self.engine.snapshot(), recs)

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Set the core's state from :meth:`snapshot`'s tuple."""
        eng_snap, recs = snap
        self.engine.load(eng_snap)
        self.records = {}
        for rid, rsnap in recs:
            rec = Record(rid)
            rec.load(rsnap)
            self.records[rid] = rec


class Table(Protocol):
    """What the core needs of a table: the first row whose guards hold (the compiled table, the reference)."""

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None: ...


@lru_cache(maxsize=32)
def _compiled(rows: tuple[Row, ...]) -> CompiledTable:
    """Return the compiled table of ``rows`` (made once per table: generating selectors takes milliseconds)."""
    return CompiledTable(rows)


def _plan(row: Row, holds_slot: frozenset[ReqState]) -> tuple[tuple[Fx, ...], bool, bool | None, bool | None]:
    """Return a row's effect functions, whether it ends the request, and whether it frees / takes a slot.

    A row that leaves or enters ``ABORTING`` frees and takes as the state the abort interrupted:
    ``None``, decided when it fires. Only ``FORWARD`` moves a request to another stage, so
    whether a row moves it is known here.
    """
    effects = _effect_functions(row.effects, row, row.resume_to)
    if ReqState.ABORTING in (row.source, row.target):
        return effects, row.target in TERMINAL, None, None
    held, holds, moved = row.source in holds_slot, row.target in holds_slot, Effect.FORWARD in row.effects
    return (effects, row.target in TERMINAL, *_slot_moves(held, holds, moved))


def _slot_moves(held: bool, holds: bool, moved: bool) -> tuple[bool, bool]:
    """Return whether a move frees the slot it held and takes one (a move to another stage does both)."""
    return held and (moved or not holds), holds and (moved or not held)


def _effect_functions(effects: tuple[Effect, ...], where: object, resume_to: Any = None) -> tuple[Fx, ...]:
    """Return the functions of request-level ``effects``; an engine effect on a request row is a table bug,
    and so is ``FOLLOW_INTERRUPTED`` without a ``resume_to`` still bound to the stage."""
    unknown = [e for e in effects if e not in _EFFECTS and e is not Effect.FOLLOW_INTERRUPTED]
    if unknown:
        raise ConfigError(f"{where!r}: {', '.join(e.name for e in unknown)} has no meaning for a request")
    if Effect.FOLLOW_INTERRUPTED in effects and resume_to not in BOUND:
        raise ConfigError(f"{where!r}: FOLLOW_INTERRUPTED must say a bound state to move to, not {resume_to!r}")
    return tuple(follow_interrupted(resume_to) if e is Effect.FOLLOW_INTERRUPTED else _EFFECTS[e] for e in effects)
