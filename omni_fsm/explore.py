"""``omni-fsm explore``: the bounded exhaustive explorer's command line (a thin shell).

Prints progress while it runs (on a terminal), then the report; writes each shortest
counterexample as a trace file that ``omni-fsm check`` reads. Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from omni_fsm import events as ev
from omni_fsm._explorer import DEFAULT_FAMILIES, FAMILIES, Bound, Counterexample, Report, explore
from omni_fsm._vocab import StageKind
from omni_fsm.core import Lifecycle
from omni_fsm.errors import LifecycleError


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
    parser.add_argument("--out", type=Path, default=Path("."), help="where counterexample traces go")


def bound_from_args(args: argparse.Namespace) -> Bound:
    """Return the ``Bound`` the options describe; ``ValueError`` names a bad option."""
    named = {f for f in args.families.split(",") if f}
    families = (set(FAMILIES) if "all" in named else named) - {f for f in args.without.split(",") if f}
    unknown = families - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown event families: {', '.join(sorted(unknown))}")
    kinds = tuple(StageKind(k.strip()) for k in args.kinds.split(",") if k.strip())
    if args.requests < 1 or args.n < 1 or args.companions < 0 or args.capacity < 1 or args.max_tokens < 0:
        raise ValueError("requests, n and capacity must be >= 1; companions and max-tokens >= 0")
    bound = Bound(args.requests, args.stages, args.final_stages, args.n, args.companions, args.capacity,
                  args.max_tokens, kinds, frozenset(families))
    bound.pipeline()  # validates stages / kinds / final stages
    return bound


def main(args: argparse.Namespace) -> int:
    """Run the exploration; return 0 if every invariant and liveness held, 1 otherwise, 2 on bad options."""
    try:
        bound = bound_from_args(args)
    except ValueError as exc:
        print(f"omni-fsm explore: {exc}", file=sys.stderr)
        return 2
    progress = _progress_printer(sys.stderr) if sys.stderr.isatty() else None
    report = explore(bound, symmetry=args.symmetry, liveness=not args.no_liveness, progress=progress)
    if progress is not None:
        print(file=sys.stderr)
    print_report(report, bound, sys.stdout)
    for cx in (*report.violations, *([report.stuck] if report.stuck else [])):
        path = args.out / f"counterexample-{cx.invariant}.trace.jsonl"
        write_counterexample(path, bound, cx)
        print(f"  trace written: {path}")
    return 0 if report.ok else 1


def _progress_printer(stream: TextIO):  # type: ignore[no-untyped-def]
    def show(states: int, edges: int, seconds: float) -> None:
        stream.write(f"\rexploring: {states:,} states, {edges:,} edges, {seconds:.0f} s")
        stream.flush()

    return show


def print_report(report: Report, bound: Bound, out: TextIO) -> None:
    """Print the exploration report; its last line is the verdict."""
    kinds, final = bound.pipeline()
    shape = " -> ".join(f"{k.value}{'*' if f else ''}" for k, f in zip(kinds, final, strict=True))
    rate = report.edges / report.seconds if report.seconds else 0.0
    out.write(f"bound: {bound.requests} requests, pipeline {shape} (* = final output), n={bound.n}, "
              f"companions={bound.companions}, capacity={bound.capacity}, <= {bound.max_tokens} tokens/stage\n")
    out.write(f"families: {', '.join(sorted(bound.families))}\n")
    out.write(f"states: {report.states:,}  edges: {report.edges:,}  seconds: {report.seconds:.1f}  "
              f"edges/s: {rate:,.0f}{'  (symmetry reduced)' if report.symmetry else ''}\n")
    out.write(f"invariants checked on every edge: {len(report.invariants)} ({', '.join(report.invariants)})\n")
    if report.liveness_checked:
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


def replay(bound: Bound, events: tuple[ev.Event, ...]) -> list[tuple[ev.Event, list[object]]]:
    """Run ``events`` through a fresh core; return the (event, observations) steps."""
    kinds, final = bound.pipeline()
    lc = Lifecycle(kinds, final, bound.capacity)
    steps: list[tuple[ev.Event, list[object]]] = []
    for event in events:
        try:
            steps.append((event, list(lc.handle(event))))
        except LifecycleError:
            break
    return steps


def write_counterexample(path: Path, bound: Bound, cx: Counterexample) -> None:
    """Write a counterexample as a lifecycle trace (``omni-fsm check`` reads it)."""
    from omni_fsm.trace import TraceWriter

    kinds, final = bound.pipeline()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as stream:
        writer = TraceWriter(stream)
        writer.header(kinds, final, bound.capacity)
        for event, outputs in replay(bound, cx.events):
            writer.step(event, outputs)  # type: ignore[arg-type]
