"""A bounded, exhaustive breadth-first explorer of the lifecycle (what TLC does for TLA+).

It drives the real core (``Lifecycle.handle``) and judges every step with the independent
invariants (``Monitor``). A state is the core's snapshot plus the monitor's facts, split per
request *family* (a client request with its children or companions), so that a family-local
step can be memoised: the real transition function runs once per distinct local situation.

Safety: every reached edge is judged; the shortest counterexample per invariant is kept.
Liveness: from every reachable state, a state with no live request must be reachable through
*progress* events only (the engine and its operator doing their job; no client abort, no
failure, no death, no shutdown). Liveness is checked without symmetry reduction; symmetry
(families as interchangeable: a sorted tuple) serves safety only.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from omni_fsm import events as ev
from omni_fsm._record import ENGINE_FIELDS, RECORD_FIELDS, Record, field_index
from omni_fsm._table import SPEC, STAGE_LIVE, Spec
from omni_fsm._vocab import LIVE, ControlMethod, ReqState, StageKind, StopKind
from omni_fsm.core import Lifecycle, fanout
from omni_fsm.errors import ConfigError, LifecycleError
from omni_fsm.invariants import Monitor
from omni_fsm.invariants._monitor import VIEW_FIELDS

FAMILIES: dict[str, tuple[type[ev.Event], ...]] = {
    "submit": (ev.Submit,),
    "schedule": (ev.Scheduled, ev.Preempted),
    "park": (ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq, ev.AwaitChunk, ev.InputReady),
    "output": (ev.StageOutput,),
    "finish": (ev.StageFinished,),
    "abort": (ev.Abort, ev.AbortDone, ev.AbortFailed),
    "abort_race": (),  # reports arriving while a physical abort is in flight (else abort + result are one step)
    "failure": (ev.StageFailed, ev.ReplicaLost),
    "death": (ev.EngineDied,),
    "shutdown": (ev.Shutdown,),
    "control": (ev.Control, ev.RpcDone, ev.RpcFailed),
    "late": (),  # duplicates and reports for ended requests: must be dropped
    "illegal": (),  # runtime reports the table has no row for: must fail only that request
}
#: Every family but ``abort_race``: the default bound must finish in under a minute.
DEFAULT_FAMILIES: frozenset[str] = frozenset(FAMILIES) - {"abort_race"}
#: Events a fair engine (and its operator) always eventually produce: what liveness may use.
PROGRESS: frozenset[type[ev.Event]] = frozenset(
    {ev.Scheduled, ev.InputReady, ev.StageOutput, ev.StageFinished, ev.AbortDone, ev.Control, ev.RpcDone}
)
_STAGE_REPORTS = (ev.Scheduled, ev.Preempted, ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq,
                  ev.AwaitChunk, ev.InputReady, ev.StageFailed, ev.ReplicaLost, ev.AbortDone, ev.AbortFailed)
_CONTROL_IDS = {m: i + 1 for i, m in enumerate(ControlMethod)}
#: One step of the search: an event, or a short macro of events applied back to back.
Step = ev.Event | tuple[ev.Event, ...]


@attrs.frozen
class Bound:
    """What to explore: how many requests, the pipeline's shape, and which event families."""

    requests: int = 3
    stages: int = 2
    final_stages: int = 1  #: the last stage, plus the first ``final_stages - 1`` ones
    n: int = 1
    companions: int = 0
    capacity: int = 2
    max_tokens: int = 2  #: outputs per request and stage
    kinds: tuple[StageKind, ...] = ()  #: default: every stage AR
    families: frozenset[str] = DEFAULT_FAMILIES

    def pipeline(self) -> tuple[tuple[StageKind, ...], tuple[bool, ...]]:
        """Return (stage kinds, final-output flags)."""
        kinds = self.kinds or (StageKind.AR,) * self.stages
        if len(kinds) != self.stages:
            raise ConfigError(f"{len(kinds)} stage kinds given for {self.stages} stages")
        if not 1 <= self.final_stages <= self.stages:
            raise ConfigError("final_stages must be between 1 and the number of stages")
        final = tuple(i == self.stages - 1 or i < self.final_stages - 1 for i in range(self.stages))
        return kinds, final

    @property
    def block(self) -> int:
        """Return the number of internal ids one family uses."""
        return 1 + fanout(self.n, self.companions)


@attrs.frozen
class Counterexample:
    """The shortest event sequence (from the empty engine) that breaks ``invariant``."""

    invariant: str
    message: str
    events: tuple[ev.Event, ...]


@attrs.frozen
class Report:
    states: int
    edges: int
    seconds: float
    invariants: tuple[str, ...]  #: the IDs judged on every edge
    liveness_checked: bool
    stuck: Counterexample | None  #: a reachable state from which no progress ends everything
    violations: tuple[Counterexample, ...]
    symmetry: bool

    @property
    def ok(self) -> bool:
        """Return whether no invariant broke and (if checked) liveness held."""
        return not self.violations and self.stuck is None


# -- the family codec: absolute rids <-> family-relative offsets ---------------------------------
_REC_PARENT, _REC_STATE, _REC_STAGE, _REC_TOKENS = (field_index(RECORD_FIELDS, f)
                                                   for f in ("parent", "state", "stage", "tokens"))
_ENG_SLOTS, _ENG_RPCS = field_index(ENGINE_FIELDS, "slots_used"), field_index(ENGINE_FIELDS, "pending_rpcs")
_VIEW_PARENT, _VIEW_CHILDREN = field_index(VIEW_FIELDS, "parent"), field_index(VIEW_FIELDS, "children")

Family = tuple[tuple[tuple[int, tuple[Any, ...]], ...], tuple[tuple[int, tuple[Any, ...]], ...]]


def _rel_rec(snap: tuple[Any, ...], base: int) -> tuple[Any, ...]:
    parent = snap[_REC_PARENT]
    return snap if parent < 0 else (*snap[:_REC_PARENT], parent - base, *snap[_REC_PARENT + 1 :])


def _abs_rec(snap: tuple[Any, ...], base: int) -> tuple[Any, ...]:
    parent = snap[_REC_PARENT]
    return snap if parent < 0 else (*snap[:_REC_PARENT], parent + base, *snap[_REC_PARENT + 1 :])


def _shift_view(snap: tuple[Any, ...], delta: int) -> tuple[Any, ...]:
    parent, children = snap[_VIEW_PARENT], snap[_VIEW_CHILDREN]
    if parent < 0 and not children:
        return snap
    shifted = list(snap)
    shifted[_VIEW_PARENT] = parent + delta if parent >= 0 else parent
    shifted[_VIEW_CHILDREN] = tuple(c + delta for c in children)
    return tuple(shifted)


class Explorer:
    """Breadth-first search over (engine, families, monitor facts) driven by the real core.

    A state is ``(g, f_0, ..., f_k)``: small ints naming an interned engine part ``g`` (the
    core's engine snapshot and the monitor's global facts) and interned family parts ``f_i``
    (the family's records and views, with rids relative to the family). Every step is computed
    per family by the real core and monitor and memoised on ``(g, f_i, event)``: a request's
    event touches only its family; an engine event touches each family independently and the
    engine part identically (checked: a mismatch falls back to the whole state).
    """

    def __init__(self, bound: Bound, spec: Spec = SPEC) -> None:
        self.bound, self.spec = bound, spec
        self.kinds, self.final = bound.pipeline()
        self.lc = Lifecycle(self.kinds, self.final, bound.capacity, spec)
        self.mon = Monitor(self.kinds, self.final, bound.capacity)
        self.globals: list[tuple[Any, Any]] = []
        self.families: list[Family] = []
        self._gid: dict[Any, int] = {}
        self._fid: dict[Any, int] = {}
        self._local: dict[tuple[int, int], list[tuple[Step, int, int, tuple[Any, ...], bool]]] = {}
        self._engine_by_family: dict[tuple[int, int], list[tuple[Any, int, tuple[Any, ...]] | None]] = {}
        self._engine_alone: dict[tuple[int, Step], tuple[int, tuple[Any, ...]] | None] = {}
        self._abstract_of: dict[int, int] = {}
        self._aid: dict[Any, int] = {}
        self._applied: dict[tuple[int, Any], int] = {}
        self._local_abstract: dict[tuple[int, int], list[tuple[Step, Any, int, tuple[Any, ...], bool]]] = {}
        self._engine_steps: dict[int, list[Step]] = {}
        self._stop_kinds = tuple(StopKind) if "finish" in bound.families else ()
        self.empty_family = self._intern_family(((), ()))

    # -- interning -------------------------------------------------------------------------------

    def _intern_global(self, g: tuple[Any, Any]) -> int:
        gid = self._gid.get(g)
        if gid is None:
            gid = self._gid[g] = len(self.globals)
            self.globals.append(g)
        return gid

    def _intern_family(self, f: Family) -> int:
        fid = self._fid.get(f)
        if fid is None:
            fid = self._fid[f] = len(self.families)
            self.families.append(f)
        return fid

    def initial(self) -> tuple[int, ...]:
        """Return the empty engine's state."""
        lc = Lifecycle(self.kinds, self.final, self.bound.capacity, self.spec)
        mon = Monitor(self.kinds, self.final, self.bound.capacity)
        gid = self._intern_global((lc.engine.snapshot(), mon.snapshot()[:4]))
        return (gid, *(self.empty_family,) * self.bound.requests)

    # -- loading one family (at family position ``i``) into the scratch core and monitor -----------

    def _load(self, gid: int, fams: tuple[tuple[int, int], ...]) -> None:
        eng, mg = self.globals[gid]
        recs: list[tuple[int, tuple[Any, ...]]] = []
        views: list[tuple[int, tuple[Any, ...]]] = []
        block = self.bound.block
        for i, fid in fams:
            frecs, fviews = self.families[fid]
            base = i * block
            recs.extend((base + off, _abs_rec(s, base)) for off, s in frecs)
            views.extend((base + off, _shift_view(v, base)) for off, v in fviews)
        self.lc.restore((eng, tuple(recs)))
        self.mon.restore((*mg, tuple(views)))

    def _save(self, i: int) -> int:
        base, block = i * self.bound.block, self.bound.block
        recs = tuple((rid - base, _rel_rec(r.snapshot(), base)) for rid, r in sorted(self.lc.records.items())
                     if base <= rid < base + block)
        views = tuple((rid - base, _shift_view(v.snapshot(), -base)) for rid, v in sorted(self.mon.views.items())
                      if base <= rid < base + block)
        return self._intern_family((recs, views))

    def _save_global(self) -> int:
        m = self.mon
        mg = (m.engine, tuple(m.slots), tuple(sorted(m.rpcs.items(), key=lambda kv: kv[0])), m.stopped)
        return self._intern_global((self.lc.engine.snapshot(), mg))

    def _run(self, gid: int, fams: tuple[tuple[int, int], ...], event: Step) -> tuple[Any, ...] | None:
        """Apply ``event`` (or a macro: a tuple of events) with only ``fams`` loaded.

        Return (g', f's, violations), or None if the core refused a call.
        """
        self._load(gid, fams)
        violations: list[tuple[str, str]] = []
        for one in event if isinstance(event, tuple) else (event,):
            try:
                outputs = self.lc.handle(one)
            except LifecycleError:
                return None
            violations.extend((v.invariant, v.message) for v in self.mon.step(one, outputs))
        return (self._save_global(), tuple(self._save(i) for i, _ in fams), tuple(violations))

    # -- successors --------------------------------------------------------------------------------

    # -- memoised steps, keyed on what a family can observe of the engine part ----------------------
    #
    # A family-local step reads the engine part only through its control-plane state and whether
    # each stage's slots are all taken, and writes it only by taking or freeing slots. So steps are
    # memoised on (abstract engine part, family) and stored as slot deltas applied to the concrete g.

    def _abstract(self, gid: int) -> int:
        aid = self._abstract_of.get(gid)
        if aid is None:
            (state, slots, level, tags, rpcs), (m_engine, m_slots, m_rpcs, stopped) = self.globals[gid]
            cap = self.bound.capacity
            key = (state, tuple(x >= cap for x in slots), level, tags, rpcs, m_engine,
                   tuple(x >= cap for x in m_slots), m_rpcs, stopped)
            aid = self._abstract_of[gid] = self._aid.setdefault(key, len(self._aid))
        return aid

    def _delta(self, gid: int, g2: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        (e1, m1), (e2, m2) = self.globals[gid], self.globals[g2]
        if (e1[0], *e1[2:]) != (e2[0], *e2[2:]) or (m1[0], *m1[2:]) != (m2[0], *m2[2:]):
            return None  # not a slot-only change
        de = tuple(b - a for a, b in zip(e1[1], e2[1], strict=True))
        dm = tuple(b - a for a, b in zip(m1[1], m2[1], strict=True))
        return (de, dm) if any(de) or any(dm) else ()  # type: ignore[return-value]

    def _apply_delta(self, gid: int, delta: Any) -> int:
        if not delta:
            return gid
        key = (gid, delta)
        g2 = self._applied.get(key)
        if g2 is None:
            (eng, mg), (de, dm) = self.globals[gid], delta
            slots = tuple(a + d for a, d in zip(eng[_ENG_SLOTS], de, strict=True))
            eng2 = (*eng[:_ENG_SLOTS], slots, *eng[_ENG_SLOTS + 1 :])
            mg2 = (mg[0], tuple(a + d for a, d in zip(mg[1], dm, strict=True)), *mg[2:])
            g2 = self._applied[key] = self._intern_global((eng2, mg2))
        return g2

    def local(self, gid: int, fid: int) -> list[tuple[Step, int, int, tuple[Any, ...], bool]]:
        """Return the family-local steps from (g, f), rids relative: (step, g', f', violations, progress)."""
        key = (gid, fid)
        steps = self._local.get(key)
        if steps is None:
            akey = (self._abstract(gid), fid)
            abstract = self._local_abstract.get(akey)
            if abstract is None:
                abstract = []
                for event in self._family_events(gid, fid):
                    got = self._run(gid, ((0, fid),), event)
                    if got is not None:
                        delta = self._delta(gid, got[0])
                        assert delta is not None, f"a family step changed the control plane: {event!r}"
                        abstract.append((event, delta, got[1][0], got[2], _is_progress(event)))
                self._local_abstract[akey] = abstract
            steps = [(e, self._apply_delta(gid, d), f2, v, p) for e, d, f2, v, p in abstract]
            self._local[key] = steps
        return steps

    def engine_local(self, gid: int, fid: int) -> list[tuple[Any, int, tuple[Any, ...]] | None]:
        """Return, per engine step enabled at ``gid``, its effect on family ``fid``: (slot delta, f', violations)."""
        akey = (self._abstract(gid), fid)
        got = self._engine_by_family.get(akey)
        if got is None:
            got = []
            for step in self._engine_events(gid):
                base = self._engine_base(gid, step)
                run = self._run(gid, ((0, fid),), step)
                if run is None or base is None:
                    got.append(None)
                    continue
                delta = self._delta(base[0], run[0])
                assert delta is not None, f"an engine step depends on the family: {step!r}"
                got.append((delta, run[1][0], run[2]))
            self._engine_by_family[akey] = got
        return got

    def _engine_base(self, gid: int, step: Step) -> tuple[int, tuple[Any, ...]] | None:
        key = (gid, step)
        if key not in self._engine_alone:
            run = self._run(gid, (), step)
            self._engine_alone[key] = None if run is None else (run[0], run[2])
        return self._engine_alone[key]

    def engine_successors(self, state: tuple[int, ...]) -> list[tuple[Step, tuple[int, ...], tuple[Any, ...]]]:
        """Return (engine step, next state, violations) for every engine-wide step enabled in ``state``."""
        gid = state[0]
        per_family = [self.engine_local(gid, fid) for fid in state[1:]]
        out: list[tuple[Step, tuple[int, ...], tuple[Any, ...]]] = []
        for k, step in enumerate(self._engine_events(gid)):
            base = self._engine_base(gid, step)
            if base is None:
                continue
            new_gid, violations = base[0], list(base[1])
            fids: list[int] = []
            for results in per_family:
                got = results[k]
                if got is None:
                    break
                new_gid = self._apply_delta(new_gid, got[0])
                fids.append(got[1])
                violations.extend(got[2])
            else:
                out.append((step, (new_gid, *fids), tuple(dict.fromkeys(violations)) if violations else ()))
        return out

    def _family_events(self, gid: int, fid: int) -> list[Step]:
        b, fams = self.bound, self.bound.families
        recs, views = self.families[fid]
        if not views:
            return [ev.Submit(0, b.n, b.companions)] if "submit" in fams else []
        out: list[Step] = []
        live = {off for off, _ in recs}
        for off, snap in recs:
            state, stage, tokens = snap[_REC_STATE], snap[_REC_STAGE], snap[_REC_TOKENS]
            if state in _UNBOUND:
                if "abort" in fams:
                    out.append(ev.Abort(off))
                continue
            atomic_abort = "abort_race" not in fams and state is not ReqState.ABORTING
            out.extend(cls(off, stage) for cls in _STAGE_REPORTS
                       if _family_of(cls) in fams and not (atomic_abort and cls in _ABORT_RESULTS))
            if "output" in fams and tokens < b.max_tokens:
                out.append(ev.StageOutput(off, stage, 1))
            out.extend(ev.StageFinished(off, stage, k) for k in self._stop_kinds)
            if "abort" in fams and atomic_abort:  # the abort and its physical result, one step
                out.extend((ev.Abort(off), result(off, stage)) for result in _ABORT_RESULTS)
            elif "abort" in fams:
                out.append(ev.Abort(off))
            if "late" in fams and stage > 0:
                out.append(ev.StageFinished(off, stage - 1))
        if "late" in fams:
            for off, _ in views:
                if off not in live:
                    out.append(ev.StageOutput(off, 0, 1))
                    out.append(ev.AbortDone(off, 0))
        eng = self.globals[gid][0]
        legal: list[Step] = []
        illegal: dict[int, Step] = {}  # every illegal report fails its request alike: one per request
        for step in out:
            if self._illegal(eng, recs, step):
                illegal.setdefault(step.rid, step)  # type: ignore[union-attr]
            else:
                legal.append(step)
        return legal + list(illegal.values()) if "illegal" in fams else legal

    def _illegal(self, eng: tuple[Any, ...], recs: Any, event: Step) -> bool:
        """Return whether the table has no row for this runtime report (it would fail the request)."""
        if isinstance(event, tuple) or event.ORIGIN != ev.RUNTIME or not isinstance(event, ev.StageEvent):
            return False
        snap = dict(recs).get(event.rid)
        if snap is None or snap[_REC_STAGE] != event.stage:
            return False  # late or stale: dropped, not illegal
        self.lc.engine.load(eng)
        rec = Record(event.rid)
        rec.load(snap)
        return self.lc.table.select(rec, event, self.lc.engine) is None

    def _engine_events(self, gid: int) -> list[Step]:
        steps = self._engine_steps.get(gid)
        if steps is None:
            steps = self._engine_steps[gid] = self._list_engine_events(gid)
        return steps

    def _list_engine_events(self, gid: int) -> list[Step]:
        fams = self.bound.families
        eng = self.globals[gid][0]
        out: list[Step] = []
        pending = dict(eng[_ENG_RPCS])
        if "control" in fams and not pending:  # a control call and its result, one at a time
            for method, cid in _CONTROL_IDS.items():
                out.append((ev.Control(cid, method), ev.RpcDone(cid)))
                out.append((ev.Control(cid, method), ev.RpcFailed(cid)))
        if "death" in fams:
            out.append(ev.EngineDied())
        if "shutdown" in fams:
            out.append(ev.Shutdown())
        return out

    def all_ended(self, state: tuple[int, ...]) -> bool:
        """Return whether no request is live (every family unsubmitted or ended)."""
        families = self.families
        return all(not families[f][0] for f in state[1:])

    def finish_violations(self, state: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
        """Judge the end-of-history rules in a state where nothing is live."""
        if any(not self.families[f][1] for f in state[1:]):
            return ()
        self._load(state[0], tuple(enumerate(state[1:])))
        return tuple((v.invariant, v.message) for v in self.mon.finish())


#: Live states not bound to a stage: only the client can act on them (the rest is internal).
_UNBOUND = LIVE - STAGE_LIVE - {ReqState.NEW}
_ABORT_RESULTS = (ev.AbortDone, ev.AbortFailed)


def _family_of(cls: type[ev.Event]) -> str:
    for name, members in FAMILIES.items():
        if cls in members:
            return name
    raise KeyError(cls)


def _rebase(event: Any, base: int) -> Any:
    if isinstance(event, tuple):
        return tuple(_rebase(e, base) for e in event)
    return attrs.evolve(event, rid=event.rid + base) if base and isinstance(event, ev.RequestEvent) else event


def explore(bound: Bound = Bound(), spec: Spec = SPEC, symmetry: bool = False, liveness: bool = True,
            progress: Callable[[int, int, float], None] | None = None,
            on_phase: Callable[[str], None] | None = None) -> Report:
    """Explore every state reachable within ``bound``; return the report (pure: no I/O)."""
    from omni_fsm.invariants import CHECKS

    xp = Explorer(bound, spec)
    start = time.perf_counter()
    init = xp.initial()
    ids: dict[tuple[int, ...], int] = {_symmetric(init) if symmetry else init: 0}
    parents: list[tuple[int, int, Step | None]] = [(-1, 0, None)]  # (parent, family, step)
    states: list[tuple[int, ...]] = [init]
    found: dict[str, Counterexample] = {}
    preds: list[list[int]] = [[]]  # progress edges, reversed: who can reach each state
    check_live = liveness and not symmetry
    goals: list[int] = []
    bad: set[int] = set()  # states reached by a violating step: reported as safety, not liveness
    edges = 0
    block = bound.block
    local, engine_successors, local_cache = xp.local, xp.engine_successors, xp._local

    def _add(nxt: tuple[int, ...], key: tuple[int, ...], sid: int, family: int, step: Step,
             violations: tuple[Any, ...]) -> int:
        nid = len(states)
        ids[key] = nid
        states.append(nxt)
        parents.append((sid, family, step))
        preds.append([])
        if violations:
            bad.add(nid)
            for inv, msg in violations:
                found.setdefault(inv, Counterexample(inv, msg, _path(parents, nid, block)))
        return nid

    def _seen_violation(sid: int, family: int, step: Step, violations: tuple[Any, ...]) -> None:
        last = _flat(_rebase(step, (family - 1) * block if family else 0))
        for inv, msg in violations:
            found.setdefault(inv, Counterexample(inv, msg, (*_path(parents, sid, block), *last)))

    sid = 0
    while sid < len(states):  # states are appended in BFS order: the list is the queue
        state = states[sid]
        gid = state[0]
        if xp.all_ended(state):
            goals.append(sid)
            for inv, msg in xp.finish_violations(state):  # end-of-history rules
                found.setdefault(inv, Counterexample(inv, msg, _path(parents, sid, block)))
        rest = state[1:]
        for i in range(1, len(state)):
            steps = local_cache.get((gid, state[i]))
            if steps is None:
                steps = local(gid, state[i])
            head, tail = rest[: i - 1], rest[i:]
            for step, g2, f2, violations, prog in steps:
                edges += 1
                nxt = (g2, *head, f2, *tail)
                key = _symmetric(nxt) if symmetry else nxt
                nid = ids.get(key)
                if nid is None:
                    nid = _add(nxt, key, sid, i, step, violations)
                elif violations:
                    _seen_violation(sid, i, step, violations)
                if check_live and prog:
                    preds[nid].append(sid)
        for step, nxt, violations in engine_successors(state):
            edges += 1
            key = _symmetric(nxt) if symmetry else nxt
            nid = ids.get(key)
            if nid is None:
                nid = _add(nxt, key, sid, 0, step, violations)
            elif violations:
                _seen_violation(sid, 0, step, violations)
            if check_live and _is_progress(step):
                preds[nid].append(sid)
        sid += 1
        if progress is not None and sid % 4096 == 0:  # the caller decides how often to show it
            progress(len(states), edges, time.perf_counter() - start)

    def report_counts(liveness_done: int = 0) -> None:  # liveness reports the search's final counts
        if progress is not None:
            progress(len(states), edges, time.perf_counter() - start)

    report_counts()  # the search is over: its final counts
    if check_live and on_phase is not None:
        on_phase("checking liveness")
    stuck = _liveness(len(states), parents, goals, preds, bad, block, report_counts) if check_live else None
    seconds = time.perf_counter() - start
    invariants = tuple(sorted({c.invariant for c in CHECKS.values()}))
    return Report(len(states), edges, seconds, invariants, check_live, stuck,
                  tuple(sorted(found.values(), key=lambda c: (len(c.events), c.invariant))), symmetry)


def _symmetric(state: tuple[int, ...]) -> tuple[int, ...]:
    return (state[0], *sorted(state[1:]))


def _path(parents: list[tuple[int, int, Step | None]], sid: int, block: int) -> tuple[ev.Event, ...]:
    steps: list[Step] = []
    while sid > 0:
        sid, family, step = parents[sid]
        assert step is not None
        steps.append(_rebase(step, (family - 1) * block if family else 0))
    return tuple(e for step in reversed(steps) for e in _flat(step))


def _flat(step: Step) -> tuple[ev.Event, ...]:
    return step if isinstance(step, tuple) else (step,)


def _is_progress(step: Step) -> bool:
    if isinstance(step, tuple):
        return all(type(e) in PROGRESS for e in step)
    return type(step) in PROGRESS


def _liveness(count: int, parents: list[tuple[int, int, Step | None]], goals: list[int],
              preds: list[list[int]], bad: set[int], block: int,
              tick: Callable[[int], None] = lambda done: None) -> Counterexample | None:  # fmt: skip
    """Return a shortest path to a state from which no progress path ends every request.

    ``tick(states done)`` is called every 4,096 states, for progress.
    """
    can_end = bytearray(count)
    frontier = deque(goals)
    for g in goals:
        can_end[g] = 1
    done = 0
    while frontier:
        done += 1
        if done % 4096 == 0:
            tick(done)
        for p in preds[frontier.popleft()]:
            if not can_end[p]:
                can_end[p] = 1
                frontier.append(p)
    for sid in range(count):  # ids are in BFS order: the first is a shortest one
        if not can_end[sid] and sid not in bad:
            return Counterexample("LIVENESS", "no progress path from here ends every request",
                                  _path(parents, sid, block))
    return None


__all__ = ["FAMILIES", "PROGRESS", "Bound", "Counterexample", "Explorer", "Report", "explore"]
