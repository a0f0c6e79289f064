"""``python -m omni_fsm.registry``: the ``omni-fsm registry`` command (an entry script of the command line)."""

import sys

from omni_fsm.cli.registry import run

sys.exit(run())
