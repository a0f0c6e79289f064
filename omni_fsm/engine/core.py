"""The lifecycle core: events in, observations out; every decision read from the specification.

Sans-IO: no I/O, no threads, no asyncio. ``Lifecycle.handle`` takes one event and returns
what happened as a list of observations, which double as commands for a driver (dispatch,
forward, emit, abort at a stage, answer an RPC, stop).

This module executes a ``Spec`` and decides nothing of its own: what is dropped before the table
and what a miss does (``spec.policy``), which row fires (``spec.table`` and its guards), what the
row's effects do and whom they reach (``spec.effects``), how slots move (``spec.policy``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from omni_fsm.engine.selection import Candidate, Selection
from omni_fsm.errors import ConfigError, InternalError, LifecycleError
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec import policy
from omni_fsm.spec.effects import Effect, EngineFx, FanOut, Fx, Out, fan_out_effect, fan_out_engine_effect
from omni_fsm.spec.effects import follow_interrupted as _follow_interrupted
from omni_fsm.spec.policy import INTAKE, MISS_POLICY, MISS_REWRITE, SPAWNED, STAGE_LIVE, CallId, Miss
from omni_fsm.spec.record import Engine, Record, dependent_id, fanout
from omni_fsm.spec.table import SPEC, Row, Spec
from omni_fsm.spec.vocabulary import ReqState, Role, StageKind, pipeline_shape

_id = id  # a row's plan is found by the row's identity (a C-level hash), then by its value
#: the event types about one request (the others are the engine's), as the intake declares them
_PER_REQUEST = frozenset(kind for kind, intake in INTAKE.items() if intake.per_request)
_CLIENT = Role.CLIENT

__all__ = ["Counters", "Lifecycle", "Table", "dependent_id", "fanout"]


class Counters:
    """What the core dropped or failed instead of forwarding (the 'late events' report), and how often an
    effect reached requests outside the acting one's family (``fanned_out_across``: the explorer reads it)."""

    __slots__ = ("dropped_stale", "dropped_unknown", "failed_illegal", "fanned_out_across")

    def __init__(self) -> None:
        self.dropped_stale = 0
        self.dropped_unknown = 0
        self.failed_illegal = 0
        self.fanned_out_across = 0

    def as_dict(self) -> dict[str, int]:
        """Return the counters by name."""
        return {name: getattr(self, name) for name in self.__slots__}


class Table(Protocol):
    """What the core needs of a table it is given: the first row whose guards hold (the ``transitions`` reference)."""

    def select(self, subject: Any, event: Any, engine: Engine) -> Row | None: ...


#: A row's plan, resolved when the core is made: the row, its target, its effect functions, whether it ends the
#: request, whether it frees / takes a slot (``None``: an abort is involved, decided when it fires).
_Plan = tuple[Row, ReqState, tuple[Fx, ...], bool, bool | None, bool | None]
#: A candidate row of one (event type, state) and its plan: ``when`` guards, ``unless`` guards, plan.
_Step = tuple[tuple[Any, ...], tuple[Any, ...], _Plan]


class Lifecycle:
    """The request lifecycle of one engine: a registry of small records and the table.

    ``kinds`` and ``final`` describe the pipeline (one entry per stage; the last stage must be
    a final-output stage); ``capacity`` is the number of running slots per stage.
    Internal request ids are the caller's: a request submitted as ``rid`` with ``n>1`` children
    or ``companions`` owns the ids ``rid+1 .. rid+n`` (or ``+companions``) for them.

    Everything ``handle`` runs is read from ``spec`` when the core is made, into plain dicts: the candidate rows
    of each (event type, state) with the guard functions they name, and each row's plan (its effect functions
    and slot moves). Give it another ``Spec`` (``attrs.evolve(SPEC, ...)``) and it runs that one.
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
        self.records: dict[int, Record] = {}
        #: dependent id -> the request that owns it, from a held parent's admission until the dependent is spawned
        #: (then it is a tracked record) or the parent released: derivable from the records (``restore`` does)
        self.reserved: dict[int, int] = {}
        self.counters = Counters()
        self._queue: deque[ev.RequestEvent] = deque()
        self._on_terminal = self._effect_functions(spec.on_terminal, "on_terminal")
        own = Selection(spec.rows, spec.guards)
        #: row -> its plan, by identity (a table put in may hold equal copies of the rows: ``_plan_of``)
        self._plans: dict[int, _Plan] = {_id(r): self._plan(r) for r in spec.rows}
        self._copies: dict[Row, _Plan] = {}
        #: event type -> state -> the candidate rows with their plans, in match order: what ``handle`` runs
        self._steps: dict[type, dict[Any, tuple[_Step, ...]]] = {
            kind: {state: tuple(self._step(c) for c in rows) for state, rows in own.index.get(kind, {}).items()}
            for kind in _PER_REQUEST}  # fmt: skip
        self._own_table = own
        self.table = own
        self.engine_table: Table = Selection(spec.engine_rows, spec.guards)
        self._engine_effects = {_id(r): self._engine_effect_functions(r) for r in spec.engine_rows}

    @property
    def table(self) -> Table:
        """The request table the core selects rows from (the spec's own unless another is put in)."""
        return self._table

    @table.setter
    def table(self, table: Table) -> None:
        self._table = table
        #: a table put in instead of the spec's own, asked for every row (``None``: the spec's candidates are run)
        self._asked: Table | None = None if table is self._own_table else table

    # -- queries -------------------------------------------------------------------------

    def state_of(self, rid: int) -> ReqState | None:
        """Return the state of ``rid``, or ``None`` if it is not tracked (never, or ended)."""
        rec = self.records.get(rid)
        return rec.state if rec is not None else None

    def holds_slot(self, rec: Record) -> bool:
        """Return whether ``rec`` occupies a slot of its current stage."""
        return policy.holds_slot(rec.state, rec.resume, self.spec.holds_slot)

    # -- the effects' context ----------------------------------------------------------------

    def enqueue(self, event: ev.RequestEvent) -> None:
        """Queue an internal event (an effect's fan-out), handled after the current one, in order."""
        self._queue.append(event)

    def release(self, rid: int) -> None:
        """Drop ``rid``'s record and free the dependent ids it owned."""
        rec = self.records.pop(rid)
        if self.reserved:
            for k in range(rec.fanout):
                self.reserved.pop(dependent_id(rid, k), None)

    def crossed(self) -> None:
        """Count one effect that reached requests outside the acting request's family."""
        self.counters.fanned_out_across += 1

    def drain(self, out: Out) -> None:
        """Handle every queued internal event now, appending their observations to ``out``."""
        queue = self._queue
        while queue:
            event = queue.popleft()
            try:
                self._request(event, out, top=False)
            except LifecycleError as exc:  # the core's own fan-out was refused: a table bug, not a client's
                queue.clear()
                raise InternalError(f"fan-out {event!r} refused: {exc}") from None

    # -- the one entry point ---------------------------------------------------------------

    def handle(self, event: ev.Event) -> Out:
        """Apply ``event`` (and the internal events it fans out to); return the observations.

        Raises ``LifecycleError`` (and changes nothing) when the embedding program's call is not
        allowed in the current state, ``TypeError`` when ``event`` is no event.
        """
        out: Out = []
        intake = INTAKE.get(type(event))
        if intake is None:
            raise TypeError(f"Lifecycle.handle takes an event of omni_fsm.events, got {event!r}")
        if not intake.stage_scoped:
            if intake.per_request:
                self._request(event, out, True)  # type: ignore[arg-type]
            else:
                self._engine(event, intake, out)
        else:  # a runtime's report about a request at a stage, the commonest event: ``_request``'s path, inline
            report: ev.StageEvent = event  # type: ignore[assignment]
            rec = self.records.get(report.rid)
            if rec is None or report.stage != rec.stage or rec.state not in STAGE_LIVE:
                self._request(report, out, True)  # unknown or stale: ``_request`` says which
            elif self._fire_row(rec, report, out) is None:
                self._miss(rec, report, out)
        if self._queue:
            self.drain(out)
        return out

    # -- requests --------------------------------------------------------------------------

    def _request(self, event: ev.RequestEvent, out: Out, top: bool) -> None:
        intake = INTAKE[type(event)]
        rec = self.records.get(event.rid)
        if intake.admits:
            if rec is None:
                self._admit(event, out)  # type: ignore[arg-type]
                return
            if rec.state is not SPAWNED or top:  # a spawned dependent is submitted by its parent only
                raise LifecycleError(rec.rid, rec.state, event, "id already tracked")
            if self.reserved:  # spawned now: the dependent is a tracked record, its id no longer merely reserved
                self.reserved.pop(rec.rid, None)
        elif rec is None:
            if top:  # fan-out to a dependent that already ended is silent
                self.counters.dropped_unknown += 1
                out.append(ob.Dropped(event.rid, type(event).__name__, "unknown"))
            return
        elif intake.stage_scoped and (event.stage != rec.stage or rec.state not in STAGE_LIVE):  # type: ignore[attr-defined]
            self.counters.dropped_stale += 1
            out.append(ob.Dropped(event.rid, type(event).__name__, "stale"))
            return
        self._fire(rec, event, out)

    def _admit(self, event: ev.Submit, out: Out) -> None:
        """Make the record of a client's new request and fire its submit (refused: the record goes again)."""
        problem = policy.admission_problem(event, self.reserved.get(event.rid))
        if problem is not None:
            raise LifecycleError(event.rid, SPAWNED, event, problem)
        owned = fanout(event.n, event.companions)
        for k in range(owned):
            if (dep := dependent_id(event.rid, k)) in self.records:
                raise LifecycleError(dep, self.records[dep].state, event, "dependent id already tracked")
        rec = Record(event.rid, last_stage=len(self.engine.kinds) - 1, fanout=owned,
                     children_left=event.n if event.n > 1 else 0, companions_left=event.companions)
        self.records[event.rid] = rec
        out.append(ob.Submitted(rec.rid, _CLIENT, -1, event.n, event.companions))
        try:
            self._fire(rec, event, out)
        except LifecycleError:
            del self.records[rec.rid]
            raise
        if owned and event.rid in self.records:  # dependents not spawned yet (held): their ids stay the parent's
            for k in range(owned):
                if (dep := dependent_id(event.rid, k)) not in self.records:
                    self.reserved[dep] = event.rid

    def _fire(self, rec: Record, event: ev.RequestEvent, out: Out) -> Row:
        """Fire the row the table selects for ``event`` (none: what the event's origin says); return it."""
        row = self._fire_row(rec, event, out)
        return self._miss(rec, event, out) if row is None else row

    def _fire_row(self, rec: Record, event: Any, out: Out) -> Row | None:
        """Run the first candidate row of (event type, state) whose guards hold (every ``when`` guard holds, no
        ``unless`` guard does), in table order: its target, its effects, its slot moves, the terminal effects.
        Return the row (``None``: no row, nothing changed)."""
        asked = self._asked
        steps = self._steps[type(event)].get(rec.state) if asked is None else self._asked_steps(asked, rec, event)
        if steps is None:
            return None
        engine = self.engine
        for when, unless, plan in steps:  # noqa: B007 - the candidate the loop stops at is run below
            for guard in when:
                if not guard(rec, event, engine):
                    break  # a ``when`` guard fails: the next candidate
            else:
                for guard in unless:
                    if guard(rec, event, engine):
                        break  # an ``unless`` guard holds: the next candidate
                else:
                    break  # every guard as the row wants it: this candidate
        else:
            return None  # no candidate holds: no row
        row, target, effects, terminal, free, take = plan
        source, held_stage = rec.state, rec.stage
        if free is None:  # an abort is involved: slots follow the state it interrupted (or restores)
            held = policy.holds_slot(source, rec.resume, self.spec.holds_slot)
        rec.state = target
        for effect in effects:
            effect(self, rec, event, source, out)
        if free is None:
            holds = policy.holds_slot(target, rec.resume, self.spec.holds_slot)
            free, take = policy.slot_moves(held, holds, rec.stage != held_stage)
        if free:
            engine.slots_used[held_stage] -= 1
            out.append(ob.SlotFreed(rec.rid, held_stage))
        if take:
            engine.slots_used[rec.stage] += 1
            out.append(ob.SlotTaken(rec.rid, rec.stage))
        if terminal:
            for effect in self._on_terminal:
                effect(self, rec, event, source, out)
        return row

    def _asked_steps(self, table: Table, rec: Record, event: Any) -> tuple[_Step, ...] | None:
        """Return the row a table put in selects as the one candidate, unguarded (``None``: it selects none)."""
        row = table.select(rec, event, self.engine)
        return None if row is None else (((), (), self._plan_of(row)),)

    def _miss(self, rec: Record, event: ev.RequestEvent, out: Out) -> Row:
        """No row: what the event's origin says (refuse, fail the request, or a bug of the core)."""
        miss = MISS_POLICY[event.ORIGIN]
        if miss is Miss.REFUSE:
            raise LifecycleError(rec.rid, rec.state, event)
        if miss is Miss.BUG:
            raise InternalError(f"no row for internal {event!r} in {rec.state!r}")
        if type(event) is MISS_REWRITE:  # the rewrite itself has no row: a table bug
            raise InternalError(f"no row for {event!r} in {rec.state!r}")
        self.counters.failed_illegal += 1
        out.append(ob.Rejected(rec.rid, type(event).__name__))
        return self._fire(rec, MISS_REWRITE(rec.rid, rec.stage), out)

    # -- the engine's control plane -----------------------------------------------------------

    def _engine(self, event: ev.Event, intake: policy.Intake, out: Out) -> None:
        eng = self.engine
        rule = intake.call_id
        if rule is CallId.IN_FLIGHT and event.call_id not in eng.pending_rpcs:  # type: ignore[attr-defined]
            self.counters.dropped_unknown += 1
            out.append(ob.Dropped(-1, type(event).__name__, "unknown"))
            return
        if rule is CallId.NEW and event.call_id in eng.pending_rpcs:  # type: ignore[attr-defined]
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
        effects = self._engine_effects.get(_id(row))
        for effect in self._engine_effect_functions(row) if effects is None else effects:
            effect(self, event, out)

    # -- explorer support: the whole core as a hashable value --------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """Return the core's state (engine and every record) as a hashable tuple."""
        recs = tuple((rid, r.snapshot()) for rid, r in sorted(self.records.items()))
        return (self.engine.snapshot(), recs)

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Set the core's state from :meth:`snapshot`'s tuple."""
        eng_snap, recs = snap
        self.engine.load(eng_snap)
        self.records, self.reserved = {}, {}
        for rid, rsnap in recs:
            rec = Record(rid)
            rec.load(rsnap)
            self.records[rid] = rec
        for rid, rec in self.records.items():  # a parent that has not spawned: every dependent still owed, none here
            deps = [dependent_id(rid, k) for k in range(rec.fanout)]
            if deps and rec.children_left + rec.companions_left == rec.fanout and not any(
                    d in self.records for d in deps):
                self.reserved.update(dict.fromkeys(deps, rid))

    # -- building: each row's effects and slot moves, resolved once --------------------------

    def _step(self, candidate: Candidate) -> _Step:
        """Return a candidate row with its plan in place of the row."""
        when, unless, row = candidate
        return when, unless, self._plans[_id(row)]

    def _plan_of(self, row: Row) -> _Plan:
        """Return the plan of a row a table put in selected (the spec's row, or an equal copy of one)."""
        plan = self._plans.get(_id(row))
        if plan is None:
            plan = self._copies.get(row)
            if plan is None:
                plan = self._copies[row] = self._plan(row)
        return plan

    def _plan(self, row: Row) -> _Plan:
        """Return a row's plan: the row, its target, its effect functions, whether it ends the request, and
        whether it frees / takes a slot."""
        effects = self._effect_functions(row.effects, row, row.resume_to)
        plan = policy.slot_plan(row.source, row.target, row.effects, self.spec.holds_slot)  # type: ignore[arg-type]
        return row, row.target, effects, plan.terminal, plan.free, plan.take  # type: ignore[return-value]

    def _effect_functions(self, effects: tuple[Effect, ...], where: object, resume_to: Any = None) -> tuple[Fx, ...]:
        """Return the functions of request-level ``effects`` as the spec has them; an engine effect on a request row
        is a table bug, and so is ``FOLLOW_INTERRUPTED`` without a ``resume_to`` still bound to the stage."""
        spec = self.spec
        unknown = [e for e in effects
                   if e not in spec.effects and e not in spec.fan_out and e is not Effect.FOLLOW_INTERRUPTED]
        if unknown:
            raise ConfigError(f"{where!r}: {', '.join(e.name for e in unknown)} has no meaning for a request")
        problem = policy.row_problem(effects, resume_to)
        if problem is not None:
            raise ConfigError(f"{where!r}: {problem}")
        return tuple(_request_effect(e, spec.effects, spec.fan_out, resume_to) for e in effects)

    def _engine_effect_functions(self, row: Row) -> tuple[EngineFx, ...]:
        """Return the functions of an engine row's effects as the spec has them (fan-outs as it declares them)."""
        fan_out, functions = self.spec.fan_out, self.spec.engine_effects
        return tuple(fan_out_engine_effect(fan_out[e]) if e in fan_out else functions[e] for e in row.effects)


def _request_effect(effect: Effect, functions: Mapping[Effect, Fx], fan_out: Mapping[Effect, FanOut],
                    resume_to: Any) -> Fx:
    """Return what ``effect`` does on a request row."""
    if effect is Effect.FOLLOW_INTERRUPTED:
        return _follow_interrupted(resume_to)
    spread = fan_out.get(effect)
    return functions[effect] if spread is None else fan_out_effect(spread)
