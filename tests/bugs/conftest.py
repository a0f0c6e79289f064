"""Make the repository root (for ``tests.fsm.faults``) and tests/runtime helpers importable."""

from __future__ import annotations

import sys
from pathlib import Path

for path in (Path(__file__).parents[2], Path(__file__).parents[1] / "runtime"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
