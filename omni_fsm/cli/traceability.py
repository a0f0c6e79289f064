"""``omni-fsm traceability``: print ``docs/traceability.md`` (``omni_fsm.registry.traceability``), or check it.

With ``--check`` it prints nothing on stdout and exits 1 if the checked-in document is not what it
would print (with the command that regenerates it on stderr). Exit 2: ``specs/`` or a test file is
malformed, as ``FILE:LINE: reason`` on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omni_fsm.errors import MalformedInput
from omni_fsm.registry.model import find_root
from omni_fsm.registry.traceability import DOC_FILE, REGENERATE, generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``omni-fsm traceability``'s options."""
    parser.add_argument("--root", type=Path, default=None,
                        help="the directory holding specs/ (default: the checkout around cwd, else the installed copy)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {DOC_FILE} is not current")


def main(args: argparse.Namespace) -> int:
    """Print the traceability document (or check the checked-in one); return the exit code."""
    root = find_root() if args.root is None else args.root
    try:
        text = generate(root)
    except MalformedInput as exc:
        print(exc, file=sys.stderr)
        return 2
    if not args.check:
        sys.stdout.write(text)
        return 0
    current = (root / DOC_FILE).read_text(encoding="utf-8") if (root / DOC_FILE).is_file() else ""
    if current != text:
        print(f"{DOC_FILE} is stale: regenerate with `{REGENERATE}`", file=sys.stderr)
        return 1
    return 0


__all__ = ["add_arguments", "main"]
