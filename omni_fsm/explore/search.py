"""The explorer's breadth-first search, and what it reports: counterexamples and the liveness check.

The search walks a ``StateSpace`` (what it needs of ``omni_fsm.explore.explorer.Explorer``: the initial
state, the memoised successor functions, the end-of-history judgement) from the empty engine, keeping
the shortest counterexample per invariant (rebuilt from parent links); liveness is a backward pass over
the progress edges it recorded. It never imports the explorer: the explorer imports it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from omni_fsm.explore.world import Bound, Step, is_progress
from omni_fsm.invariants import CHECKS
from omni_fsm.spec import events as ev

#: A family-local step: (step, next engine part, next family part, violations, progress?).
LocalStep = tuple[Step, int, int, tuple[Any, ...], bool]


class StateSpace(Protocol):
    """What the search needs of the state space it walks (``Explorer`` is the one there is).

    A state is ``(g, f_0, ..., f_k)``: an interned engine part and interned family parts.
    """

    @property
    def bound(self) -> Bound:
        """The bound explored (its ``block``: the internal ids one family uses)."""

    @property
    def local_memo(self) -> Mapping[tuple[int, int], list[LocalStep]]:
        """The family-local steps already computed, by (g, f): ``local``'s memo, read directly on the hot path."""

    def initial(self) -> tuple[int, ...]:
        """Return the empty engine's state."""

    def local(self, gid: int, fid: int) -> list[LocalStep]:
        """Return (and memoise) the family-local steps from (g, f), rids relative to the family."""

    def engine_successors(self, state: tuple[int, ...]) -> list[tuple[Step, tuple[int, ...], tuple[Any, ...]]]:
        """Return (engine step, next state, violations) for every engine-wide step enabled in ``state``."""

    def all_ended(self, state: tuple[int, ...]) -> bool:
        """Return whether no request is live in ``state``."""

    def finish_violations(self, state: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
        """Judge the end-of-history rules in a state where nothing is live."""


@attrs.frozen
class Counterexample:
    """The shortest event sequence (from the empty engine) that breaks ``invariant``."""

    invariant: str
    message: str
    events: tuple[ev.Event, ...]


@attrs.frozen
class Report:
    """What one exploration found: its size and time, what was judged, and the counterexamples."""

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


def search(xp: StateSpace, symmetry: bool, liveness: bool, progress: Callable[[int, int, float], None] | None,
           on_phase: Callable[[str], None] | None) -> Report:
    """Search every state ``xp`` reaches from the empty engine; return the report (pure: no I/O)."""
    bound = xp.bound
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
    local, engine_successors, local_cache = xp.local, xp.engine_successors, xp.local_memo

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
            if check_live and is_progress(step):
                preds[nid].append(sid)
        sid += 1
        if progress is not None and sid % 4096 == 0:  # the caller decides how often to show it
            progress(len(states), edges, time.perf_counter() - start)

    def report_counts() -> None:  # the liveness check reports the search's final counts too
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


# -- counterexamples: event paths rebuilt from the search's parent links ---------------------------


def _rebase(event: Any, base: int) -> Any:
    if isinstance(event, tuple):
        return tuple(_rebase(e, base) for e in event)
    return attrs.evolve(event, rid=event.rid + base) if base and isinstance(event, ev.RequestEvent) else event


def _path(parents: list[tuple[int, int, Step | None]], sid: int, block: int) -> tuple[ev.Event, ...]:
    steps: list[Step] = []
    while sid > 0:
        sid, family, step = parents[sid]
        assert step is not None
        steps.append(_rebase(step, (family - 1) * block if family else 0))
    return tuple(e for step in reversed(steps) for e in _flat(step))


def _flat(step: Step) -> tuple[ev.Event, ...]:
    return step if isinstance(step, tuple) else (step,)


# -- liveness ----------------------------------------------------------------------------------------


def _liveness(count: int, parents: list[tuple[int, int, Step | None]], goals: list[int],
              preds: list[list[int]], bad: set[int], block: int,
              tick: Callable[[], None] = lambda: None) -> Counterexample | None:  # fmt: skip
    """Return a shortest path to a state from which no progress path ends every request.

    ``tick()`` is called every 4,096 states, for progress.
    """
    can_end = bytearray(count)
    frontier = deque(goals)
    for g in goals:
        can_end[g] = 1
    done = 0
    while frontier:
        done += 1
        if done % 4096 == 0:
            tick()
        for p in preds[frontier.popleft()]:
            if not can_end[p]:
                can_end[p] = 1
                frontier.append(p)
    for sid in range(count):  # ids are in BFS order: the first is a shortest one
        if not can_end[sid] and sid not in bad:
            return Counterexample("LIVENESS", "no progress path from here ends every request",
                                  _path(parents, sid, block))
    return None
