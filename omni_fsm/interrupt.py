"""Ctrl-C and SIGTERM end a command with one line and exit status 130, never a traceback.

``interruptible(prog)`` wraps a command's body: SIGTERM (what ``timeout``, CI cancellation and
``docker stop`` send) is turned into SIGINT, so whatever handles Ctrl-C handles it (``asyncio.run``
cancels its main task; plain code gets ``KeyboardInterrupt``) and the ``with`` and ``finally``
blocks on the way out run (a trace being written removes its temporary file and leaves the path
as it was); then the command prints ``PROG: interrupted`` and the reason (``what``), and returns
``INTERRUPTED``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

INTERRUPTED = 130  #: the exit status of a command ended by Ctrl-C or SIGTERM (128 + SIGINT)


def _as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    signal.raise_signal(signal.SIGINT)


def interruptible(prog: str, body: Callable[[], int], what: str = "") -> int:
    """Run ``body``; on Ctrl-C or SIGTERM print ``PROG: interrupted`` (and ``what``) and return 130."""
    try:
        previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    except ValueError:  # not the main thread (a test runner's worker): SIGTERM keeps its handler
        previous = None
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{what}", file=sys.stderr)
        return INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
