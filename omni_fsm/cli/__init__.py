"""``omni-fsm``: the command line, a thin shell around the pure core.

One module here per subcommand (``explore``, ``check``, ``view``, ``diagram``, ``traceability``,
``registry``): its options, its output and its exit codes, around the library it drives.
``import omni_fsm`` never imports this package; running it imports every subcommand's module to
build the parser. Ctrl-C and SIGTERM end any subcommand with one line and exit 130 (a trace or
counterexample being written leaves no temporary file), except a search of ``explore``, which the first
one ends with its partial report (exit 4; ``omni_fsm.cli.limits``); a reader that goes away (``| head``)
ends it quietly with exit 141.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from omni_fsm.cli.interrupt import interruptible

#: subcommand -> (module, function, one-line help). Each function takes the parsed namespace
#: and returns the exit code; each module also provides ``add_arguments(parser)``.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "explore": ("omni_fsm.cli.explore", "main", "exhaustively explore the lifecycle at a bound"),
    "check": ("omni_fsm.cli.check", "main", "check a JSONL lifecycle trace against the invariants"),
    "view": ("omni_fsm.cli.view", "main", "render a JSONL lifecycle trace as a self-contained HTML page"),
    "diagram": ("omni_fsm.cli.diagram", "main", "print the lifecycle as a mermaid state diagram"),
    "traceability": ("omni_fsm.cli.traceability", "main", "print docs/traceability.md from specs/"),
    "registry": ("omni_fsm.cli.registry", "main",
                 "validate specs/ (contracts, invariant registry, ID lock); --update-lock issues new IDs"),
}
BROKEN_PIPE = 141  #: the exit status when stdout's reader went away (128 + SIGPIPE, as the shell reports it)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="omni-fsm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, _, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``omni-fsm``; return the process exit code."""
    args = build_parser().parse_args(argv)
    module, func, _ = SUBCOMMANDS[args.command]
    run: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), func)
    return interruptible(f"omni-fsm {args.command}", lambda: _quiet_on_broken_pipe(run, args))


def _quiet_on_broken_pipe(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Return ``run(args)``, or ``BROKEN_PIPE`` without a traceback when stdout's reader went away."""
    try:
        code = run(args)
        sys.stdout.flush()  # a reader gone is noticed here, not in the interpreter's last flush
    except BrokenPipeError:
        # the interpreter flushes stdout once more on exit: let that go nowhere (unless stdout is no file)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
