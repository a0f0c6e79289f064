"""``omni-fsm view TRACE -o PAGE.html``: a checked trace as one self-contained HTML page (``omni_fsm.view``).

The trace is read and judged exactly as ``omni-fsm check`` does (``check_trace``); the page shows a lane per
request, every violation with its rule's ID and text (``specs/invariants.toml``) and the lines that show it.
A page is written whole or not at all (a temporary file beside it, moved into place). Exit codes: 0 the page
was written (whatever the trace's verdict: the page says it); 2 malformed input, as ``FILE:LINE: reason`` on
stderr (the same line ``check`` prints), or a page that cannot be written (its directory missing, say: none is
created); 3 an internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import tempfile

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.model import load_registry, packaged_root
from omni_fsm.trace.check import check_trace
from omni_fsm.trace.jsonl import Step
from omni_fsm.view import RuleText, render_trace

WRITTEN, MALFORMED, INTERNAL = 0, 2, 3
STDOUT = "-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``view`` subcommand's arguments."""
    parser.add_argument("file", metavar="TRACE", help="a JSONL lifecycle trace (see docs/trace-format.md), such as "
                        "an explorer's counterexample-ID.trace.jsonl")
    parser.add_argument("-o", "--output", metavar="PAGE", default=STDOUT,
                        help="where to write the HTML page (default: '-', stdout)")


def rule_texts() -> dict[str, RuleText]:
    """Return every invariant's (title, rule) by ID, from the registry this package ships: the rule itself, for a
    derived one its refinement, not the contract's paragraph it cites."""
    return {inv.id: (inv.title, inv.statement) for inv in load_registry(packaged_root()).invariants}


def write_page(path: str, page: str) -> None:
    """Write ``page`` to ``path`` whole: a temporary file beside it, then moved onto it; raise ``OSError``.

    A missing directory is not created: a mistyped ``-o`` path is an error, not a new tree of folders.
    """
    folder, base = os.path.split(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder or ".")
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no directory {folder} (none is created)", path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(page)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def main(args: argparse.Namespace) -> int:
    """Render ``args.file`` to ``args.output``; return the exit code (0, 2 or 3: see the module)."""
    steps: list[Step] = []
    try:
        report = check_trace(args.file, keep=steps)
        page = render_trace(report, steps, rule_texts())
    except MalformedInput as err:
        print(err, file=sys.stderr)
        return MALFORMED
    except Exception as err:  # a bug here, in the monitor or the renderer: one line, no traceback
        print(f"{args.file}: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return INTERNAL
    if args.output == STDOUT:
        sys.stdout.write(page)
        print(report.summary(), file=sys.stderr)
        return WRITTEN
    try:
        write_page(args.output, page)
    except OSError as err:
        print(f"omni-fsm view: {args.output}: {err.strerror or err}", file=sys.stderr)
        return MALFORMED
    print(f"{args.output}: {report.summary()}")
    return WRITTEN


__all__ = ["INTERNAL", "MALFORMED", "STDOUT", "WRITTEN", "add_arguments", "main", "rule_texts", "write_page"]
