"""Ctrl-C and SIGTERM end a command with one line and exit status 130, never a traceback.

``interruptible(prog)`` wraps a command's body: SIGTERM (what ``timeout``, CI cancellation and
``docker stop`` send) raises ``KeyboardInterrupt`` as Ctrl-C does, also where SIGINT is ignored (a
job a shell started with ``&``), so the ``with`` and ``finally`` blocks on the way out run (a trace
being written removes its temporary file and leaves the path as it was); then the command prints
``PROG: interrupted`` and ``what()`` (asked then: the reason may depend on how far it got), and
returns ``INTERRUPTED``. A body that runs an event loop handles SIGTERM inside it as ``asyncio.run``
handles Ctrl-C (cancel its main task: see ``omni_runtime.apps.cli``), then raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

INTERRUPTED = 130  #: the exit status of a command ended by Ctrl-C or SIGTERM (128 + SIGINT)


def _as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # also where SIGINT is ignored (a job a shell started with '&')


def interruptible(prog: str, body: Callable[[], int], what: Callable[[], str] = str) -> int:
    """Run ``body``; on Ctrl-C or SIGTERM print ``PROG: interrupted`` and ``what()`` (the reason) and return 130."""
    try:
        previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    except ValueError:  # not the main thread (a test runner's worker): SIGTERM keeps its handler
        previous = None
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{what()}", file=sys.stderr)
        return INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
