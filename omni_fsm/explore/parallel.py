"""The explorer across cores: worker processes expand the frontier, the coordinator merges as one process would.

The coordinator keeps what the one-process search (``omni_fsm.explore.search``) keeps: the states in
breadth-first order, their parents, the shortest counterexample per invariant, the progress edges for
the liveness check. Workers (forked: each starts from a copy of the ``Explorer`` and builds its own memo)
expand contiguous ranges of known states ("chunks"): every successor, the sampled comparison of the
reduction with the whole state, the end-of-history rules where nothing is live. The coordinator merges
the chunks in order, state by state, exactly as the serial loop would have met them, so the states and
their numbering, the edges, the counterexamples, the liveness verdict and a ``max_states`` stop are the
serial search's. Only the evaluations differ: they are summed over the workers, whose memos overlap.

Interning is per process. The coordinator's ``Explorer`` holds the master tables: it sends each worker
the engine and family parts it has not seen yet (as values) and every new state (in master ids); a
worker answers in its own ids, with the parts it made since its last answer, and the coordinator
translates. A worker keeps every state it was sent, so most successors come back as a state number;
the others come back once per chunk, in the order first reached, with the edge that first reached
them: its step as an index into the parent's step list (an int pickles cheaply; an event does not).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import signal
import time
from array import array
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Protocol

from omni_fsm.errors import ConfigError, InternalError
from omni_fsm.explore.search import (
    ASK_EVERY,
    ESCAPES,
    FIRST_VIOLATION,
    TICK,
    Counterexample,
    Report,
    StateSpace,
    flat_events,
    liveness_stuck,
    rebase,
    shortest_path,
    symmetric,
)
from omni_fsm.explore.world import Family, Step, is_progress
from omni_fsm.invariants import CHECKS

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess


class Explorer(StateSpace, Protocol):
    """What the parallel search needs of ``omni_fsm.explore.explorer.Explorer`` (which imports this module): the
    state space, and the interning tables the coordinator keeps as the master copy."""

    globals: list[tuple[Any, Any]]
    families: list[Family]

    def intern_global(self, g: tuple[Any, Any]) -> int:
        """Return the id of engine part ``g`` (a new one for a part not seen)."""

    def intern_family(self, f: Family) -> int:
        """Return the id of family part ``f`` (a new one for a part not seen)."""

    def family_steps(self, gid: int, fid: int) -> list[Step]:
        """Return the steps one family can take from (g, f), rids relative to the family."""

    def engine_events(self, gid: int) -> list[Step]:
        """Return the engine-wide steps enabled in engine part ``gid``."""

#: The most states in one chunk, and how many chunks a worker holds at once (one expanded, the next waiting).
CHUNK, IN_HAND = 256, 2
#: Seconds a worker waits for a task before it checks that its coordinator is still there.
ORPHAN_CHECK = 1.0
#: An edge's step as sent: its index in the parent's step list, or the step itself where it is not in that list.
Code = int | Step
#: What a worker returns for a chunk (``_Expander.expand``).
Chunk = tuple[Any, ...]


def cores() -> int:
    """Return the cores this process may run on (``--workers 0``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# -- a worker ------------------------------------------------------------------------------------------


class _Expander:
    """A worker's side: its explorer, every state it was sent (in its own ids), its steps coded as indices."""

    def __init__(self, xp: Explorer, symmetry: bool, check_live: bool) -> None:
        self.xp, self.symmetry, self.check_live = xp, symmetry, check_live
        self.g2l, self.f2l = list(range(len(xp.globals))), list(range(len(xp.families)))  # master id -> ours
        self.reported = [len(xp.globals), len(xp.families)]  # ours the coordinator has
        self.states: list[tuple[int, ...]] = []
        self.known: dict[tuple[int, ...], int] = {}
        self.coded: dict[tuple[int, int], list[tuple[Code, Step, int, int, tuple[Any, ...], bool]]] = {}
        self.engine_codes: dict[int, dict[int, tuple[int, bool]]] = {}
        self.family_codes: dict[tuple[int, int], dict[int, int]] = {}

    def take(self, globals_: list[Any], families: list[Any], states: list[tuple[int, ...]]) -> None:
        """Learn the master parts and states the coordinator made since its last chunk for us."""
        xp = self.xp
        self.g2l.extend(xp.intern_global(g) for g in globals_)
        self.f2l.extend(xp.intern_family(f) for f in families)
        g2l, f2l, known, ours = self.g2l, self.f2l, self.known, self.states
        for s in states:
            local = (g2l[s[0]], *[f2l[f] for f in s[1:]])
            known[symmetric(local) if self.symmetry else local] = len(ours)
            ours.append(local)

    def _local(self, gid: int, fid: int) -> list[tuple[Code, Step, int, int, tuple[Any, ...], bool]]:
        xp = self.xp
        index: dict[Step, int] = {}
        for k, step in enumerate(xp.family_steps(gid, fid)):
            index.setdefault(step, k)
        got = xp.local_memo.get((gid, fid))
        steps = xp.local(gid, fid) if got is None else got
        coded = self.coded[gid, fid] = [(index.get(s, s), s, g2, f2, v, p) for s, g2, f2, v, p in steps]
        return coded

    def _engine(self, gid: int) -> dict[int, tuple[int, bool]]:
        codes = self.engine_codes[gid] = {id(s): (k, is_progress(s)) for k, s in enumerate(self.xp.engine_events(gid))}
        return codes

    def _family(self, gid: int, fid: int) -> dict[int, int]:
        codes = self.family_codes[gid, fid] = {id(s): k for k, s in enumerate(self.xp.family_steps(gid, fid))}
        return codes

    def expand(self, a: int, b: int) -> Chunk:
        """Expand states ``a`` to ``b - 1``; return what the coordinator merges (see ``_Coordinator.merge``)."""
        xp, states, known, symmetry, check_live = self.xp, self.states, self.known, self.symmetry, self.check_live
        calls = dict(xp.calls)
        edges_of, goals, finish, verified = array("I"), array("I"), [], array("I")
        cands: list[tuple[int, ...]] = []
        firsts, bad = array("I"), bytearray()
        parents: list[tuple[int, Code]] = []  # (family, step code) of the edge that first reached each candidate
        violated: list[tuple[int, int, Code, tuple[Any, ...]]] = []
        src, tgt = array("I"), array("i")  # progress edges: target a state number, or ~candidate
        cand_of: dict[tuple[int, ...], int] = {}
        targets: set[int] = set()
        edges = 0
        sid = a

        def edge(family: int, code: Code, nxt: tuple[int, ...], violations: tuple[Any, ...], prog: bool) -> None:
            key = symmetric(nxt) if symmetry else nxt
            t = known.get(key)
            if t is None:
                t = cand_of.get(key)
                if t is None:
                    t = cand_of[key] = ~len(cands)
                    cands.append(nxt)
                    firsts.append(sid)
                    parents.append((family, code))
                    bad.append(1 if violations else 0)
            if violations:
                violated.append((sid, family, code, violations))
            if check_live and prog and t not in targets:  # a progress edge counts once for liveness
                targets.add(t)
                src.append(sid)
                tgt.append(t)

        reduction, sample_every, whole_step = xp.reduction, xp.sample_every, xp.whole_step
        coded, engine_codes = self.coded, self.engine_codes
        for sid in range(a, b):
            state = states[sid]
            gid = state[0]
            before = edges
            targets.clear()
            if xp.all_ended(state):
                goals.append(sid)
                ended = xp.finish_violations(state)
                if ended:
                    finish.append((sid, ended))
            if not reduction:
                for family, step, nxt, violations, prog in xp.full_successors(state):
                    if family:
                        codes = self.family_codes.get((gid, state[family]))
                        k = (self._family(gid, state[family]) if codes is None else codes)[id(step)]
                    else:
                        engine = engine_codes.get(gid)
                        k = (self._engine(gid) if engine is None else engine)[id(step)][0]
                    edges += 1
                    edge(family, k, nxt, violations, prog)
            else:
                if sample_every and sid % sample_every == 0:
                    xp.verify(state, symmetry)
                    verified.append(sid)
                rest = state[1:]
                for i in range(1, len(state)):
                    steps = coded.get((gid, state[i]))
                    if steps is None:
                        steps = self._local(gid, state[i])
                    head, tail = rest[: i - 1], rest[i:]
                    for code, step, g2, f2, violations, prog in steps:
                        if g2 == ESCAPES:  # the reduction cannot compute it alone: on the whole state
                            whole = whole_step(state, i, step)
                            if whole is None:
                                continue
                            nxt, violations = whole
                        else:
                            nxt = (g2, *head, f2, *tail)
                        edges += 1
                        edge(i, code, nxt, violations, prog)
                engine = engine_codes.get(gid)
                if engine is None:
                    engine = self._engine(gid)
                for step, nxt, violations in xp.engine_successors(state):
                    k, prog = engine[id(step)]
                    edges += 1
                    edge(0, k, nxt, violations, prog)
            edges_of.append(edges - before)
        new_g, new_f = xp.globals[self.reported[0] :], xp.families[self.reported[1] :]
        self.reported = [len(xp.globals), len(xp.families)]
        spent = {k: v - calls.get(k, 0) for k, v in xp.calls.items()}
        return (edges_of, goals, finish, cands, firsts, parents, bad, violated, src, tgt, new_g, new_f, spent,
                verified)  # fmt: skip


def _work(tasks: multiprocessing.Queue[Any], results: Connection, others: list[Connection], coordinator: int,
          xp: Explorer, symmetry: bool, check_live: bool) -> None:  # fmt: skip
    """A worker's life: expand each chunk it is sent, until told to stop or the coordinator is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle: it ends us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for other in others:  # the other workers' result pipes, inherited: ours to close
        other.close()
    expander = _Expander(xp, symmetry, check_live)
    while True:
        try:
            task = tasks.get(timeout=ORPHAN_CHECK)
        except queue.Empty:
            if os.getppid() != coordinator:  # the coordinator was killed: nobody will end us
                return
            continue
        if task is None:
            return
        try:
            a, b, globals_, families, states = task
            expander.take(globals_, families, states)
            out: tuple[str, Any] = ("ok", expander.expand(a, b))
        except BaseException as exc:  # sent to the coordinator, which raises it if the serial search would have
            out = ("error", _sendable(exc))
        try:
            results.send(out)
        except OSError:  # the coordinator is gone
            return


def _sendable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # an exception that does not survive pickling: its type and message do
        return InternalError(f"in an explorer worker: {type(exc).__name__}: {exc}")
    return exc


# -- the workers, seen from the coordinator --------------------------------------------------------------


class _Pool:
    """The worker processes (forked), a task queue to each (its feeder thread sends, so the coordinator never
    blocks on a worker that is itself blocked sending a result) and a result pipe from each."""

    def __init__(self, xp: Explorer, workers: int, symmetry: bool, check_live: bool) -> None:
        try:
            ctx = multiprocessing.get_context("fork")
        except ValueError:
            raise ConfigError("workers > 1 needs the 'fork' start method (Linux, macOS)") from None
        self.tasks: list[multiprocessing.Queue[Any]] = [ctx.Queue() for _ in range(workers)]
        pipes = [ctx.Pipe(duplex=False) for _ in range(workers)]  # (ours to read, theirs to write)
        self.conns = [mine for mine, _ in pipes]
        self.procs: list[BaseProcess] = []
        try:
            for w, (_, theirs) in enumerate(pipes):
                others = [c for v, pair in enumerate(pipes) for c in pair if v != w] + [self.conns[w]]
                proc = ctx.Process(target=_work, args=(self.tasks[w], theirs, others, os.getpid(), xp, symmetry,
                                                       check_live), name=f"omni-fsm-explore-{w}", daemon=True)
                proc.start()
                self.procs.append(proc)
        except BaseException:  # a fork refused, or Ctrl-C meanwhile: the ones started end now
            self.close()
            raise
        finally:
            for _, theirs in pipes:
                theirs.close()

    def send(self, w: int, task: Any) -> None:
        """Queue ``task`` for worker ``w`` (never blocks: the queue's thread sends it)."""
        self.tasks[w].put(task)

    def receive(self) -> list[tuple[int, tuple[str, Any]]]:
        """Wait for results; return (worker, result) for each that came. ``InternalError`` if a worker died."""
        sentinels = {p.sentinel: w for w, p in enumerate(self.procs)}
        ready = wait([*self.conns, *sentinels])
        got: list[tuple[int, tuple[str, Any]]] = []
        for w, conn in enumerate(self.conns):
            if conn in ready:
                with contextlib.suppress(EOFError, OSError):  # a worker gone: said below, with its exit code
                    got.append((w, conn.recv()))
        if not got:
            for sentinel in ready:
                if sentinel in sentinels:
                    proc = self.procs[sentinels[sentinel]]
                    proc.join(timeout=5)  # ended: reaped, for its exit code
                    raise InternalError(f"explorer worker {proc.name} (pid {proc.pid}) ended unexpectedly "
                                        f"(exit code {proc.exitcode})")
        return got

    def close(self) -> None:
        """End every worker now and wait for it (nothing of theirs is needed any more); close the queues."""
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join()
        for conn in self.conns:
            conn.close()
        for tasks in self.tasks:
            tasks.cancel_join_thread()  # what is still queued for a worker that is gone is dropped
            tasks.close()

    @property
    def pids(self) -> list[int]:
        """Return the workers' process ids."""
        return [p.pid for p in self.procs if p.pid is not None]


# -- the coordinator: the serial search's bookkeeping, fed chunk by chunk --------------------------------


class _Coordinator:
    """What the serial search keeps, merged in its order from the workers' chunks."""

    def __init__(self, xp: Explorer, workers: int, symmetry: bool, check_live: bool, max_states: int | None,
                 progress: Callable[[int, int, float], None] | None, stop: Callable[[], str | None] | None,
                 first_violation: bool = False) -> None:  # fmt: skip
        self.xp, self.symmetry, self.check_live, self.max_states = xp, symmetry, check_live, max_states
        self.progress, self.stop, self.first_violation = progress, stop, first_violation
        self.start = time.perf_counter()
        init = xp.initial()
        self.states: list[tuple[int, ...]] = [init]
        self.ids: dict[tuple[int, ...], int] = {symmetric(init) if symmetry else init: 0}
        self.parent, self.family = array("i", [-1]), array("H", [0])  # parent links: (parent, family, code)
        self.code: list[Code] = [0]
        self.depths = array("I", [0])
        self.found: dict[str, Counterexample] = {}
        self.preds: list[list[int]] = [[]] if check_live else []
        self.goals: list[int] = []
        self.bad: set[int] = set()
        self.edges = self.ended_states = self.verified = 0
        self.calls: dict[str, int] = {}
        self.sid = 0  # the next state to merge
        self.stopped: str | None = None
        self.l2g = [list(range(len(xp.globals))) for _ in range(workers)]  # a worker's id -> master id
        self.l2f = [list(range(len(xp.families))) for _ in range(workers)]
        self.sent = [[len(xp.globals), len(xp.families), 0] for _ in range(workers)]  # what each worker has

    def task(self, w: int, a: int, b: int) -> tuple[Any, ...]:
        """Return worker ``w``'s task for states ``a`` to ``b - 1``, with the parts and states it has not seen."""
        xp, sent = self.xp, self.sent[w]
        task = (a, b, xp.globals[sent[0] :], xp.families[sent[1] :], self.states[sent[2] :])
        sent[:] = [len(xp.globals), len(xp.families), len(self.states)]
        return task

    def __getitem__(self, sid: int) -> tuple[int, int, Step | None]:
        """Return the parent link of state ``sid``: (parent, family, step), (-1, 0, None) for the first state."""
        parent, family, code = self.parent[sid], self.family[sid], self.code[sid]
        if parent < 0:
            return -1, 0, None
        return parent, family, self._step(parent, family, code)

    def _counterexample(self, inv: str, msg: str, sid: int, last: tuple[int, Code] | None = None) -> None:
        if inv in self.found:
            return
        events = shortest_path(self, sid, self.xp.bound.block)
        if last is not None:
            family, code = last
            step = self._step(sid, family, code)
            events = (*events, *flat_events(rebase(step, (family - 1) * self.xp.bound.block if family else 0)))
        self.found[inv] = Counterexample(inv, msg, events)

    def _step(self, sid: int, family: int, code: Code) -> Step:
        if not isinstance(code, int):
            return code
        g, *fams = self.states[sid]
        return (self.xp.family_steps(g, fams[family - 1]) if family else self.xp.engine_events(g))[code]

    def merge(self, w: int, a: int, b: int, chunk: Chunk) -> bool:
        """Merge worker ``w``'s expansion of states ``a`` to ``b - 1``, state by state as the serial search met
        them; return False where the search stops (``max_states``, ``stop()``), with ``stopped`` saying why."""
        (edges_of, goals, finish, cands, firsts, parents, bad, violated, src, tgt, new_g, new_f, spent,
         verified) = chunk  # fmt: skip
        xp, states, ids, symmetry = self.xp, self.states, self.ids, self.symmetry
        lg, lf = self.l2g[w], self.l2f[w]
        lg.extend(xp.intern_global(g) for g in new_g)
        lf.extend(xp.intern_family(f) for f in new_f)
        for k, v in spent.items():
            self.calls[k] = self.calls.get(k, 0) + v
        nids: list[int] = []  # candidate -> state number
        ci = gi = fi = vi = si = 0
        for sid in range(a, b):
            if self.max_states is not None and len(states) >= self.max_states:
                self.stopped = f"--max-states {self.max_states:,} reached"
                return False
            if si < len(verified) and verified[si] == sid:
                si += 1
                self.verified += 1
            if gi < len(goals) and goals[gi] == sid:
                gi += 1
                self.goals.append(sid)
                self.ended_states += 1
                if fi < len(finish) and finish[fi][0] == sid:
                    for inv, msg in finish[fi][1]:
                        self._counterexample(inv, msg, sid)
                    fi += 1
            self.edges += edges_of[sid - a]
            while ci < len(cands) and firsts[ci] == sid:
                c = cands[ci]
                nxt = (lg[c[0]], *[lf[f] for f in c[1:]])
                key = symmetric(nxt) if symmetry else nxt
                nid = ids.get(key)
                if nid is None:
                    nid = ids[key] = len(states)
                    states.append(nxt)
                    family, code = parents[ci]
                    self.parent.append(sid)
                    self.family.append(family)
                    self.code.append(code)
                    self.depths.append(self.depths[sid] + 1)
                    if self.check_live:
                        self.preds.append([])
                    if bad[ci]:
                        self.bad.add(nid)
                nids.append(nid)
                ci += 1
            while vi < len(violated) and violated[vi][0] == sid:
                _, family, code, violations = violated[vi]
                for inv, msg in violations:
                    self._counterexample(inv, msg, sid, (family, code))
                vi += 1
            self.sid = sid + 1
            if self.first_violation and self.found:
                self.stopped = FIRST_VIOLATION
                return False
            if self.sid % ASK_EVERY == 0:
                if self.progress is not None and self.sid % TICK == 0:
                    self.progress(len(states), self.edges, time.perf_counter() - self.start)
                if self.stop is not None:
                    self.stopped = self.stop()
                    if self.stopped is not None:
                        return False
        if self.check_live:
            preds = self.preds
            for s, t in zip(src, tgt, strict=True):
                preds[t if t >= 0 else nids[~t]].append(s)
        return True


def parallel_search(xp: Explorer, workers: int, symmetry: bool, liveness: bool,
                    progress: Callable[[int, int, float], None] | None, on_phase: Callable[[str], None] | None,
                    max_states: int | None = None, stop: Callable[[], str | None] | None = None,
                    on_start: Callable[[list[int]], None] | None = None, first_violation: bool = False) -> Report:
    """Search as ``search.search`` does, the states expanded by ``workers`` processes; return the same report
    (its evaluations summed over the workers). ``on_start(pids)`` is told the workers' process ids."""
    check_live = liveness and not symmetry
    co = _Coordinator(xp, workers, symmetry, check_live, max_states, progress, stop, first_violation)
    pool = _Pool(xp, workers, symmetry, check_live)
    try:
        if on_start is not None:
            on_start(pool.pids)
        _run(co, pool, workers)
    finally:
        pool.close()
    states, edges = len(co.states), co.edges

    def report_counts() -> None:
        if progress is not None:
            progress(states, edges, time.perf_counter() - co.start)

    report_counts()
    check_live = check_live and co.stopped is None
    if check_live and on_phase is not None:
        on_phase("checking liveness")
    block = xp.bound.block
    stuck = liveness_stuck(states, co, co.goals, co.preds, co.bad, block, report_counts) if check_live else None
    seconds = time.perf_counter() - co.start
    invariants = tuple(sorted({c.invariant for c in CHECKS.values()}))
    calls = {k: xp.calls.get(k, 0) + co.calls.get(k, 0) for k in xp.calls}
    return Report(states, edges, seconds, invariants, check_live, stuck,
                  tuple(sorted(co.found.values(), key=lambda c: (len(c.events), c.invariant))), symmetry,
                  xp.reduction, calls, co.verified, co.ended_states, co.depths[co.sid - 1] if co.sid else 0,
                  co.stopped)  # fmt: skip


def _run(co: _Coordinator, pool: _Pool, workers: int) -> None:
    """Hand out chunks of known states, merge the results in order, until every state is expanded or a stop."""
    in_flight: deque[tuple[int, int, int]] = deque()  # (worker, first, end), in merge order
    in_hand = [0] * workers
    results: dict[int, tuple[str, Any]] = {}
    next_sid = 0
    while True:
        while next_sid < len(co.states):
            w = min(range(workers), key=in_hand.__getitem__)
            if in_hand[w] >= IN_HAND:
                break
            waiting = len(co.states) - next_sid
            end = next_sid + min(CHUNK, waiting, max(1, -(-waiting // (workers * IN_HAND))))
            pool.send(w, co.task(w, next_sid, end))
            in_flight.append((w, next_sid, end))
            in_hand[w] += 1
            next_sid = end
        if not in_flight:
            return
        for w, result in pool.receive():
            in_hand[w] -= 1
            results[next(a for v, a, _ in in_flight if v == w and a not in results)] = result
        while in_flight and in_flight[0][1] in results:
            w, a, b = in_flight.popleft()
            kind, value = results.pop(a)
            if kind == "error":
                raise value
            if not co.merge(w, a, b, value):
                return
