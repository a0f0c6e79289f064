"""A bounded, exhaustive breadth-first explorer of the lifecycle (what TLC does for TLA+).

It drives the real core (``Lifecycle.handle``) and judges every step with the independent
invariants (``Monitor``). A state is the core's snapshot plus the monitor's facts: an engine part
and one part per request *family* (a client request with its samples or companions).

Successors are computed on the whole state: every family loaded, the event handled, every family
saved (``full_successors``). That is the definition; ``--no-reduction`` runs exactly it.

The reduction (on by default) computes a family's step with that family alone and memoises it on
what the family can observe of the engine (its control plane and whether each stage's slots are
all taken); an engine-wide step is computed per family and combined. It is used only where it is
known to agree with the definition:

- a step that changes the control plane, or runs an effect that reaches other families (the
  effects with a ``CROSSING`` reach, counted by the core as they run), is computed on the whole
  state instead;
- on a sample of states (every ``sample_every``-th, the first included) the reduced successors
  are compared with the whole-state ones, and a difference raises ``UnsoundReduction`` naming the
  state and the step: the run stops rather than report what it did not check.

Safety: every reached edge is judged; the shortest counterexample per invariant is kept; the
end-of-history rules run on every state where no request is live. Liveness: from every reachable
state, a state with no live request must be reachable through *progress* events only (the
engine and its operator doing their job). Symmetry (families as interchangeable) serves safety
only and is checked on the sample too.

This module holds the state space (``Explorer``) and ``explore``; what can happen (``Bound``, the
enabled steps) is in ``omni_fsm.explore.world``; the search, its counterexamples and the liveness
check in ``omni_fsm.explore.search``, which walks the ``Explorer`` as a ``StateSpace``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omni_fsm.engine.core import Lifecycle
from omni_fsm.errors import ConfigError, InternalError, LifecycleError
from omni_fsm.explore.parallel import cores, parallel_search
from omni_fsm.explore.search import ESCAPES, Counterexample, LocalStep, Report, Successor, rebase, search
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
from omni_fsm.invariants.view import View
from omni_fsm.spec import events as ev
from omni_fsm.spec.record import ENGINE_FIELDS, RECORD_FIELDS, Record
from omni_fsm.spec.table import SPEC, Spec
from omni_fsm.spec.vocabulary import StopKind

#: The reduction is compared with the whole-state computation on every this-many-th state (the first included).
SAMPLE_EVERY = 64


class UnsoundReduction(InternalError):
    """The reduced successors of a state differ from the ones computed on the whole state."""


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


#: What one run of the scratch core gives: (engine part, family parts, violations, effects that crossed families).
_Run = tuple[int, tuple[int, ...], tuple[tuple[str, str], ...], int]


class Explorer:
    """The state space the search walks: (engine part, family parts), driven by the real core and monitor.

    A state is ``(g, f_0, ..., f_k)``: small ints naming an interned engine part ``g`` (the core's
    engine snapshot and the monitor's global facts) and interned family parts ``f_i`` (the family's
    records and views, with rids relative to the family). ``calls`` counts the core's and the
    monitor's evaluations (``handle``, ``step``, ``finish``) the exploration made.
    """

    def __init__(self, bound: Bound, spec: Spec = SPEC, reduction: bool = True,
                 sample_every: int = SAMPLE_EVERY) -> None:  # fmt: skip
        self.bound, self.spec, self.reduction, self.sample_every = bound, spec, reduction, sample_every
        self.kinds, self.final = bound.pipeline()
        self.lc = Lifecycle(self.kinds, self.final, bound.capacity, spec)
        self.mon = Monitor(self.kinds, self.final, bound.capacity)
        self.calls = {"core": 0, "monitor": 0}
        self.verified = 0  #: states whose reduced successors were compared with the whole-state ones
        self.globals: list[tuple[Any, Any]] = []
        self.families: list[Family] = []
        self._gid: dict[Any, int] = {}
        self._fid: dict[Any, int] = {}
        #: per (g, f), the family-local steps from there (``local``'s memo; the search reads it directly)
        self.local_memo: dict[tuple[int, int], list[LocalStep]] = {}
        self._listed: dict[tuple[int, int], list[Step]] = {}
        self._engine_by_family: dict[tuple[int, int], list[tuple[Any, int, tuple[Any, ...]] | None]] = {}
        #: per global state, per engine step enabled there: (next engine part, violations, crossings), or None
        self._engine_alone: dict[int, list[tuple[int, tuple[Any, ...], int] | None]] = {}
        self._abstract_of: dict[int, int] = {}
        self._aid: dict[Any, int] = {}
        self._applied: dict[tuple[int, Any], int] = {}
        self._local_abstract: dict[tuple[int, int], list[tuple[Step, Any, int, tuple[Any, ...], bool]]] = {}
        self._engine_steps: dict[int, list[Step]] = {}
        self._stop_kinds = tuple(StopKind) if "finish" in bound.families else ()
        self.empty_family = self.intern_family(((), ()))

    # -- interning -------------------------------------------------------------------------------

    def intern_global(self, g: tuple[Any, Any]) -> int:
        gid = self._gid.get(g)
        if gid is None:
            gid = self._gid[g] = len(self.globals)
            self.globals.append(g)
        return gid

    def intern_family(self, f: Family) -> int:
        fid = self._fid.get(f)
        if fid is None:
            fid = self._fid[f] = len(self.families)
            self.families.append(f)
        return fid

    def initial(self) -> tuple[int, ...]:
        """Return the empty engine's state."""
        lc = Lifecycle(self.kinds, self.final, self.bound.capacity, self.spec)
        mon = Monitor(self.kinds, self.final, self.bound.capacity)
        gid = self.intern_global((lc.engine.snapshot(), mon.snapshot()[:4]))
        return (gid, *(self.empty_family,) * self.bound.requests)

    # -- loading families (each at its position) into the scratch core and monitor; running a step ---

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
        return self.intern_family((recs, views))

    def _save_global(self) -> int:
        m = self.mon
        mg = (m.engine, tuple(m.slots), tuple(sorted(m.rpcs.items(), key=lambda kv: kv[0])), m.stopped)
        return self.intern_global((self.lc.engine.snapshot(), mg))

    def _run(self, gid: int, fams: tuple[tuple[int, int], ...], event: Step) -> _Run | None:
        """Apply ``event`` (or a macro: a tuple of events, absolute rids) with only ``fams`` loaded.

        Return (g', f's, violations, crossings), or None if the core refused a call.
        """
        self._load(gid, fams)
        counters = self.lc.counters
        crossed = counters.fanned_out_across
        violations: list[tuple[str, str]] = []
        for one in (event,) if isinstance(event, ev.Event) else event:
            self.calls["core"] += 1
            try:
                outputs = self.lc.handle(one)
            except LifecycleError:
                return None
            self.calls["monitor"] += 1
            violations.extend((v.invariant, v.message) for v in self.mon.step(one, outputs))
        return (self._save_global(), tuple(self._save(i) for i, _ in fams), tuple(violations),
                counters.fanned_out_across - crossed)  # fmt: skip

    # -- the definition: successors on the whole state ------------------------------------------------

    def family_steps(self, gid: int, fid: int) -> list[Step]:
        """Return the steps family part ``fid`` can take over engine part ``gid`` (rids relative to the family)."""
        key = (gid, fid)
        steps = self._listed.get(key)
        if steps is None:
            eng = self.globals[gid][0]
            steps = self._listed[key] = family_events(self.bound, self._stop_kinds, eng, self.families[fid], self.lc)
        return steps

    def whole_step(self, state: tuple[int, ...], family: int, step: Step) -> tuple[tuple[int, ...], Any] | None:
        """Return (next state, violations) of ``step`` computed on the whole state (``family``: 1-based position of
        the family whose relative rids ``step`` uses, 0 for an engine step), or None if the core refused it."""
        fams = tuple(enumerate(state[1:]))
        absolute = rebase(step, (family - 1) * self.bound.block) if family else step
        got = self._run(state[0], fams, absolute)
        if got is None:
            return None
        return (got[0], *got[1]), got[2]

    def full_successors(self, state: tuple[int, ...]) -> list[Successor]:
        """Return every successor of ``state`` computed on the whole state: (family, step, next, violations,
        progress), ``family`` the 1-based position whose relative rids ``step`` uses (0: an engine step)."""
        gid = state[0]
        out: list[Successor] = []
        for i in range(1, len(state)):
            for step in self.family_steps(gid, state[i]):
                got = self.whole_step(state, i, step)
                if got is not None:
                    out.append((i, step, got[0], got[1], is_progress(step)))
        for step in self.engine_events(gid):
            got = self.whole_step(state, 0, step)
            if got is not None:
                out.append((0, step, got[0], got[1], is_progress(step)))
        return out

    # -- the reduction: memoised family steps, keyed on what a family can observe of the engine part ---
    #
    # A family-local step reads the engine part only through its control-plane state and whether
    # each stage's slots are all taken, and writes it only by taking or freeing slots. So steps are
    # memoised on (abstract engine part, family) and stored as slot deltas applied to the concrete g.
    # A step that does more (changes the control plane, reaches another family) is marked ESCAPES:
    # the search computes it on the whole state.

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
            if any(x < 0 for x in slots):  # the memoised delta does not fit this engine part: compute it whole
                return ESCAPES
            eng2 = (*eng[:_ENG_SLOTS], slots, *eng[_ENG_SLOTS + 1 :])
            mg2 = (mg[0], tuple(a + d for a, d in zip(mg[1], dm, strict=True)), *mg[2:])
            g2 = self._applied[key] = self.intern_global((eng2, mg2))
        return g2

    def local(self, gid: int, fid: int) -> list[LocalStep]:
        """Return the family-local steps from (g, f), rids relative: (step, g', f', violations, progress);
        ``g'`` is ``ESCAPES`` for a step that must be computed on the whole state."""
        key = (gid, fid)
        steps = self.local_memo.get(key)
        if steps is None:
            akey = (self._abstract(gid), fid)
            abstract = self._local_abstract.get(akey)
            if abstract is None:
                abstract = []
                for event in self.family_steps(gid, fid):
                    got = self._run(gid, ((0, fid),), event)
                    if got is None:
                        continue
                    delta = self._delta(gid, got[0])
                    if delta is None or got[3]:  # the control plane changed, or an effect reached other families
                        abstract.append((event, None, -1, (), is_progress(event)))
                    else:
                        abstract.append((event, delta, got[1][0], got[2], is_progress(event)))
                self._local_abstract[akey] = abstract
            steps = [(e, ESCAPES if d is None else self._apply_delta(gid, d), f2, v, p) for e, d, f2, v, p in abstract]
            self.local_memo[key] = steps
        return steps

    def engine_local(self, gid: int, fid: int) -> list[tuple[Any, int, tuple[Any, ...]] | None]:
        """Return, per engine step enabled at ``gid``, its effect on family ``fid``: (slot delta, f', violations),
        ``ESCAPES`` in place of the delta where computing it per family is not enough."""
        akey = (self._abstract(gid), fid)
        got = self._engine_by_family.get(akey)
        if got is None:
            got = []
            for step, base in zip(self.engine_events(gid), self._engine_bases(gid), strict=True):
                run = self._run(gid, ((0, fid),), step)
                if run is None or base is None:
                    got.append(None)
                    continue
                delta = self._delta(base[0], run[0])
                if delta is None or run[3] > base[2]:  # the family changed the engine, or reached beyond itself
                    got.append((ESCAPES, run[1][0], run[2]))
                else:
                    got.append((delta, run[1][0], run[2]))
            self._engine_by_family[akey] = got
        return got

    def _engine_bases(self, gid: int) -> list[tuple[int, tuple[Any, ...], int] | None]:
        """Return, per engine step enabled at ``gid`` (in ``engine_events`` order), its effect with no family."""
        bases = self._engine_alone.get(gid)
        if bases is None:
            runs = [self._run(gid, (), step) for step in self.engine_events(gid)]
            bases = self._engine_alone[gid] = [None if run is None else (run[0], run[2], run[3]) for run in runs]
        return bases

    def engine_successors(self, state: tuple[int, ...]) -> list[tuple[Step, tuple[int, ...], tuple[Any, ...]]]:
        """Return (engine step, next state, violations) for every engine-wide step enabled in ``state``."""
        gid = state[0]
        per_family = [self.engine_local(gid, fid) for fid in state[1:]]
        out: list[tuple[Step, tuple[int, ...], tuple[Any, ...]]] = []
        for k, (step, base) in enumerate(zip(self.engine_events(gid), self._engine_bases(gid), strict=True)):
            if base is None:
                continue
            new_gid, violations = base[0], list(base[1])
            fids: list[int] = []
            for results in per_family:
                got = results[k]
                if got is None:
                    break
                if new_gid != ESCAPES:
                    new_gid = ESCAPES if got[0] == ESCAPES else self._apply_delta(new_gid, got[0])
                fids.append(got[1])
                violations.extend(got[2])
            else:
                if new_gid == ESCAPES:  # some family's part is not enough to compute it: on the whole state
                    whole = self.whole_step(state, 0, step)
                    if whole is not None:
                        out.append((step, whole[0], whole[1]))
                    continue
                out.append((step, (new_gid, *fids), tuple(dict.fromkeys(violations)) if violations else ()))
        return out

    def engine_events(self, gid: int) -> list[Step]:
        steps = self._engine_steps.get(gid)
        if steps is None:
            steps = self._engine_steps[gid] = engine_events(self.bound, self.globals[gid][0])
        return steps

    def reduced_successors(self, state: tuple[int, ...]) -> list[Successor]:
        """Return every successor of ``state`` as the reduction computes it (the search's hot path, in one list)."""
        gid = state[0]
        out: list[Successor] = []
        for i in range(1, len(state)):
            for step, g2, f2, violations, prog in self.local(gid, state[i]):
                if g2 == ESCAPES:
                    whole = self.whole_step(state, i, step)
                    if whole is not None:
                        out.append((i, step, whole[0], whole[1], prog))
                else:
                    out.append((i, step, (g2, *state[1:i], f2, *state[i + 1 :]), violations, prog))
        out.extend((0, step, nxt, v, is_progress(step)) for step, nxt, v in self.engine_successors(state))
        return out

    def verify(self, state: tuple[int, ...], symmetry: bool) -> None:
        """Compare the reduced successors of ``state`` with the whole-state ones; ``UnsoundReduction`` if they
        differ. With ``symmetry``, also compare the successors of ``state`` with its families in reverse order."""
        self.verified += 1
        # violations compared by invariant: a family computed alone names its requests by relative id
        reduced = {(f, s, nxt): frozenset(i for i, _ in v) for f, s, nxt, v, _ in self.reduced_successors(state)}
        full = {(f, s, nxt): frozenset(i for i, _ in v) for f, s, nxt, v, _ in self.full_successors(state)}
        if reduced != full:
            self._unsound(state, reduced, full)
        if symmetry and len(state) > 2:
            mirrored = (state[0], *reversed(state[1:]))
            ours = sorted((_canonical(nxt), sorted(v)) for (_, _, nxt), v in full.items())
            theirs = sorted((_canonical(n), sorted({i for i, _ in v}))
                            for _, _, n, v, _ in self.full_successors(mirrored))
            if ours != theirs:
                raise UnsoundReduction(f"symmetry: the families of state {state} in reverse order reach other states "
                                       "or break other invariants; explore without --symmetry")

    def _unsound(self, state: tuple[int, ...], reduced: dict[Any, Any], full: dict[Any, Any]) -> None:
        """Raise ``UnsoundReduction`` for the first step whose successors differ: each side's successor states (the
        core's records and engine, the monitor's facts, as ``facts`` names them), what differs between them, and
        the invariants each side says the step broke."""
        steps = sorted({(f, s) for f, s, _ in (*reduced, *full)}, key=repr)
        for family, step in steps:
            ours = {nxt: v for (f, s, nxt), v in reduced.items() if (f, s) == (family, step)}
            whole = {nxt: v for (f, s, nxt), v in full.items() if (f, s) == (family, step)}
            if ours == whole:
                continue
            where = f"family {family}" if family else "the engine"
            lines = [f"the reduction disagrees with the whole-state computation at state {state}, step {step!r} of "
                     f"{where}; the state: {_shown(self.facts(state))}"]
            lines += _sides(ours, whole, self.facts)
            lines.append("explore with --no-reduction")
            raise UnsoundReduction("\n  ".join(lines))
        raise UnsoundReduction(f"the reduction disagrees with the whole-state computation at state {state}")

    def facts(self, state: tuple[int, ...]) -> dict[str, Any]:
        """Return what ``state`` holds, by name: the core's engine fields (``engine.slots_used``), each record's
        state and fields that are not the default (``request 3.state``), the monitor's global facts
        (``monitor.slots``) and its views' fields that are not the default (``view 3.terminals``); rids absolute."""
        (eng, mg) = self.globals[state[0]]
        out: dict[str, Any] = {f"engine.{name}": value for name, value in zip(ENGINE_FIELDS, eng, strict=True)}
        out.update({f"monitor.{name}": value for name, value in zip(("engine", "slots", "rpcs", "stopped"), mg,
                                                                    strict=True)})  # fmt: skip
        block = self.bound.block
        for i, fid in enumerate(state[1:]):
            recs, views = self.families[fid]
            for off, snap in recs:
                fields = zip(RECORD_FIELDS, _shift_rec(snap, i * block), strict=True)
                out.update({f"request {i * block + off}.{name}": value for name, value in fields
                            if name == "state" or value != _RECORD_DEFAULTS[name]})  # fmt: skip
            for off, snap in views:
                fields = zip(VIEW_FIELDS, _shift_view(snap, i * block), strict=True)
                out.update({f"view {i * block + off}.{name}": value for name, value in fields
                            if value != _VIEW_DEFAULTS[name]})  # fmt: skip
        return out

    # -- end of history ------------------------------------------------------------------------------

    def all_ended(self, state: tuple[int, ...]) -> bool:
        """Return whether no request is live (every family unsubmitted or ended)."""
        families = self.families
        return all(not families[f][0] for f in state[1:])

    def finish_violations(self, state: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
        """Judge the end-of-history rules in a state where nothing is live."""
        self._load(state[0], tuple(enumerate(state[1:])))
        self.calls["monitor"] += 1
        return tuple((v.invariant, v.message) for v in self.mon.finish())


def _canonical(state: tuple[int, ...]) -> tuple[int, ...]:
    return (state[0], *sorted(state[1:]))


_RECORD_DEFAULTS = dict(zip(RECORD_FIELDS, Record(0).snapshot(), strict=True))
_VIEW_DEFAULTS = dict(zip(VIEW_FIELDS, View().snapshot(), strict=True))


def _shown(facts: dict[str, Any]) -> str:
    return ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in facts.items())


def _sides(ours: dict[Any, Any], whole: dict[Any, Any],
           facts: Callable[[tuple[int, ...]], dict[str, Any]]) -> list[str]:  # fmt: skip
    """Return lines naming the successors only one side reached (and, where each has one, what differs)."""
    only_ours = [n for n in ours if n not in whole or ours[n] != whole[n]]
    only_whole = [n for n in whole if n not in ours or ours[n] != whole[n]]
    lines = []
    for label, side, states in (("reduced", ours, only_ours), ("whole", whole, only_whole)):
        if not side:
            lines.append(f"{label}: none (the core refused the step)")
        elif not states:
            lines.append(f"{label}: no successor the other side lacks")
        for nxt in states:
            broke = f" (breaks {', '.join(sorted(side[nxt]))})" if side[nxt] else ""
            lines.append(f"{label}: {nxt}{broke}: {_shown(facts(nxt))}")
    if len(only_ours) == 1 and len(only_whole) == 1:
        a, b = facts(only_ours[0]), facts(only_whole[0])
        differ = [f"{k}: reduced {getattr(a.get(k), 'name', a.get(k))}, whole {getattr(b.get(k), 'name', b.get(k))}"
                  for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]  # fmt: skip
        lines.append("they differ in " + ("; ".join(differ) if differ else "the invariants broken only"))
    return lines


def explore(bound: Bound = Bound(),  # noqa: B008 - Bound is frozen: one shared default is safe
            spec: Spec = SPEC, symmetry: bool = False, liveness: bool = True,
            progress: Callable[[int, int, float], None] | None = None,
            on_phase: Callable[[str], None] | None = None, reduction: bool = True,
            max_states: int | None = None, stop: Callable[[], str | None] | None = None,
            workers: int = 1, first_violation: bool = False) -> Report:
    """Explore every state reachable within ``bound`` on ``spec``; return the report (pure: no I/O).

    ``reduction=False`` computes every successor on the whole state. ``max_states`` stops the search once
    it has that many states; ``stop()``, asked every few dozen states, stops it when it returns a reason;
    ``first_violation`` stops it once a step broke an invariant (its counterexample a shortest one). A search
    stopped early checks no liveness and says what it covered (``Report.stopped``, ``Report.depth``).
    ``workers`` > 1 expands states in that many processes (0: one per core), with the same states, edges,
    counterexamples and verdicts (``omni_fsm.explore.parallel``; the evaluations are summed over the workers).
    """
    if workers < 0:
        raise ConfigError(f"workers must be 0 (one per core) or more, got {workers}")
    xp = Explorer(bound, spec, reduction)
    count = workers or cores()
    if count > 1:
        return parallel_search(xp, count, symmetry, liveness, progress, on_phase, max_states, stop,
                               first_violation=first_violation)
    return search(xp, symmetry, liveness, progress, on_phase, max_states, stop, first_violation)


__all__ = ["DEFAULT_FAMILIES", "FAMILIES", "PROGRESS", "SAMPLE_EVERY", "Bound", "Counterexample", "Explorer",
           "Report", "UnsoundReduction", "explore"]
