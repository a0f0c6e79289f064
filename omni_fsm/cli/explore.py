"""``omni-fsm explore``: the bounded exhaustive explorer's command line (a thin shell).

Says on stderr, before it starts, about how many states the bound has (measured on one request,
extrapolated), then its progress while it runs (states, states per second, memory: a line rewritten
in place on a terminal, else a plain line every few seconds, liveness phase included). Then prints the
report, whose last line is
``explore: states=... edges=... evaluations=... seconds=... edges_per_s=... reachable_invariants=N/M``
(`` workers=N`` appended when ``--workers`` runs more than one process, `` partial=yes`` when it stopped
early), and writes each shortest counterexample as a complete trace file that ``omni-fsm check`` reads.
``--sweep`` explores the bounds of ``specs/sweep.toml`` instead, one after another (``omni_fsm.cli.sweep``).

``--max-seconds``, ``--max-states``, ``--max-memory`` and the first Ctrl-C or SIGTERM end the search with
its report so far, which says it is partial (``omni_fsm.cli.limits``). Exits 0 (all held), 1 (a violation,
found by a complete search or a partial one), 2 (bad options, ``--out`` unwritable), 3 (a bug), 4 (partial:
stopped early, no violation found so far) or 130 (a second Ctrl-C or SIGTERM: no report).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import attrs

from omni_fsm.cli.counterexamples import Replayed, replay, write_counterexample, write_counterexamples
from omni_fsm.cli.explore_report import PARTIAL, ProgressLine, exit_code, print_report, summary_line
from omni_fsm.cli.limits import Limits, parse_size
from omni_fsm.cli.sweep import run as run_sweep
from omni_fsm.errors import InternalError
from omni_fsm.explore.explorer import DEFAULT_FAMILIES, FAMILIES, Bound, UnsoundReduction, explore
from omni_fsm.explore.parallel import cores
from omni_fsm.spec.table import SPEC, Spec
from omni_fsm.spec.vocabulary import stage_kinds

#: The options that choose a bound (``--sweep`` takes none: its bounds are in ``specs/sweep.toml``).
BOUND_OPTIONS = ("requests", "stages", "final_stages", "kinds", "n", "companions", "capacity", "max_tokens",
                 "families", "without")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the explorer's options (a bound option left out: the project's default bound's value)."""
    d = Bound()
    parser.add_argument("--requests", type=int, help=f"client requests (default {d.requests})")
    parser.add_argument("--stages", type=int, help=f"pipeline stages (default {d.stages})")
    parser.add_argument("--final-stages", type=int,
                        help=f"final-output stages: the last one plus the first N-1 (default {d.final_stages})")
    parser.add_argument("--kinds", help="stage kinds, comma-separated: ar,diffusion (default: all ar)")
    parser.add_argument("--n", type=int, help=f"samples per request (parallel sampling; default {d.n})")
    parser.add_argument("--companions", type=int, help=f"CFG companions per request (default {d.companions})")
    parser.add_argument("--capacity", type=int, help=f"running slots per stage (default {d.capacity})")
    parser.add_argument("--max-tokens", type=int, help=f"outputs per request and stage (default {d.max_tokens})")
    parser.add_argument("--families", help="event families to include, or 'all' (default: all but abort_race): "
                        + ",".join(FAMILIES))
    parser.add_argument("--without", help="event families to leave out, comma-separated")
    parser.add_argument("--sweep", action="store_true",
                        help="explore the bounds of specs/sweep.toml one after another (no bound option then)")
    parser.add_argument("--only", default="", metavar="NAME,...", help="with --sweep: only these bounds of it")
    parser.add_argument("--symmetry", action="store_true",
                        help="treat requests as interchangeable: faster, safety only (no liveness)")
    parser.add_argument("--no-liveness", action="store_true", help="skip the liveness check")
    parser.add_argument("--no-reduction", action="store_true",
                        help="compute every successor on the whole state (no per-family memo): the definition")
    parser.add_argument("--spec", default="", metavar="PKG.MOD:NAME",
                        help="explore this Spec instead of the project's (a module importable from here)")
    parser.add_argument("--max-states", type=int, default=None, metavar="N",
                        help="stop once N states are known, with the report so far (partial: exit 4)")
    parser.add_argument("--max-seconds", type=float, default=None, metavar="S",
                        help="stop once the search (with --sweep: the whole sweep) ran S seconds, with the report "
                        "so far (partial: exit 4)")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="stop once the process uses SIZE of memory: 500M, 4G, with the report so far (partial: "
                        "exit 4)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where counterexample traces go")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="expand states in N processes, 0: one per core (default 1); the same states, edges "
                        "and verdicts as one")


def bound_from_args(args: argparse.Namespace) -> Bound:
    """Return the ``Bound`` the options describe; ``ValueError`` names a bad option."""
    d = Bound()
    given = {name: getattr(args, name) for name in BOUND_OPTIONS}
    value = {name: getattr(d, name) if v is None else v for name, v in given.items() if name not in
             ("kinds", "families", "without")}  # fmt: skip
    named = {f for f in (args.families or ",".join(sorted(DEFAULT_FAMILIES))).split(",") if f}
    families = (set(FAMILIES) if "all" in named else named) - {f for f in (args.without or "").split(",") if f}
    unknown = families - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown event families: {', '.join(sorted(unknown))}")
    try:
        kinds = stage_kinds(k.strip() for k in (args.kinds or "").split(",") if k.strip())
    except ValueError as exc:
        raise ValueError(f"--kinds: {exc}") from None
    for flag, least in (("requests", 1), ("stages", 1), ("final_stages", 1), ("n", 1), ("companions", 0),
                        ("capacity", 1), ("max_tokens", 0)):  # fmt: skip
        if value[flag] < least:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least {least}")
    if value["final_stages"] > value["stages"]:
        raise ValueError(f"--final-stages must be at most --stages ({value['stages']})")
    if kinds and len(kinds) != value["stages"]:
        raise ValueError(f"--kinds names {len(kinds)} stage kinds for --stages {value['stages']}")
    bound = Bound(value["requests"], value["stages"], value["final_stages"], value["n"], value["companions"],
                  value["capacity"], value["max_tokens"], kinds, frozenset(families))
    bound.pipeline()  # validates stages / kinds / final stages
    return bound


def main(args: argparse.Namespace) -> int:
    """Run the exploration (or the sweep); return 0 (all held), 1 (a violation), 2 (bad options, --out unwritable),
    3 (a bug) or 4 (partial: stopped early, no violation found)."""
    try:
        if args.sweep:
            given = [f"--{name.replace('_', '-')}" for name in BOUND_OPTIONS if getattr(args, name) is not None]
            if given:
                raise ValueError(f"--sweep explores the bounds of specs/sweep.toml: it takes no {', '.join(given)}")
        elif args.only:
            raise ValueError("--only chooses bounds of the sweep: give --sweep too")
        bound = Bound() if args.sweep else bound_from_args(args)
        spec = load_spec(args.spec) if args.spec else SPEC
        max_memory = parse_size(args.max_memory) if args.max_memory else None
        if args.max_states is not None and args.max_states < 1:
            raise ValueError("--max-states must be at least 1")
        if args.max_seconds is not None and not args.max_seconds > 0:
            raise ValueError("--max-seconds must be more than 0")
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
    limits = Limits(args.max_seconds, max_memory)
    spec_name = args.spec or "the project's (omni_fsm.SPEC)"
    with limits.catching_signals():
        limits.start()
        try:
            if args.sweep:
                return run_sweep(args, spec, spec_name, limits, workers)
            return _explore_one(args, bound, spec, spec_name, limits, workers)
        except UnsoundReduction as exc:
            print(f"omni-fsm explore: the reduction is unsound for this spec: {exc}", file=sys.stderr)
            return 3
        except InternalError as exc:  # the core stopped on a step (a spec whose effects contradict its rows)
            print(f"omni-fsm explore: internal error: {exc}", file=sys.stderr)
            return 3


def _explore_one(args: argparse.Namespace, bound: Bound, spec: Spec, spec_name: str, limits: Limits,
                 workers: int) -> int:  # fmt: skip
    reduction = not args.no_reduction
    guess, line = estimate(bound, spec, reduction, limits)
    print(line, file=sys.stderr)
    with ProgressLine(sys.stderr) as progress:
        report = explore(bound, spec, symmetry=args.symmetry, liveness=not args.no_liveness,
                         progress=progress.update, on_phase=progress.set_phase, reduction=reduction,
                         max_states=args.max_states, stop=limits, workers=workers)  # fmt: skip
    print_report(report, bound, sys.stdout, spec_name, guess)
    code = write_counterexamples(report, bound, spec, args.out, sys.stdout)
    if code:
        return code
    print(summary_line(report, bound) + (f" workers={workers}" if workers > 1 else "")
          + (" partial=yes" if report.partial else ""))
    return exit_code(report)


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


def estimate(bound: Bound, spec: Spec, reduction: bool,
             stop: Callable[[], str | None] | None = None) -> tuple[float | None, str]:  # fmt: skip
    """Return (about how many states ``bound`` has, a line saying so): one request's states explored (quickly),
    raised to the number of requests over its factorial (requests interleave as a multiset; measured within 2x
    here). ``None`` for a bound of one request (its search is its only measure) or an estimate ``stop`` cut short."""
    r = bound.requests
    if r == 1:
        return None, "estimate: none for one request (exploring it is the only measure)"
    one = explore(attrs.evolve(bound, requests=1), spec, liveness=False, reduction=reduction, stop=stop)
    if one.stopped is not None:
        return None, f"estimate: none ({one.stopped} while exploring one request)"
    guess = one.states**r / math.factorial(r)
    how = f"{one.states:,} states for one request; {one.states:,}^{r}/{r}!"
    return guess, f"estimate: about {guess:,.0f} states ({how})"


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


__all__ = ["BOUND_OPTIONS", "PARTIAL", "ProgressLine", "Replayed", "add_arguments", "bound_from_args", "estimate",
           "load_spec", "main", "replay", "write_counterexample", "write_counterexamples"]  # fmt: skip
