"""``omni-fsm``: the command line, a thin shell around the pure core.

Subcommands import their modules lazily, so ``import omni_fsm`` never pays for them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand -> (module, function, one-line help). Each function takes the parsed namespace
#: and returns the exit code; each module also provides ``add_arguments(parser)``.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "explore": ("omni_fsm.explore", "main", "exhaustively explore the lifecycle at a bound"),
    "check": ("omni_fsm.tracecheck", "main", "check a JSONL lifecycle trace against the invariants"),
    "diagram": ("omni_fsm.diagram", "main", "print the lifecycle as a mermaid state diagram"),
    "traceability": ("omni_fsm.traceability", "main", "print docs/traceability.md from specs/"),
}


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
    code: int = getattr(importlib.import_module(module), func)(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
