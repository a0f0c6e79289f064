"""What a ``Host`` tells the driver around it: the one interface between the two, declared here.

The host carries out the orchestrator's commands and buffers the runtimes' reports; its driver decides when the
orchestrator takes them and when runtimes step. ``Engine`` pumps its host itself and needs to hear nothing
(``Pumped``); ``AsyncEngine`` implements every method to wake its loops and its waiting callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from omni_runtime.core import commands as cmd

if TYPE_CHECKING:
    from omni_runtime.engines.host import Host


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

    def stop_runtimes(self, host: Host) -> None:
        """The orchestrator stopped: the runtimes shut down next (``host.shutdown_runtimes()``, now or once the
        driver's own loops have ended)."""


class Pumped:
    """The driver of a host its caller pumps (``Engine``): it hears nothing, and the runtimes stop at once."""

    __slots__ = ()

    def report_buffered(self, stage: int, replica: int) -> None:
        """Nothing: the caller pumps."""

    def work_given(self, stage: int, replica: int) -> None:
        """Nothing: the caller steps the runtimes."""

    def answered(self, answer: cmd.Command) -> None:
        """Nothing: the caller reads the answers the host keeps."""

    def mailed(self, rid: int) -> None:
        """Nothing: the caller reads the mailboxes."""

    def stop_runtimes(self, host: Host) -> None:
        """Shut the runtimes down now."""
        host.shutdown_runtimes()
