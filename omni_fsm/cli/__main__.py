"""``python -m omni_fsm.cli``: the ``omni-fsm`` command line."""

import sys

from omni_fsm.cli import main

sys.exit(main())
