"""``omni-fsm check FILE``: judge a recorded trace against the invariants (``omni_fsm.trace.check``).

Prints each violation (its invariant, request, line and that request's recent lines), then a one-line
summary; a long check shows a progress line on stderr now and then. Exit codes: 0 clean; 1
violations; 2 malformed input, as ``FILE:LINE: reason`` on stderr; 3 an internal error; 4
incomplete: no violation, but no end marker either (cut off, or still being written), as
``FILE:LINE: ...`` on stderr, unless ``--allow-incomplete`` accepts a prefix; and, from
``omni_fsm.cli``, 130 interrupted, 141 stdout's reader gone.
"""

from __future__ import annotations

import argparse
import sys

from omni_fsm.errors import MalformedInput
from omni_fsm.trace.check import DEFAULT_CONTEXT, Progress, check_trace

CLEAN, VIOLATIONS, MALFORMED, INTERNAL, INCOMPLETE = 0, 1, 2, 3, 4
MAX_CONTEXT = 10_000  #: the most recent lines ``--context`` may keep per request


def _context_size(text: str) -> int:
    """Return ``--context``'s value: an integer from 0 to ``MAX_CONTEXT``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_CONTEXT}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``check`` subcommand's arguments."""
    parser.add_argument("file", metavar="FILE", help="a JSONL lifecycle trace (see docs/trace-format.md)")
    parser.add_argument("--context", metavar="N", type=_context_size, default=DEFAULT_CONTEXT,
                        help=f"recent lines shown per violation, 0 to {MAX_CONTEXT} (default {DEFAULT_CONTEXT})")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="judge a trace without its end marker (cut off, or still being written) as the "
                        "steps present: exit 0 if none breaks an invariant (default: such a trace exits 4)")


def _progress_line(name: str) -> Progress:
    def show(steps: int, line: int, seconds: float) -> None:
        print(f"{name}: checking: {steps:,} steps, line {line:,}, {seconds:.0f} s", file=sys.stderr, flush=True)

    return show


def main(args: argparse.Namespace) -> int:
    """Check ``args.file``; print the report; return the exit code (0 clean, 1, 2, 3, 4: see the module)."""
    try:
        report = check_trace(args.file, args.context, _progress_line(args.file))
    except MalformedInput as err:
        print(err, file=sys.stderr)
        return MALFORMED
    except Exception as err:  # a bug here or in the monitor: say so in one line, no traceback
        print(f"{args.file}: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return INTERNAL
    for finding in report.findings:
        print(finding)
    print(report.summary())
    if not report.complete and not args.allow_incomplete:
        print(report.missing_end(), file=sys.stderr)
    if report.findings:  # what broke in a prefix is broken in the whole history
        return VIOLATIONS
    return CLEAN if report.complete or args.allow_incomplete else INCOMPLETE


__all__ = ["CLEAN", "INCOMPLETE", "INTERNAL", "MALFORMED", "MAX_CONTEXT", "VIOLATIONS", "add_arguments", "main"]
