"""What ``omni-fsm explore`` prints: the report of a search (complete or partial), its last line, its progress.

Shared by the one-bound command (``omni_fsm.cli.explore``) and the sweep (``omni_fsm.cli.sweep``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from omni_fsm.cli.limits import memory_used
from omni_fsm.explore.explorer import DEFAULT_FAMILIES, FAMILIES, SAMPLE_EVERY, Bound, Counterexample, Report
from omni_fsm.explore.reach import NEEDS, reachable

#: Seconds between progress lines: rewritten in place on a terminal, else one plain line each.
PROGRESS_EVERY_TTY, PROGRESS_EVERY = 1.0, 5.0
#: The exit status of a search stopped early (a limit, a signal) that found no violation so far.
PARTIAL = 4


def exit_code(report: Report) -> int:
    """Return the exit status a report earns: 1 a violation (complete or partial search), 4 partial, else 0."""
    return 1 if not report.ok else PARTIAL if report.partial else 0


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


def describe(bound: Bound) -> str:
    """Return the bound in words: requests, the pipeline, dependents, slots and tokens."""
    kinds, final = bound.pipeline()
    shape = " -> ".join(f"{k.value}{'*' if f else ''}" for k, f in zip(kinds, final, strict=True))
    return (f"{bound.requests} request{'s' if bound.requests > 1 else ''}, pipeline {shape} (* = final output), "
            f"n={bound.n}, companions={bound.companions}, capacity={bound.capacity}, <= {bound.max_tokens} "
            "tokens/stage")


def families_of(bound: Bound) -> str:
    """Return the bound's event families, comma-separated ('all' for every one)."""
    return "all" if bound.families == frozenset(FAMILIES) else ", ".join(sorted(bound.families))


def partial_line(report: Report, guess: float | None, of: str = "the estimated") -> str:
    """Return what a search stopped early saw: its counts, the violations found so far, and its share of ``guess``."""
    calls = sum(report.evaluations.values())
    found = len(report.violations)
    share = (f"about {min(report.states / guess, 1.0):.0%} of {of} {guess:,.0f} states" if guess
             else "its share unknown (no estimate)")
    return (f"partial: {report.states:,} states, {report.edges:,} edges, {calls:,} evaluations, {found} violation"
            f"{'' if found == 1 else 's'} found so far, {share}")


def print_report(report: Report, bound: Bound, out: TextIO, spec_name: str = "the project's (omni_fsm.SPEC)",
                 guess: float | None = None) -> None:  # fmt: skip
    """Print the exploration report: the bound, what was measured and judged, the verdicts (``summary_line`` after);
    ``guess``: the estimated states, for the share a partial search covered."""
    rate = report.edges / report.seconds if report.seconds else 0.0
    out.write(f"bound: {describe(bound)}\n")
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
        out.write(partial_line(report, guess) + "\n")
    elif report.liveness_checked:
        verdict = "holds" if report.stuck is None else "VIOLATED"
        out.write(f"liveness (every state can still end every request): {verdict}\n")
    else:
        out.write("liveness: not checked\n")
    for cx in report.violations:
        print_counterexample(cx, out)
    if report.stuck is not None:
        print_counterexample(report.stuck, out)
    out.write(f"violations: {len(report.violations) + (report.stuck is not None)}\n")


def print_counterexample(cx: Counterexample, out: TextIO) -> None:
    out.write(f"\n{cx.invariant}: {cx.message}\n  shortest counterexample ({len(cx.events)} events):\n")
    for i, event in enumerate(cx.events, 1):
        out.write(f"  {i:3}. {event!r}\n")


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


__all__ = ["PARTIAL", "PROGRESS_EVERY", "PROGRESS_EVERY_TTY", "ProgressLine", "bound_flags", "describe", "exit_code",
           "families_of", "partial_line", "print_counterexample", "print_report", "summary_line"]  # fmt: skip
