"""What a ``Host`` tells the driver around it: the one interface between the two, declared here.

The host carries out the orchestrator's commands and buffers the runtimes' reports; its driver decides when the
orchestrator takes them and when runtimes step. ``Engine`` pumps its host itself and needs to hear nothing
(``host.Pumped``, the default); ``AsyncEngine`` implements every method to wake its loops and its waiting callers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from omni_runtime.core import commands as cmd


class HostDriver(Protocol):
    """The driver a ``Host`` is made with; each method is called by the host, in the host's thread."""

    def report_buffered(self, stage: int, replica: int) -> None:
        """A runtime's report is buffered (the host's sink for ``replica`` of ``stage`` took it)."""

    def work_given(self, stage: int, replica: int) -> None:
        """A runtime was given work (a request, an abort, an RPC, a replacement): it should step."""

    def answered(self, answer: cmd.Command) -> None:
        """An abort or control RPC got its answer (an ``AbortAnswer`` or ``RpcAnswer``)."""

    def mailed(self, rid: int) -> None:
        """A message for request ``rid`` landed in its mailbox."""

    def stop_runtimes(self, shut_down: Callable[[], None]) -> None:
        """The orchestrator stopped: the runtimes shut down next (``shut_down()``, the host's ``shutdown_runtimes``,
        now or once the driver's own loops have ended)."""
