"""The core's own row selection and the ``transitions`` reference machine agree, row for row.

Both are built from ``SPEC``: the ``Selection`` (what the core runs) and one static
``transitions.Machine(model=None)`` per table (``omni_fsm.engine.reference``). Every (state, event type)
pair is tried, with guard valuations drawn by Hypothesis and with a fixed canonical set; then
random event sequences, and whole ``Lifecycle`` runs with the reference tables swapped in.
How deterministic a run is comes from the loaded Hypothesis profile (``ci``: derandomized).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_fsm import SPEC, TERMINAL, Engine, Record, errors
from omni_fsm import events as ev
from omni_fsm.engine.core import Lifecycle
from omni_fsm.engine.reference import build_reference
from omni_fsm.engine.selection import Selection
from omni_fsm.spec.vocabulary import BOUND, ControlMethod, EngineState, ReqState, Role, StageKind, StopKind

SELECTION = Selection(SPEC.rows)
SELECTION_ENGINE = Selection(SPEC.engine_rows)
REFERENCE = build_reference(SPEC)
BY_NAME: Callable[[Any], str] = lambda member: member.name
TERMINALS = sorted(TERMINAL, key=BY_NAME)
LIVE_STATES = [s for s in ReqState if s not in TERMINAL]
TAGS = ("weights", "kv_cache", "*")
PAIR_SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEQUENCE_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pairs(rows: tuple[Any, ...], states: Any, event_types: tuple[type[ev.Event], ...], rowed: bool) -> list[Any]:
    """Return the (state, event type) pairs that have rows (``rowed``) or have none."""
    with_rows = {(r.source, r.event) for r in rows}
    return [p for p in itertools.product(states, event_types) if (p in with_rows) == rowed]


def pair_id(value: Any) -> str:
    return value.name if isinstance(value, ReqState | EngineState) else value.__name__


# -- strategies: every input a guard reads (built once: building strategies is the slow part) -----

CALL_IDS = st.integers(0, 3)
TAG_SETS = st.frozensets(st.sampled_from(TAGS), max_size=2)
STAGE_SHAPES = st.lists(st.tuples(st.sampled_from(StageKind), st.booleans(), st.integers(0, 3)), min_size=1,
                        max_size=3)  # fmt: skip
RPCS = st.dictionaries(CALL_IDS, st.tuples(st.sampled_from(ControlMethod), st.integers(0, 2), TAG_SETS), max_size=3)
EVENT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "n": st.integers(1, 3),
    "companions": st.integers(0, 2),
    "tokens": st.integers(1, 3),
    "stop": st.sampled_from(StopKind),
    "outcome": st.sampled_from(TERMINALS),
    "ok": st.booleans(),
    "method": st.sampled_from(ControlMethod),
    "level": st.integers(0, 2),
    "tags": TAG_SETS,
    "error": st.just("worker error"),
    "replica": st.integers(0, 1),
    "parent": st.none(),  # an ``Abort``: the client's call (a parent's own is its fan-out, internal)
    "request_id": st.none() | st.sampled_from(("a", "b")),
    "stage": st.integers(0, 2),
}
RECORD_FIELDS = st.fixed_dictionaries({
    "role": st.sampled_from(Role), "stage": st.integers(0, 2), "last_stage": st.integers(0, 2),
    "children_left": st.integers(0, 3), "companions_left": st.integers(0, 3), "tokens": st.integers(0, 4),
    "resume": st.none() | st.sampled_from(ReqState), "worst": st.none() | st.sampled_from(TERMINALS),
})  # fmt: skip


@st.composite
def engines(draw: st.DrawFn, state: EngineState | None = None, rpcs: bool = True) -> Engine:
    """An engine: pipeline shape, slots (up to over-full), control-plane state, in-flight RPCs.

    No request guard reads the RPCs or sleep tags: ``rpcs=False`` leaves them empty (cheaper).
    """
    shape = draw(STAGE_SHAPES)
    capacity = draw(st.integers(1, 2))
    return Engine(
        kinds=tuple(kind for kind, _, _ in shape),
        final=tuple(final for _, final, _ in shape),
        capacity=capacity,
        state=draw(st.sampled_from(EngineState)) if state is None else state,
        slots_used=[min(used, capacity + 1) for _, _, used in shape],
        sleep_tags=draw(TAG_SETS) if rpcs else frozenset(),
        pending_rpcs=draw(RPCS) if rpcs else {},
    )


@st.composite
def records(draw: st.DrawFn, engine: Engine, state: ReqState) -> Record:
    """A record in ``state`` whose stages fit ``engine``'s pipeline."""
    fields = draw(RECORD_FIELDS)
    last = len(engine.kinds) - 1
    fields["stage"], fields["last_stage"] = min(fields["stage"], last), min(fields["last_stage"], last)
    return Record(rid=7, state=state, **fields)


@st.composite
def events_of(draw: st.DrawFn, event_type: type[ev.Event], rid: int, engine: Engine) -> ev.Event:
    """An event of ``event_type`` about ``rid``; RPC results mostly name an in-flight call."""
    kwargs: dict[str, Any] = {}
    for name in event_type.field_names():
        if name == "rid":
            kwargs["rid"] = rid
        elif name == "call_id":
            pending = sorted(engine.pending_rpcs)
            kwargs["call_id"] = draw(st.sampled_from(pending) | CALL_IDS if pending else CALL_IDS)
        else:
            kwargs[name] = draw(EVENT_FIELDS[name])
    if "stage" in kwargs:
        kwargs["stage"] = min(kwargs["stage"], len(engine.kinds) - 1)
    return event_type(**kwargs)


# -- copies and the comparison --------------------------------------------------------------------


def copy_record(rec: Record) -> Record:
    twin = Record(rec.rid)
    twin.load(rec.snapshot())
    return twin


def copy_engine(eng: Engine) -> Engine:
    twin = Engine(eng.kinds, eng.final, eng.capacity)
    twin.load(eng.snapshot())
    return twin


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """Return ``("row", result)`` or ``("raises", exception type)``: both paths must agree on either."""
    try:
        return "row", call()
    except Exception as exc:  # a guard that raises must raise on both paths
        return "raises", type(exc)


def assert_request_agrees(rec: Record, event: ev.Event, eng: Engine) -> Any:
    """Select, then fire, ``event`` on copies of ``rec`` through both paths; return the row."""
    fast, slow = copy_record(rec), copy_record(rec)
    selected = outcome(lambda: SELECTION.select(fast, event, eng))
    assert outcome(lambda: REFERENCE.request.select(slow, event, eng)) == selected, (rec, event, eng)
    assert fast.snapshot() == slow.snapshot() == rec.snapshot(), "select must not change the record"
    fired = outcome(lambda: SELECTION.fire(fast, event, eng))
    assert outcome(lambda: REFERENCE.request.fire(slow, event, eng)) == fired == selected, (rec, event, eng)
    assert fast.snapshot() == slow.snapshot(), (rec, event, eng)
    row = fired[1] if fired[0] == "row" else None
    assert fast.state is (rec.state if row is None else row.target)
    return row


def assert_engine_agrees(eng: Engine, event: ev.Event) -> Any:
    """Select, then fire, ``event`` on copies of ``eng`` (the engine is the subject); return the row."""
    fast, slow = copy_engine(eng), copy_engine(eng)
    selected = outcome(lambda: SELECTION_ENGINE.select(fast, event, fast))
    assert outcome(lambda: REFERENCE.engine.select(slow, event, slow)) == selected, (eng, event)
    assert fast.snapshot() == slow.snapshot() == eng.snapshot(), "select must not change the engine"
    fired = outcome(lambda: SELECTION_ENGINE.fire(fast, event, fast))
    assert outcome(lambda: REFERENCE.engine.fire(slow, event, slow)) == fired == selected, (eng, event)
    assert fast.snapshot() == slow.snapshot(), (eng, event)
    return fired[1] if fired[0] == "row" else None


# -- (a) every (state, event type), guard valuations drawn by Hypothesis --------------------------


@pytest.mark.parametrize(("state", "event_type"), pairs(SPEC.rows, ReqState, ev.REQUEST_EVENTS, True), ids=pair_id)
@PAIR_SETTINGS
@given(data=st.data())
def test_request_paths_agree_on_every_pair_with_rows(
    state: ReqState, event_type: type[ev.Event], data: st.DataObject
) -> None:
    eng = data.draw(engines(rpcs=False), "engine")
    rec = data.draw(records(eng, state), "record")
    assert_request_agrees(rec, data.draw(events_of(event_type, rec.rid, eng), "event"), eng)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_request_paths_agree_on_pairs_without_rows(data: st.DataObject) -> None:
    state, event_type = data.draw(st.sampled_from(pairs(SPEC.rows, ReqState, ev.REQUEST_EVENTS, False)), "pair")
    eng = data.draw(engines(rpcs=False), "engine")
    rec = data.draw(records(eng, state), "record")
    assert assert_request_agrees(rec, data.draw(events_of(event_type, rec.rid, eng), "event"), eng) is None


@pytest.mark.parametrize(("state", "event_type"), list(itertools.product(EngineState, ev.ENGINE_EVENTS)), ids=pair_id)
@PAIR_SETTINGS
@given(data=st.data())
def test_engine_paths_agree_on_every_pair(state: EngineState, event_type: type[ev.Event], data: st.DataObject) -> None:
    eng = data.draw(engines(state), "engine")
    assert_engine_agrees(eng, data.draw(events_of(event_type, -1, eng), "event"))


# -- (a') every pair, exhaustively, over a fixed set of canonical valuations -----------------------

#: Stage 0: AR, no client output; 1: AR with client output; 2: the last, diffusion. One slot each.
PIPELINE = {"kinds": (StageKind.AR, StageKind.AR, StageKind.DIFFUSION), "final": (False, True, True), "capacity": 1}
#: Record fields whose every combination is tried where the pair has rows.
RECORD_GRID: dict[str, tuple[Any, ...]] = {"stage": (0, 1, 2), "children_left": (0, 1, 2), "companions_left": (0, 1, 2)}
#: Record fields moved one at a time off the base record.
RECORD_SINGLES: dict[str, tuple[Any, ...]] = {
    "role": (Role.CHILD, Role.COMPANION), "resume": tuple(sorted(BOUND, key=BY_NAME)), "worst": tuple(TERMINALS),
}  # fmt: skip
EVENT_GRID: dict[str, tuple[Any, ...]] = {
    "stop": tuple(StopKind), "outcome": tuple(TERMINALS), "ok": (True, False), "n": (1, 3),
    "companions": (0, 2), "method": tuple(ControlMethod), "tags": (frozenset(), frozenset({"weights"})),
}  # fmt: skip


def canonical_engines(state: EngineState) -> Iterator[Engine]:
    """Engines in ``state``: one in-flight RPC of each method (untagged, or tagged), slots free or full."""
    for call_tags, used in itertools.product((frozenset(), frozenset({"weights"})), (0, 1)):
        rpcs = {k: (method, 1, call_tags) for k, method in enumerate(ControlMethod)}
        yield Engine(**PIPELINE, state=state, slots_used=[used] * 3, sleep_tags=frozenset({"weights", "kv_cache"}),
                     pending_rpcs=rpcs)  # fmt: skip


#: What a request guard reads of the engine: its state, and whether the stage has a free slot.
RUNNING_FREE, RUNNING_FULL = list(canonical_engines(EngineState.RUNNING))[:2]
PAUSED, SLEEPING = (next(canonical_engines(s)) for s in (EngineState.PAUSED, EngineState.SLEEPING))
REQUEST_ENGINES = (RUNNING_FREE, RUNNING_FULL, PAUSED, SLEEPING)


def canonical_valuations(state: ReqState, rowed: bool) -> Iterator[tuple[Record, Engine]]:
    """The base record with each engine; where the pair has rows, also every grid combination and
    each single variation of the record (with a running engine that has free slots)."""
    base = Record(7, state=state, last_stage=2)
    for eng in REQUEST_ENGINES:
        yield base, eng
    if not rowed:
        return
    for values in itertools.product(*RECORD_GRID.values()):
        yield attrs.evolve(base, **dict(zip(RECORD_GRID, values, strict=True))), RUNNING_FREE
    for name, values in RECORD_SINGLES.items():
        for value in values:
            yield attrs.evolve(base, **{name: value}), RUNNING_FREE


def canonical_events(event_type: type[ev.Event], rid: int) -> Iterator[ev.Event]:
    fields = event_type.field_names()
    names = [name for name in fields if name in EVENT_GRID]
    for values in itertools.product(*(EVENT_GRID[name] for name in names)):
        kwargs = dict(zip(names, values, strict=True))
        kwargs.update({"rid": rid} if "rid" in fields else {})
        kwargs.update({"stage": 0} if "stage" in fields else {})
        if "call_id" in fields:
            for call_id in range(len(ControlMethod) + 1):  # each in-flight method, and an unknown call
                yield event_type(call_id=call_id, **kwargs)
        else:
            yield event_type(**kwargs)


def test_request_paths_agree_on_every_pair_exhaustively() -> None:
    """Every pair, canonical valuations; and every row is the one selected by at least one of them."""
    rowed = set(pairs(SPEC.rows, ReqState, ev.REQUEST_EVENTS, True))
    selected: set[Any] = set()
    for state, event_type in itertools.product(ReqState, ev.REQUEST_EVENTS):
        for rec, eng in canonical_valuations(state, rowed=(state, event_type) in rowed):
            for event in canonical_events(event_type, rec.rid):
                selected.add(assert_request_agrees(rec, event, eng))
    never = [row.label() + f" from {row.source.name}" for row in SPEC.rows if row not in selected]
    assert not never, f"rows no canonical valuation selects (shadowed, or the valuations miss them): {never}"


def test_engine_paths_agree_on_every_pair_exhaustively() -> None:
    selected: set[Any] = set()
    for state, event_type in itertools.product(EngineState, ev.ENGINE_EVENTS):
        for eng in canonical_engines(state):
            for event in canonical_events(event_type, -1):
                selected.add(assert_engine_agrees(eng, event))
    never = [row.label() + f" from {row.source.name}" for row in SPEC.engine_rows if row not in selected]
    assert not never, f"rows no canonical valuation selects: {never}"


# -- (b) random event sequences through both paths ----------------------------------------------

ROWS_FROM: dict[ReqState, list[type[ev.Event]]] = {
    state: sorted({r.event for r in SPEC.rows if r.source is state}, key=lambda t: t.__name__) for state in ReqState
}


@SEQUENCE_SETTINGS
@given(data=st.data())
def test_request_paths_agree_on_random_event_sequences(data: st.DataObject) -> None:
    eng = data.draw(engines(rpcs=False), "engine")
    fast = data.draw(records(eng, data.draw(st.sampled_from(ReqState), "start")), "record")
    slow = copy_record(fast)
    for step in range(data.draw(st.integers(1, 40), "length")):
        if fast.state in TERMINAL:  # nothing leaves a terminal state: go on from a live one
            fast.state = slow.state = data.draw(st.sampled_from(LIVE_STATES), f"restart {step}")
        likely = ROWS_FROM[fast.state]  # mostly (9 in 10) events with rows here, so that the walk moves
        types = likely if likely and data.draw(st.integers(0, 9), f"likely {step}") else ev.REQUEST_EVENTS
        event = data.draw(st.sampled_from(types).flatmap(lambda t: events_of(t, fast.rid, eng)), f"event {step}")
        if data.draw(st.booleans(), f"move the guards' inputs {step}"):
            moved = data.draw(records(eng, fast.state), f"inputs {step}").snapshot()
            fast.load(moved)
            slow.load(moved)
        assert REFERENCE.request.fire(slow, event, eng) == SELECTION.fire(fast, event, eng), (step, event)
        assert slow.snapshot() == fast.snapshot()


@SEQUENCE_SETTINGS
@given(data=st.data())
def test_engine_paths_agree_on_random_event_sequences(data: st.DataObject) -> None:
    fast = data.draw(engines(EngineState.RUNNING), "engine")
    slow = copy_engine(fast)
    for step in range(data.draw(st.integers(1, 25), "length")):
        event = data.draw(st.sampled_from(ev.ENGINE_EVENTS).flatmap(lambda t: events_of(t, -1, fast)), f"event {step}")
        assert REFERENCE.engine.fire(slow, event, slow) == SELECTION_ENGINE.fire(fast, event, fast), (step, event)
        assert slow.snapshot() == fast.snapshot()


# -- (c) the whole core, once with each implementation of the tables ------------------------------

SHAPES = [((StageKind.AR,), (True,)), ((StageKind.AR, StageKind.DIFFUSION), (True, True)),
          ((StageKind.AR, StageKind.DIFFUSION), (False, True))]  # fmt: skip
CLIENT_RIDS = (0, 10, 20)  # each owns the ids up to +9 for its children or companions
CORE_EVENT_TYPES = (ev.Submit, ev.Abort, *(t for t in ev.REQUEST_EVENTS if t.ORIGIN == ev.RUNTIME), *ev.ENGINE_EVENTS)


@st.composite
def core_events(draw: st.DrawFn, lc: Lifecycle) -> ev.Event:
    """Any event the core can be handed, mostly about what ``lc`` tracks (stale and unknown ones too)."""
    event_type = draw(st.sampled_from(CORE_EVENT_TYPES))
    tracked = sorted(lc.records)
    about_tracked = bool(tracked) and draw(st.integers(0, 3)) > 0
    kwargs: dict[str, Any] = {}
    for name in event_type.field_names():
        if name == "rid":
            kwargs["rid"] = draw(st.sampled_from(tracked) if about_tracked else st.sampled_from(CLIENT_RIDS))
        elif name == "call_id":
            kwargs["call_id"] = draw(CALL_IDS)
        else:
            kwargs[name] = draw(EVENT_FIELDS[name])
    if "stage" in kwargs:
        rec = lc.records.get(kwargs["rid"])
        current = rec.stage if rec is not None else 0
        kwargs["stage"] = current if draw(st.integers(0, 3)) else min(kwargs["stage"], len(lc.engine.kinds) - 1)
    if event_type is ev.Submit and kwargs["n"] > 1:
        kwargs["companions"] = 0
    return event_type(**kwargs)


def handle(lc: Lifecycle, event: ev.Event) -> tuple[str, Any]:
    try:
        return "observations", lc.handle(event)
    except errors.OmniFsmError as exc:
        return "raises", (type(exc), str(exc))


class _Counting:
    """A table that counts the selections asked of it."""

    def __init__(self, table: Any) -> None:
        self.table, self.calls = table, 0

    def select(self, subject: Any, event: Any, engine: Any) -> Any:
        self.calls += 1
        return self.table.select(subject, event, engine)


def test_a_replaced_table_is_the_one_the_core_asks() -> None:
    """The property below compares the two tables only if the core really asks the one put in."""
    lc = Lifecycle([StageKind.AR], [True])
    request, engine = _Counting(REFERENCE.request), _Counting(REFERENCE.engine)
    lc.table, lc.engine_table = request, engine
    lc.handle(ev.Submit(0))
    lc.handle(ev.Scheduled(0, 0))
    lc.handle(ev.Control(1, ControlMethod.PAUSE_SCHEDULER))
    assert (request.calls, engine.calls) == (2, 1)

    class Empty:
        def select(self, subject: Any, event: Any, engine: Any) -> None:
            return None

    lc.table = Empty()
    with pytest.raises(errors.LifecycleError):
        lc.handle(ev.Submit(5))


@SEQUENCE_SETTINGS
@given(shape=st.sampled_from(SHAPES), capacity=st.integers(1, 2), data=st.data())
def test_lifecycle_observes_the_same_with_the_reference_tables(
    shape: tuple[tuple[StageKind, ...], tuple[bool, ...]], capacity: int, data: st.DataObject
) -> None:
    fast, slow = Lifecycle(*shape, capacity), Lifecycle(*shape, capacity)
    slow.table, slow.engine_table = REFERENCE.request, REFERENCE.engine
    for step in range(data.draw(st.integers(1, 40), "length")):
        event = data.draw(core_events(fast), f"event {step}")
        assert handle(slow, event) == handle(fast, event), (step, event)
        assert slow.snapshot() == fast.snapshot(), (step, event)
    assert slow.counters.as_dict() == fast.counters.as_dict()
