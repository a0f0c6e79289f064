"""The explorer's breadth-first search, and what it reports: counterexamples and the liveness check.

The search walks a ``StateSpace`` (what it needs of ``omni_fsm.explore.explorer.Explorer``: the initial
state, the memoised successor functions, the end-of-history judgement) from the empty engine, keeping
the shortest counterexample per invariant (rebuilt from parent links); liveness is a backward pass over
the progress edges it recorded. It never imports the explorer: the explorer imports it.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from omni_fsm.explore.world import Bound, Step, is_progress
from omni_fsm.invariants import CHECKS
from omni_fsm.spec import events as ev

#: A family-local step: (step, next engine part, next family part, violations, progress?); the next engine
#: part is ``ESCAPES`` where the step must be computed on the whole state (``StateSpace.whole_step``).
LocalStep = tuple[Step, int, int, tuple[Any, ...], bool]
#: A successor: (family, step, next state, violations, progress?); ``family`` is the 1-based position of the
#: family whose relative rids ``step`` uses, 0 for an engine-wide step.
Successor = tuple[int, Step, tuple[int, ...], tuple[Any, ...], bool]
#: The next engine part of a ``LocalStep`` that the reduction cannot compute alone.
ESCAPES = -1
#: How often (in states) the search reports progress.
TICK = 4096
#: How often (in states) the search asks ``stop()`` whether to stop: often, so that a deadline or Ctrl-C is met
#: within a fraction of a second even where a state costs a millisecond (a family of many records).
ASK_EVERY = 64
#: ``Report.stopped`` when the search stopped at its first violation (``first_violation``).
FIRST_VIOLATION = "the first violation found"


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

    @property
    def reduction(self) -> bool:
        """Whether successors are computed by the reduction (``local``, ``engine_successors``), else whole."""

    @property
    def sample_every(self) -> int:
        """Compare the reduction with the whole-state computation on every this-many-th state (0: never)."""

    @property
    def calls(self) -> Mapping[str, int]:
        """The core's and the monitor's evaluations so far."""

    @property
    def verified(self) -> int:
        """The states whose reduced successors were compared with the whole-state ones."""

    def initial(self) -> tuple[int, ...]:
        """Return the empty engine's state."""

    def local(self, gid: int, fid: int) -> list[LocalStep]:
        """Return (and memoise) the family-local steps from (g, f), rids relative to the family."""

    def engine_successors(self, state: tuple[int, ...]) -> list[tuple[Step, tuple[int, ...], tuple[Any, ...]]]:
        """Return (engine step, next state, violations) for every engine-wide step enabled in ``state``."""

    def whole_step(self, state: tuple[int, ...], family: int, step: Step) -> tuple[tuple[int, ...], Any] | None:
        """Return (next state, violations) of one step computed on the whole state (None: refused)."""

    def full_successors(self, state: tuple[int, ...]) -> list[Successor]:
        """Return every successor of ``state`` computed on the whole state."""

    def verify(self, state: tuple[int, ...], symmetry: bool) -> None:
        """Raise if the reduced successors of ``state`` differ from the whole-state ones."""

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
    """What one exploration found and did: its size and time, what was judged, and the counterexamples."""

    states: int  #: distinct states reached
    edges: int  #: steps taken (every enabled step of every state searched)
    seconds: float
    invariants: tuple[str, ...]  #: the IDs the monitor judges (every edge, and every state where nothing is live)
    liveness_checked: bool
    stuck: Counterexample | None  #: a reachable state from which no progress ends everything
    violations: tuple[Counterexample, ...]
    symmetry: bool
    reduction: bool = True
    evaluations: Mapping[str, int] = attrs.field(factory=dict)  #: the core's and the monitor's calls
    verified: int = 0  #: states where the reduction was compared with the whole-state computation
    ended_states: int = 0  #: states where nothing is live (the end-of-history rules ran there)
    depth: int = 0  #: the deepest breadth-first level searched (complete up to the one before, when stopped)
    stopped: str | None = None  #: why the search stopped before it had covered every state (None: it had not)

    @property
    def ok(self) -> bool:
        """Return whether no invariant broke and (if checked) liveness held."""
        return not self.violations and self.stuck is None

    @property
    def partial(self) -> bool:
        """Return whether the search stopped before it had covered every state (a limit, a signal, a violation)."""
        return self.stopped is not None


def search(xp: StateSpace, symmetry: bool, liveness: bool, progress: Callable[[int, int, float], None] | None,
           on_phase: Callable[[str], None] | None, max_states: int | None = None,
           stop: Callable[[], str | None] | None = None, first_violation: bool = False) -> Report:
    """Search every state ``xp`` reaches from the empty engine; return the report (pure: no I/O).

    ``max_states`` stops the search once that many states are known; ``stop()`` (asked every ``ASK_EVERY`` states)
    stops it when it returns a reason; ``first_violation`` once a state's successors broke an invariant (what TLC
    does by default). Any way, no liveness is checked and the report says why it stopped.
    """
    bound = xp.bound
    start = time.perf_counter()
    init = xp.initial()
    ids: dict[tuple[int, ...], int] = {symmetric(init) if symmetry else init: 0}
    parents: list[tuple[int, int, Step | None]] = [(-1, 0, None)]  # (parent, family, step)
    states: list[tuple[int, ...]] = [init]
    depths = array("I", [0])  # breadth-first level of each state
    found: dict[str, Counterexample] = {}
    preds: list[list[int]] = [[]]  # progress edges, reversed: who can reach each state
    check_live = liveness and not symmetry
    goals: list[int] = []
    bad: set[int] = set()  # states reached by a violating step: reported as safety, not liveness
    edges = 0
    stopped: str | None = None
    block = bound.block
    local, engine_successors, local_cache, whole_step = xp.local, xp.engine_successors, xp.local_memo, xp.whole_step
    reduction, sample_every = xp.reduction, xp.sample_every

    def _add(nxt: tuple[int, ...], key: tuple[int, ...], sid: int, family: int, step: Step,
             violations: tuple[Any, ...]) -> int:
        nid = len(states)
        ids[key] = nid
        states.append(nxt)
        parents.append((sid, family, step))
        depths.append(depths[sid] + 1)
        preds.append([])
        if violations:
            bad.add(nid)
            for inv, msg in violations:
                found.setdefault(inv, Counterexample(inv, msg, shortest_path(parents, nid, block)))
        return nid

    def _seen_violation(sid: int, family: int, step: Step, violations: tuple[Any, ...]) -> None:
        last = flat_events(rebase(step, (family - 1) * block if family else 0))
        for inv, msg in violations:
            found.setdefault(inv, Counterexample(inv, msg, (*shortest_path(parents, sid, block), *last)))

    def _edge(sid: int, family: int, step: Step, nxt: tuple[int, ...], violations: tuple[Any, ...],
              prog: bool) -> None:
        key = symmetric(nxt) if symmetry else nxt
        nid = ids.get(key)
        if nid is None:
            nid = _add(nxt, key, sid, family, step, violations)
        elif violations:
            _seen_violation(sid, family, step, violations)
        if check_live and prog:
            preds[nid].append(sid)

    sid = 0
    ended_states = 0
    while sid < len(states):  # states are appended in BFS order: the list is the queue
        if max_states is not None and len(states) >= max_states:
            stopped = f"--max-states {max_states:,} reached"
            break
        state = states[sid]
        gid = state[0]
        if xp.all_ended(state):
            goals.append(sid)
            ended_states += 1
            for inv, msg in xp.finish_violations(state):  # end-of-history rules
                found.setdefault(inv, Counterexample(inv, msg, shortest_path(parents, sid, block)))
        if not reduction:
            for family, step, nxt, violations, prog in xp.full_successors(state):
                edges += 1
                _edge(sid, family, step, nxt, violations, prog)
        else:
            if sample_every and sid % sample_every == 0:
                xp.verify(state, symmetry)
            rest = state[1:]
            for i in range(1, len(state)):
                steps = local_cache.get((gid, state[i]))
                if steps is None:
                    steps = local(gid, state[i])
                head, tail = rest[: i - 1], rest[i:]
                for step, g2, f2, violations, prog in steps:
                    if g2 == ESCAPES:  # the reduction cannot compute it alone: on the whole state
                        whole = whole_step(state, i, step)
                        if whole is None:  # the core refused it there: no edge
                            continue
                        nxt, violations = whole
                    else:
                        nxt = (g2, *head, f2, *tail)
                    edges += 1
                    _edge(sid, i, step, nxt, violations, prog)
            for step, nxt, violations in engine_successors(state):
                edges += 1
                _edge(sid, 0, step, nxt, violations, is_progress(step))
        sid += 1
        if first_violation and found:
            stopped = FIRST_VIOLATION
            break
        if sid % ASK_EVERY == 0:
            if progress is not None and sid % TICK == 0:  # the caller decides how often to show it
                progress(len(states), edges, time.perf_counter() - start)
            if stop is not None:
                stopped = stop()
                if stopped is not None:
                    break

    def report_counts() -> None:  # the liveness check reports the search's final counts too
        if progress is not None:
            progress(len(states), edges, time.perf_counter() - start)

    report_counts()  # the search is over: its final counts
    check_live = check_live and stopped is None
    if check_live and on_phase is not None:
        on_phase("checking liveness")
    stuck = liveness_stuck(len(states), parents, goals, preds, bad, block, report_counts) if check_live else None
    seconds = time.perf_counter() - start
    invariants = tuple(sorted({c.invariant for c in CHECKS.values()}))
    return Report(len(states), edges, seconds, invariants, check_live, stuck,
                  tuple(sorted(found.values(), key=lambda c: (len(c.events), c.invariant))), symmetry,
                  reduction, dict(xp.calls), xp.verified, ended_states, depths[sid - 1] if sid else 0, stopped)


def symmetric(state: tuple[int, ...]) -> tuple[int, ...]:
    return (state[0], *sorted(state[1:]))


# -- counterexamples: event paths rebuilt from the search's parent links ---------------------------


def rebase(event: Any, base: int) -> Any:
    """Return ``event`` (or a macro of events) with its request ids moved up by ``base``."""
    if not isinstance(event, ev.Event):  # a macro step: a plain tuple of events
        return tuple(rebase(e, base) for e in event)
    return event._replace(rid=event.rid + base) if base and isinstance(event, ev.RequestEvent) else event  # type: ignore[attr-defined]


class Links(Protocol):
    """The parent links paths are rebuilt from: ``links[sid]`` is (parent, family, step), (-1, 0, None) at the root."""

    def __getitem__(self, sid: int, /) -> tuple[int, int, Step | None]: ...


def shortest_path(parents: Links, sid: int, block: int) -> tuple[ev.Event, ...]:
    steps: list[Step] = []
    while sid > 0:
        sid, family, step = parents[sid]
        assert step is not None
        steps.append(rebase(step, (family - 1) * block if family else 0))
    return tuple(e for step in reversed(steps) for e in flat_events(step))


def flat_events(step: Step) -> tuple[ev.Event, ...]:
    return (step,) if isinstance(step, ev.Event) else step


# -- liveness ----------------------------------------------------------------------------------------


def liveness_stuck(count: int, parents: Links, goals: list[int],
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
                                  shortest_path(parents, sid, block))
    return None
