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

This module holds the state space (``Explorer``: the family codec, interning, the memoised
successor function) and ``explore``. What can happen (families, ``Bound``, enabled steps) is in
``omni_fsm.explore.world``; the search, its counterexamples and the liveness check in
``omni_fsm.explore.search``, which walks the ``Explorer`` as a ``StateSpace`` (and never imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_fsm.engine.core import Lifecycle
from omni_fsm.errors import LifecycleError
from omni_fsm.explore.search import Counterexample, LocalStep, Report, search
from omni_fsm.explore.world import (
    DEFAULT_FAMILIES,
    FAMILIES,
    PROGRESS,
    Bound,
    Family,
    Step,
    engine_events,
    family_events,
    is_progress,
)
from omni_fsm.invariants import Monitor
from omni_fsm.invariants.monitor import VIEW_FIELDS
from omni_fsm.spec.record import ENGINE_FIELDS, RECORD_FIELDS
from omni_fsm.spec.table import SPEC, Spec
from omni_fsm.spec.vocabulary import StopKind

# -- the family codec: absolute rids <-> family-relative offsets ---------------------------------
_REC_PARENT = RECORD_FIELDS.index("parent")
_ENG_SLOTS = ENGINE_FIELDS.index("slots_used")
_VIEW_PARENT, _VIEW_CHILDREN = VIEW_FIELDS.index("parent"), VIEW_FIELDS.index("children")


def _shift_rec(snap: tuple[Any, ...], delta: int) -> tuple[Any, ...]:
    parent = snap[_REC_PARENT]
    return snap if parent < 0 else (*snap[:_REC_PARENT], parent + delta, *snap[_REC_PARENT + 1 :])


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
        #: per (g, f), the family-local steps from there (``local``'s memo; the search reads it directly)
        self.local_memo: dict[tuple[int, int], list[LocalStep]] = {}
        self._engine_by_family: dict[tuple[int, int], list[tuple[Any, int, tuple[Any, ...]] | None]] = {}
        #: per global state, per engine step enabled there: (next global state, violations), or None (refused)
        self._engine_alone: dict[int, list[tuple[int, tuple[Any, ...]] | None]] = {}
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
            recs.extend((base + off, _shift_rec(s, base)) for off, s in frecs)
            views.extend((base + off, _shift_view(v, base)) for off, v in fviews)
        self.lc.restore((eng, tuple(recs)))
        self.mon.restore((*mg, tuple(views)))

    def _save(self, i: int) -> int:
        base, block = i * self.bound.block, self.bound.block
        recs = tuple((rid - base, _shift_rec(r.snapshot(), -base)) for rid, r in sorted(self.lc.records.items())
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

    def local(self, gid: int, fid: int) -> list[LocalStep]:
        """Return the family-local steps from (g, f), rids relative: (step, g', f', violations, progress)."""
        key = (gid, fid)
        steps = self.local_memo.get(key)
        if steps is None:
            akey = (self._abstract(gid), fid)
            abstract = self._local_abstract.get(akey)
            if abstract is None:
                abstract = []
                events = family_events(self.bound, self._stop_kinds, self.globals[gid][0], self.families[fid], self.lc)
                for event in events:
                    got = self._run(gid, ((0, fid),), event)
                    if got is not None:
                        delta = self._delta(gid, got[0])
                        assert delta is not None, f"a family step changed the control plane: {event!r}"
                        abstract.append((event, delta, got[1][0], got[2], is_progress(event)))
                self._local_abstract[akey] = abstract
            steps = [(e, self._apply_delta(gid, d), f2, v, p) for e, d, f2, v, p in abstract]
            self.local_memo[key] = steps
        return steps

    def engine_local(self, gid: int, fid: int) -> list[tuple[Any, int, tuple[Any, ...]] | None]:
        """Return, per engine step enabled at ``gid``, its effect on family ``fid``: (slot delta, f', violations)."""
        akey = (self._abstract(gid), fid)
        got = self._engine_by_family.get(akey)
        if got is None:
            got = []
            for step, base in zip(self._engine_events(gid), self._engine_bases(gid), strict=True):
                run = self._run(gid, ((0, fid),), step)
                if run is None or base is None:
                    got.append(None)
                    continue
                delta = self._delta(base[0], run[0])
                assert delta is not None, f"an engine step depends on the family: {step!r}"
                got.append((delta, run[1][0], run[2]))
            self._engine_by_family[akey] = got
        return got

    def _engine_bases(self, gid: int) -> list[tuple[int, tuple[Any, ...]] | None]:
        """Return, per engine step enabled at ``gid`` (in ``_engine_events`` order), its effect with no family."""
        bases = self._engine_alone.get(gid)
        if bases is None:
            runs = [self._run(gid, (), step) for step in self._engine_events(gid)]
            bases = self._engine_alone[gid] = [None if run is None else (run[0], run[2]) for run in runs]
        return bases

    def engine_successors(self, state: tuple[int, ...]) -> list[tuple[Step, tuple[int, ...], tuple[Any, ...]]]:
        """Return (engine step, next state, violations) for every engine-wide step enabled in ``state``."""
        gid = state[0]
        per_family = [self.engine_local(gid, fid) for fid in state[1:]]
        out: list[tuple[Step, tuple[int, ...], tuple[Any, ...]]] = []
        for k, (step, base) in enumerate(zip(self._engine_events(gid), self._engine_bases(gid), strict=True)):
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

    def _engine_events(self, gid: int) -> list[Step]:
        steps = self._engine_steps.get(gid)
        if steps is None:
            steps = self._engine_steps[gid] = engine_events(self.bound, self.globals[gid][0])
        return steps

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


def explore(bound: Bound = Bound(),  # noqa: B008 - Bound is frozen: one shared default is safe
            spec: Spec = SPEC, symmetry: bool = False, liveness: bool = True,
            progress: Callable[[int, int, float], None] | None = None,
            on_phase: Callable[[str], None] | None = None) -> Report:
    """Explore every state reachable within ``bound``; return the report (pure: no I/O)."""
    return search(Explorer(bound, spec), symmetry, liveness, progress, on_phase)


__all__ = ["DEFAULT_FAMILIES", "FAMILIES", "PROGRESS", "Bound", "Counterexample", "Explorer", "Report", "explore"]
