"""``omni-fsm explore --sweep``: the bounds of ``specs/sweep.toml``, explored one after another (a thin shell).

Prints each bound as it starts (its name, what it is for, its shape), then its counts and verdicts, its
counterexamples (each written as ``counterexample-<bound>-<ID>.trace.jsonl``), and, after the last, the
invariants no bound of the sweep can make fire, each with why; the last line is
``explore: bounds=... states=... edges=... evaluations=... seconds=... reachable_invariants=N/M``.
A limit or a signal stops the bound it meets with its report so far and runs no other: the sweep then says
which bounds it did not run and what share of the recorded states (``SweepBound.states``) it covered.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from omni_fsm.cli.counterexamples import write_counterexamples
from omni_fsm.cli.explore_report import PARTIAL, ProgressLine, describe, families_of, partial_line
from omni_fsm.cli.limits import Limits
from omni_fsm.errors import MalformedInput
from omni_fsm.explore.explorer import DEFAULT_FAMILIES, FAMILIES, Bound, Counterexample, Report
from omni_fsm.explore.reach import NEEDS, reachable
from omni_fsm.explore.sweep import SweepBound, SweepReport, reachable_in, sweep
from omni_fsm.registry import find_root
from omni_fsm.registry.toml_lines import Fields, Lines, loads, read
from omni_fsm.spec.table import SPEC, Spec
from omni_fsm.spec.vocabulary import stage_kinds

#: Where the sweep's bounds are, relative to the directory holding ``specs/`` (``omni_fsm.registry.find_root``).
SWEEP_FILE = "specs/sweep.toml"
_FIELDS = {"name", "why", "requests", "stages", "final_stages", "n", "companions", "capacity", "max_tokens", "kinds",
           "families", "without", "states"}  # fmt: skip


def parse_sweep(text: str, shown: str = SWEEP_FILE) -> tuple[SweepBound, ...]:
    """Return the bounds of a sweep file's ``text``; ``MalformedInput`` names ``shown`` and the line."""
    data = loads(text, shown)
    top = Fields(data, shown, None, 0, "sweep file")
    top.only({"bound"})
    lines = Lines(text, "bound")
    out: list[SweepBound] = []
    for i, table in enumerate(top.tables("bound")):
        f = Fields(table, shown, lines, i, f"bound {i + 1}")
        f.only(_FIELDS)
        name = f.text("name")
        if any(b.name == name for b in out):
            raise f.fail("name", f"name {name!r} is used twice")
        out.append(SweepBound(name, f.text("why"), _bound(f), f.integer("states")))
    if not out:
        raise MalformedInput(shown, 1, "no [[bound]] tables")
    return tuple(out)


def _bound(f: Fields) -> Bound:
    d = Bound()
    values = {key: f.integer(key) if key in f.data else getattr(d, key)
              for key in ("requests", "stages", "final_stages", "n", "companions", "capacity", "max_tokens")}
    named = set(f.texts("families")) if "families" in f.data else set(DEFAULT_FAMILIES)
    families = (set(FAMILIES) if "all" in named else named) - set(f.texts("without"))
    unknown = sorted(families - set(FAMILIES))
    if unknown:
        raise f.fail("families", f"unknown event families: {', '.join(unknown)}")
    try:
        kinds = stage_kinds(f.texts("kinds"))
        bound = Bound(**values, kinds=kinds, families=frozenset(families))
        bound.pipeline()
        if bound.requests < 1 or bound.n < 1 or bound.companions < 0 or bound.capacity < 1 or bound.max_tokens < 0:
            raise ValueError("requests, n and capacity must be at least 1, companions and max_tokens at least 0")
    except ValueError as exc:
        raise f.fail(None, str(exc)) from None
    return bound


def load(only: str) -> tuple[SweepBound, ...]:
    """Return the sweep's bounds (``only``: the comma-separated names kept); ``ValueError`` names an unknown one,
    ``MalformedInput`` the file and line of a malformed one."""
    bounds = parse_sweep(read(find_root() / SWEEP_FILE, SWEEP_FILE))
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in {b.name for b in bounds}]
    if unknown:
        raise ValueError(f"--only: {', '.join(unknown)} is no bound of {SWEEP_FILE} "
                         f"({', '.join(b.name for b in bounds)})")  # fmt: skip
    return tuple(b for b in bounds if b.name in names) if names else bounds


def run(args: argparse.Namespace, spec: Spec, spec_name: str, limits: Limits, workers: int) -> int:
    """Run the sweep and print it; return 0 (all held), 1 (a violation), 2 (a malformed sweep file, a trace that
    cannot be written), 3 (a bug) or 4 (partial: stopped early, no violation found)."""
    try:
        bounds = load(args.only)
    except (MalformedInput, ValueError) as exc:
        print(f"omni-fsm explore: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout
    out.write(f"sweep: {len(bounds)} bounds ({SWEEP_FILE}), spec: {spec_name}\n")
    out.flush()
    written: list[int] = []

    def on_bound(i: int, sb: SweepBound) -> None:
        out.write(f"\n[{i + 1}/{len(bounds)}] {sb.name}: {sb.why}\n  bound: {describe(sb.bound)}\n"
                  f"  families: {families_of(sb.bound)}\n")  # fmt: skip
        out.flush()

    def on_report(i: int, sb: SweepBound, report: Report) -> None:
        print_bound(report, sb, out)
        if spec is SPEC and not report.partial and report.states != sb.states:  # the recorded size is stale
            out.write(f"  note: {SWEEP_FILE} records {sb.states} states for {sb.name}: write {report.states}\n")
        code = write_counterexamples(report, sb.bound, spec, args.out, out, prefix=f"counterexample-{sb.name}-")
        if code:
            written.append(code)
        out.flush()

    with ProgressLine(sys.stderr) as progress:
        result = sweep(bounds, spec, liveness=not args.no_liveness, workers=workers, stop=limits,
                       max_states=args.max_states,
                       on_bound=on_bound, on_report=on_report, progress=progress.update,
                       on_phase=progress.set_phase)  # fmt: skip
    if written:
        return written[0]
    print_total(result, out)
    return 1 if not result.ok else PARTIAL if result.partial else 0


def print_bound(report: Report, sb: SweepBound, out: TextIO) -> None:
    """Print one bound's counts and verdicts, and its counterexamples."""
    can = reachable(sb.bound)[0]
    found = len(report.violations) + (report.stuck is not None)
    live = ("holds" if report.stuck is None else "VIOLATED") if report.liveness_checked else "not checked"
    out.write(f"  states={report.states} edges={report.edges} evaluations={sum(report.evaluations.values())} "
              f"seconds={report.seconds:.1f} violations={found} liveness={live} "
              f"reachable_invariants={len(can)}/{len(NEEDS)}\n")  # fmt: skip
    if report.stopped is not None:
        out.write(f"  stopped early: {report.stopped}; every history of up to {max(report.depth - 1, 0)} steps\n")
        out.write(f"  {partial_line(report, sb.states, of='its recorded')}\n")
    for cx in (*report.violations, *([report.stuck] if report.stuck else [])):
        _print_counterexample(cx, out)


def _print_counterexample(cx: Counterexample, out: TextIO) -> None:
    out.write(f"  {cx.invariant}: {cx.message}\n    shortest counterexample ({len(cx.events)} events):\n")
    for i, event in enumerate(cx.events, 1):
        out.write(f"    {i:3}. {event!r}\n")


def print_total(result: SweepReport, out: TextIO) -> None:
    """Print the sweep's totals: the bounds not run, the invariants no bound can make fire and why, the last line."""
    if result.partial:
        not_run = ", ".join(b.name for b in result.not_run) or "none"
        out.write(f"\npartial: {result.states:,} states, {result.edges:,} edges, {result.evaluations:,} evaluations, "
                  f"{result.violations} violations found so far, about {result.share():.0%} of the sweep's recorded "
                  f"states; bounds not run: {not_run}\n")  # fmt: skip
    can, cannot = reachable_in([b.bound for b, r in result.runs if not r.partial])  # what the bounds searched had
    out.write(f"\nthe sweep's bounds can make {len(can)} of {len(NEEDS)} invariants fire; not the others:\n"
              if cannot else f"\nthe sweep's bounds can make every one of the {len(NEEDS)} invariants fire\n")
    for inv, reaching in cannot.items():
        where = "no Spec breaks it" if reaching is None else "no bound of the sweep has what it needs"
        out.write(f"  {inv} ({where}): {NEEDS[inv].why}\n")
    out.write(f"explore: bounds={len(result.runs)} states={result.states} edges={result.edges} "
              f"evaluations={result.evaluations} seconds={result.seconds:.1f} "
              f"reachable_invariants={len(can)}/{len(NEEDS)}" + (" partial=yes" if result.partial else "") + "\n")


__all__ = ["SWEEP_FILE", "load", "parse_sweep", "print_bound", "print_total", "run"]
