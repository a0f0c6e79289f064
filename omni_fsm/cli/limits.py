"""What ends an exploration early on the command line: ``--max-seconds``, ``--max-memory``, Ctrl-C and SIGTERM.

``Limits`` is the explorer's ``stop`` callback (asked every few dozen states): it returns why to stop once the
deadline passed, the memory limit was reached, or the first Ctrl-C or SIGTERM arrived; the search then ends
with its report so far, which says it is partial. A second Ctrl-C or SIGTERM does not wait: it raises
``KeyboardInterrupt`` as the other commands do (``omni_fsm.cli.interrupt``: one line, exit 130).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from types import FrameType

#: Seconds between two reads of the process's memory (a read costs a few files in /proc).
MEMORY_EVERY = 0.25
_SIGNALS = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Return the bytes ``text`` names (``500M``, ``4G``, ``2.5GiB``; a bare number is MiB); ``ValueError`` if none."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"--max-memory wants a size such as 500M or 4G, got {text!r}")
    unit = match.group(2).upper() or "M"
    return int(float(match.group(1)) * 1024 ** "BKMGT".index(unit))


def memory_used() -> int:
    """Return the resident memory in bytes of this process and its children (the explorer's workers; pages they
    share are counted in each), or this process's peak where the current size cannot be read."""
    try:
        return sum(_resident(pid) for pid in ("self", *_children()))
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _resident(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except FileNotFoundError:  # a child that ended meanwhile
        if pid == "self":
            raise
        return 0


def _children() -> list[str]:
    """Return this process's children's ids (none where the kernel does not list them)."""
    found: list[str] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                found.extend(f.read().split())
    except OSError:
        pass
    return found


class Limits:
    """The explorer's ``stop`` callback: a deadline (``max_seconds`` from ``start()``), a memory limit, a signal.

    Called, it returns why the search must stop now, or ``None``; once it gave a reason it gives it again, so
    that every search after it (a sweep's next bound, the estimate's) stops at once.
    """

    def __init__(self, max_seconds: float | None = None, max_memory: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 memory: Callable[[], int] = memory_used) -> None:  # fmt: skip
        self.max_seconds, self.max_memory = max_seconds, max_memory
        self._clock, self._memory = clock, memory
        self.deadline: float | None = None
        self._next_memory = 0.0
        self.reason: str | None = None  #: why it said stop (``None``: it has not)
        self.signalled: str | None = None  #: the signal that arrived, in words

    def start(self) -> Limits:
        """Start the clock of ``max_seconds``; return self."""
        if self.max_seconds is not None:
            self.deadline = self._clock() + self.max_seconds
        return self

    def __call__(self) -> str | None:
        if self.reason is None:
            self.reason = self._why()
        return self.reason

    def _why(self) -> str | None:
        if self.signalled is not None:
            return f"interrupted by {self.signalled}"
        now = self._clock()
        if self.deadline is not None and now >= self.deadline:
            return f"--max-seconds {self.max_seconds:g} reached"
        if self.max_memory is not None and now >= self._next_memory:
            self._next_memory = now + MEMORY_EVERY
            used = self._memory()
            if used >= self.max_memory:
                return f"--max-memory {self.max_memory / 2**20:,.0f} MiB reached ({used / 2**20:,.0f} MiB used)"
        return None

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled is not None:  # the second one: do not wait for the search
            raise KeyboardInterrupt
        self.signalled = _SIGNALS.get(signal.Signals(signum), f"signal {signum}")

    @contextlib.contextmanager
    def catching_signals(self) -> Iterator[Limits]:
        """Within the block, the first Ctrl-C or SIGTERM stops the search (this callback says so), the second
        raises ``KeyboardInterrupt``. Outside the main thread (where handlers cannot be set) nothing changes."""
        previous: dict[signal.Signals, object] = {}
        try:
            for signum in _SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # a job started with '&' keeps ignoring Ctrl-C
                    previous[signum] = signal.signal(signum, self._signalled)
        except ValueError:  # not the main thread
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]


__all__ = ["MEMORY_EVERY", "Limits", "memory_used", "parse_size"]
