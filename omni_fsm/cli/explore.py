"""``omni-fsm explore``: the bounded exhaustive explorer's command line (a thin shell).

Says on stderr, before it starts, about how many states the bound has (measured on one request,
extrapolated), then its progress while it runs (states, states per second, memory: a line rewritten
in place on a terminal, else a plain line every few seconds, liveness phase included); stops cleanly
at ``--max-states`` or ``--max-memory``. Then prints the report, whose last line is
``explore: states=... edges=... evaluations=... seconds=... edges_per_s=... reachable_invariants=N/M``
(`` workers=N`` appended when ``--workers`` runs more than one process), and writes each shortest
counterexample as a complete trace file that ``omni-fsm check`` reads.
Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import attrs

from omni_fsm.engine.core import Lifecycle
from omni_fsm.errors import InternalError, LifecycleError
from omni_fsm.explore.explorer import (
    DEFAULT_FAMILIES,
    FAMILIES,
    SAMPLE_EVERY,
    Bound,
    Counterexample,
    Report,
    UnsoundReduction,
    explore,
)
from omni_fsm.explore.parallel import cores
from omni_fsm.explore.reach import NEEDS, reachable
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.table import SPEC, Spec
from omni_fsm.spec.vocabulary import stage_kinds

#: Seconds between progress lines: rewritten in place on a terminal, else one plain line each.
PROGRESS_EVERY_TTY, PROGRESS_EVERY = 1.0, 5.0
#: A counterexample replayed on the core: its (event, observations) steps.
Replayed = list[tuple[ev.Event, list[ob.Observation]]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the explorer's options (defaults: the project's default bound)."""
    d = Bound()
    parser.add_argument("--requests", type=int, default=d.requests, help="client requests (default %(default)s)")
    parser.add_argument("--stages", type=int, default=d.stages, help="pipeline stages (default %(default)s)")
    parser.add_argument("--final-stages", type=int, default=d.final_stages,
                        help="final-output stages: the last one plus the first N-1 (default %(default)s)")
    parser.add_argument("--kinds", default="", help="stage kinds, comma-separated: ar,diffusion (default: all ar)")
    parser.add_argument("--n", type=int, default=d.n, help="samples per request (parallel sampling)")
    parser.add_argument("--companions", type=int, default=d.companions, help="CFG companions per request")
    parser.add_argument("--capacity", type=int, default=d.capacity, help="running slots per stage")
    parser.add_argument("--max-tokens", type=int, default=d.max_tokens, help="outputs per request and stage")
    parser.add_argument("--families", default=",".join(sorted(DEFAULT_FAMILIES)),
                        help="event families to include, or 'all' (default: all but abort_race): "
                        + ",".join(FAMILIES))
    parser.add_argument("--without", default="", help="event families to leave out, comma-separated")
    parser.add_argument("--symmetry", action="store_true",
                        help="treat requests as interchangeable: faster, safety only (no liveness)")
    parser.add_argument("--no-liveness", action="store_true", help="skip the liveness check")
    parser.add_argument("--no-reduction", action="store_true",
                        help="compute every successor on the whole state (no per-family memo): the definition")
    parser.add_argument("--spec", default="", metavar="PKG.MOD:NAME",
                        help="explore this Spec instead of the project's (a module importable from here)")
    parser.add_argument("--max-states", type=int, default=None, metavar="N",
                        help="stop cleanly once N states are known (no liveness check then)")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="stop cleanly once the process uses SIZE of memory: 500M, 4G (no liveness check then)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where counterexample traces go")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="expand states in N processes, 0: one per core (default 1); the same states, edges "
                        "and verdicts as one")


def bound_from_args(args: argparse.Namespace) -> Bound:
    """Return the ``Bound`` the options describe; ``ValueError`` names a bad option."""
    named = {f for f in args.families.split(",") if f}
    families = (set(FAMILIES) if "all" in named else named) - {f for f in args.without.split(",") if f}
    unknown = families - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown event families: {', '.join(sorted(unknown))}")
    try:
        kinds = stage_kinds(k.strip() for k in args.kinds.split(",") if k.strip())
    except ValueError as exc:
        raise ValueError(f"--kinds: {exc}") from None
    for flag, value, least in (("--requests", args.requests, 1), ("--stages", args.stages, 1),
                               ("--final-stages", args.final_stages, 1), ("--n", args.n, 1),
                               ("--companions", args.companions, 0), ("--capacity", args.capacity, 1),
                               ("--max-tokens", args.max_tokens, 0)):  # fmt: skip
        if value < least:
            raise ValueError(f"{flag} must be at least {least}")
    if args.final_stages > args.stages:
        raise ValueError(f"--final-stages must be at most --stages ({args.stages})")
    if kinds and len(kinds) != args.stages:
        raise ValueError(f"--kinds names {len(kinds)} stage kinds for --stages {args.stages}")
    bound = Bound(args.requests, args.stages, args.final_stages, args.n, args.companions, args.capacity,
                  args.max_tokens, kinds, frozenset(families))
    bound.pipeline()  # validates stages / kinds / final stages
    return bound


def main(args: argparse.Namespace) -> int:
    """Run the exploration; return 0 (all held), 1 (a violation), 2 (bad options, --out unwritable) or 3 (a bug)."""
    try:
        bound = bound_from_args(args)
        spec = load_spec(args.spec) if args.spec else SPEC
        max_memory = parse_size(args.max_memory) if args.max_memory else None
        if args.max_states is not None and args.max_states < 1:
            raise ValueError("--max-states must be at least 1")
        if args.workers < 0:
            raise ValueError("--workers must be 0 (one per core) or more")
        workers = args.workers or cores()
    except ValueError as exc:
        print(f"omni-fsm explore: {exc}", file=sys.stderr)
        return 2
    problem = _unwritable(args.out)
    if problem is not None:  # said before the search, not after it found something to write
        print(f"omni-fsm explore: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    reduction = not args.no_reduction
    try:
        print(estimate(bound, spec, reduction), file=sys.stderr)
        with ProgressLine(sys.stderr) as progress:
            report = explore(bound, spec, symmetry=args.symmetry, liveness=not args.no_liveness,
                             progress=progress.update, on_phase=progress.set_phase, reduction=reduction,
                             max_states=args.max_states, stop=memory_limit(max_memory), workers=workers)  # fmt: skip
    except UnsoundReduction as exc:
        print(f"omni-fsm explore: the reduction is unsound for this spec: {exc}", file=sys.stderr)
        return 3
    except InternalError as exc:  # the core stopped on a step (a spec whose effects contradict its rows)
        print(f"omni-fsm explore: internal error: {exc}", file=sys.stderr)
        return 3
    print_report(report, bound, sys.stdout, args.spec or "the project's (omni_fsm.SPEC)")
    for cx in (*report.violations, *([report.stuck] if report.stuck else [])):
        path = args.out / f"counterexample-{cx.invariant}.trace.jsonl"
        try:
            write_counterexample(path, bound, cx, spec)
        except OSError as exc:
            print(f"omni-fsm explore: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except InternalError as exc:  # the core refuses a step the explorer took: a bug, said in one line
            print(f"omni-fsm explore: internal error: {exc}", file=sys.stderr)
            return 3
        print(f"  trace written: {path}")
    print(summary_line(report, bound) + (f" workers={workers}" if workers > 1 else ""))
    return 0 if report.ok else 1


def load_spec(name: str) -> Spec:
    """Return the ``Spec`` named ``PKG.MOD:NAME`` (the current directory importable); ``ValueError`` says why not."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--spec {name}: expected PKG.MOD:NAME, for example tests.fsm.faults:CROSS_FAILURE")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error, or whatever the module raises as it loads
        raise ValueError(f"--spec {name}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    value = getattr(module, attr, None)
    if not isinstance(value, Spec):
        got = "nothing" if value is None else type(value).__name__
        raise ValueError(f"--spec {name}: {module_name} has no Spec named {attr} (found {got})")
    return value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Return the bytes ``text`` names (``500M``, ``4G``, ``2.5GiB``; a bare number is MiB); ``ValueError`` if none."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"--max-memory wants a size such as 500M or 4G, got {text!r}")
    unit = match.group(2).upper() or "M"
    return int(float(match.group(1)) * 1024 ** "BKMGT".index(unit))


def memory_used() -> int:
    """Return the resident memory in bytes of this process and its children (the explorer's workers; pages they
    share are counted in each), or this process's peak where the current size cannot be read."""
    try:
        return sum(_resident(pid) for pid in ("self", *_children()))
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _resident(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except FileNotFoundError:  # a child that ended meanwhile
        if pid == "self":
            raise
        return 0


def _children() -> list[str]:
    """Return this process's children's ids (none where the kernel does not list them)."""
    found: list[str] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                found.extend(f.read().split())
    except OSError:
        pass
    return found


def memory_limit(limit: int | None) -> Callable[[], str | None] | None:
    """Return the search's ``stop`` callback for ``--max-memory`` (``None``: no limit)."""
    if limit is None:
        return None

    def stop() -> str | None:
        used = memory_used()
        if used < limit:
            return None
        return f"--max-memory {limit / 2**20:,.0f} MiB reached ({used / 2**20:,.0f} MiB used)"

    return stop


def estimate(bound: Bound, spec: Spec, reduction: bool) -> str:
    """Return a line saying about how many states ``bound`` has: one request's states explored (quickly), raised to
    the number of requests over its factorial (requests interleave as a multiset; measured within 2x here)."""
    one = explore(attrs.evolve(bound, requests=1), spec, liveness=False, reduction=reduction)
    r = bound.requests
    guess = one.states ** r / math.factorial(r) if r > 1 else one.states
    how = f"{one.states:,} states for one request" + (f"; {one.states:,}^{r}/{r}!" if r > 1 else "")
    return f"estimate: about {guess:,.0f} states ({how})"


def bound_flags(bound: Bound) -> str:
    """Return the ``omni-fsm explore`` options that select ``bound``."""
    d = Bound()
    flags = [f"--requests {bound.requests}", f"--stages {bound.stages}"]
    for flag, value, default in (("--final-stages", bound.final_stages, d.final_stages), ("--n", bound.n, d.n),
                                 ("--companions", bound.companions, d.companions),
                                 ("--capacity", bound.capacity, d.capacity),
                                 ("--max-tokens", bound.max_tokens, d.max_tokens)):  # fmt: skip
        if value != default:
            flags.append(f"{flag} {value}")
    if bound.kinds:
        flags.append("--kinds " + ",".join(k.value for k in bound.kinds))
    if bound.families != DEFAULT_FAMILIES:
        flags.append("--families " + ",".join(sorted(bound.families)))
    return " ".join(flags)


def summary_line(report: Report, bound: Bound) -> str:
    """Return the report's last line: what was measured, and how many invariants this bound can make fire."""
    can = reachable(bound)[0]
    rate = report.edges / report.seconds if report.seconds else 0.0
    evaluations = sum(report.evaluations.values())
    return (f"explore: states={report.states} edges={report.edges} evaluations={evaluations} "
            f"seconds={report.seconds:.1f} edges_per_s={rate:.0f} reachable_invariants={len(can)}/{len(NEEDS)}")


def _unwritable(folder: Path) -> str | None:
    """Return why counterexample traces cannot be written into ``folder`` (``None``: they can)."""
    from omni_fsm.trace.jsonl import make_folder

    try:
        make_folder(folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not os.access(folder, os.W_OK | os.X_OK):
        return "not writable"
    return None


class ProgressLine:
    """Shows ``PHASE: S states (R/s), E edges, T s, M MiB`` on ``stream`` while the explorer runs.

    Driven by the explorer's own callbacks, no thread: ``update`` takes the latest counts (the
    explorer calls it every few thousand states, through the liveness check too) and writes a
    line once ``every`` seconds have passed since the last; ``set_phase`` names the next phase
    (``checking liveness``). On a terminal the line is rewritten in place every second;
    elsewhere (a log, CI) it is a plain line every ``PROGRESS_EVERY`` seconds.
    """

    def __init__(self, stream: TextIO, every: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 memory: Callable[[], int] = memory_used) -> None:  # fmt: skip
        self.stream, self.tty = stream, stream.isatty()
        self.every = every if every is not None else PROGRESS_EVERY_TTY if self.tty else PROGRESS_EVERY
        self.phase = "exploring"
        self.shown = False
        self._clock, self._memory = clock, memory
        self._started = self._last = clock()

    def update(self, states: int, edges: int, seconds: float) -> None:
        """Take the explorer's latest counts (its ``progress`` callback); show them if it is time."""
        now = self._clock()
        if now - self._last >= self.every:
            self._last = now
            took = now - self._started
            rate = states / took if took > 0 else 0.0
            line = (f"{self.phase}: {states:,} states ({rate:,.0f}/s), {edges:,} edges, {took:.0f} s, "
                    f"{self._memory() / 2**20:,.0f} MiB")
            self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
            self.stream.flush()
            self.shown = True

    def set_phase(self, phase: str) -> None:
        """Take the name of the explorer's next phase (its ``on_phase`` callback)."""
        self.phase = phase

    def __enter__(self) -> ProgressLine:
        self._started = self._last = self._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def print_report(report: Report, bound: Bound, out: TextIO, spec_name: str = "the project's (omni_fsm.SPEC)") -> None:
    """Print the exploration report: the bound, what was measured and judged, the verdicts (``summary_line`` after)."""
    kinds, final = bound.pipeline()
    shape = " -> ".join(f"{k.value}{'*' if f else ''}" for k, f in zip(kinds, final, strict=True))
    rate = report.edges / report.seconds if report.seconds else 0.0
    out.write(f"bound: {bound.requests} requests, pipeline {shape} (* = final output), n={bound.n}, "
              f"companions={bound.companions}, capacity={bound.capacity}, <= {bound.max_tokens} tokens/stage\n")
    out.write(f"families: {', '.join(sorted(bound.families))}\n")
    out.write(f"spec: {spec_name}\n")
    out.write(f"states: {report.states:,}  edges: {report.edges:,}  seconds: {report.seconds:.1f}  "
              f"edges/s: {rate:,.0f}{'  (symmetry reduced)' if report.symmetry else ''}\n")
    calls = report.evaluations
    out.write(f"evaluations: {calls.get('core', 0):,} of the core (Lifecycle.handle), {calls.get('monitor', 0):,} of "
              f"the monitor (Monitor.step and, on the {report.ended_states:,} states where nothing is live, "
              f"Monitor.finish)\n")
    if report.reduction:
        out.write(f"reduction: per-family memo; compared with the whole-state computation on {report.verified:,} "
                  f"states (every {SAMPLE_EVERY}th): they agreed\n")
    else:
        out.write("reduction: none (every successor computed on the whole state)\n")
    can, cannot = reachable(bound)
    out.write(f"invariants judged on every edge: {len(report.invariants)}; this bound can make {len(can)} of "
              f"{len(NEEDS)} fire\n")
    for inv, reaching in cannot.items():
        where = (f"a bound such as {bound_flags(reaching)}" if reaching is not None
                 else "no bound (no Spec breaks it: judged on traces and runtimes)")  # fmt: skip
        out.write(f"  {inv} cannot fire here ({NEEDS[inv].why}): {where}\n")
    if report.stopped is not None:
        out.write(f"stopped early: {report.stopped}; covered {report.states:,} states, every history of up to "
                  f"{max(report.depth - 1, 0)} steps; liveness not checked\n")
    elif report.liveness_checked:
        verdict = "holds" if report.stuck is None else "VIOLATED"
        out.write(f"liveness (every state can still end every request): {verdict}\n")
    else:
        out.write("liveness: not checked\n")
    for cx in report.violations:
        _print_counterexample(cx, out)
    if report.stuck is not None:
        _print_counterexample(report.stuck, out)
    out.write(f"violations: {len(report.violations) + (report.stuck is not None)}\n")


def _print_counterexample(cx: Counterexample, out: TextIO) -> None:
    out.write(f"\n{cx.invariant}: {cx.message}\n  shortest counterexample ({len(cx.events)} events):\n")
    for i, event in enumerate(cx.events, 1):
        out.write(f"  {i:3}. {event!r}\n")


def replay(bound: Bound, events: tuple[ev.Event, ...], spec: Spec = SPEC) -> Replayed:
    """Run ``events`` through a fresh core built on ``spec``; return the (event, observations) steps.

    Every event must replay: the explorer found them on the same core. ``InternalError`` names
    the first one the core refuses (the explorer and the core disagree: a bug, or another spec).
    """
    kinds, final = bound.pipeline()
    lc = Lifecycle(kinds, final, bound.capacity, spec)
    steps: Replayed = []
    for number, event in enumerate(events, 1):
        try:
            steps.append((event, list(lc.handle(event))))
        except LifecycleError as err:
            raise InternalError(f"cannot replay event {number} of {len(events)}, {event!r}: {err}") from None
    return steps


def write_counterexample(path: Path, bound: Bound, cx: Counterexample, spec: Spec = SPEC) -> None:
    """Write a counterexample, replayed on ``spec``, as a complete trace at ``path`` (``omni-fsm check`` reads it).

    The end marker says the history stops there: ``omni-fsm check`` applies the end-of-history
    rules, so the requests a LIVENESS counterexample leaves stuck are reported as never ended.
    ``InternalError`` if an event cannot be replayed; nothing is written then.
    """
    from omni_fsm.trace import write_trace

    kinds, final = bound.pipeline()
    try:
        steps = replay(bound, cx.events, spec)
    except InternalError as err:
        raise InternalError(f"counterexample {cx.invariant}: {err}") from None
    write_trace(path, kinds, final, bound.capacity, steps, complete=True)
