"""The actor side of ``RayRuntime``: one replica's runtime, stepped by a thread of its own inside a Ray actor.

This module imports no ray (but in ``where``): ``ReplicaServer`` is a plain class that ``RayRuntime`` makes an actor of
(``ray.remote(max_concurrency=...)``: a threaded actor, so a call arrives while the runtime steps). The
driver side only sends commands and collects batches of reports:

- ``submit(seq, command)``: a protocol call, numbered by the driver. A threaded actor may run calls out of
  submission order, so the stepping thread applies them strictly by number (``applied`` says how far).
- ``poll(applied, busy)``: wait until there is news for a caller who last saw ``applied`` and ``busy`` (reports,
  or either changed), at most ``POLL_S``; return a ``Batch``. The driver keeps one poll in flight.
- ``stop(seq)``: the shutdown: applied after every earlier command; the runtime's ``shutdown()`` runs in the
  stepping thread, which then ends; returns the error text if it raised.

An exception out of the runtime (in any call, in ``step()``) ends the stepping: the batch carries its text
and traceback, and no report follows it.
"""

from __future__ import annotations

import os
import threading
import traceback
from typing import Any

import attrs

from omni_runtime.core import protocol as rp
from omni_runtime.registry import hosted

#: how long one ``poll`` waits for news before it answers with an empty batch (seconds)
POLL_S = 1.0
#: how long the stepping thread waits at most, between busy steps that reported nothing (seconds)
IDLE_BACKOFF_S = 0.002


@attrs.frozen(slots=True)
class Batch:
    """The reports made since the previous batch, in order, and where the runtime stands after them."""

    reports: tuple[rp.Report, ...]
    applied: int  #: the number of the last command applied (commands are applied in order, none skipped)
    busy: bool  #: the runtime's latest ``step()`` said work is left
    error: str | None = None  #: the runtime raised (``TypeName: message``): nothing more comes
    trace: str | None = None  #: that exception's traceback


class ReplicaServer:
    """One replica's runtime, ``factory(spec, stage, replica, rpc_fails, *args)`` (``factory``: a runtime of the
    registry, made here with ``options``, or ``package.module:factory``), and the thread that steps it."""

    def __init__(self, factory: str, options: dict[str, Any], spec: Any, stage: int, replica: int, rpc_fails: bool,
                 *args: Any) -> None:  # fmt: skip
        made: list[rp.Report] = []
        self._made = made  #: reports the runtime made since the stepping thread last published them
        self.runtime = hosted(factory, options)(spec, stage, replica, rpc_fails, *args)
        self.runtime.bind(made.append)
        self._cond = threading.Condition()
        self._inbox: dict[int, tuple[str, tuple[Any, ...]]] = {}  #: commands not applied yet, by number
        self._out: list[rp.Report] = []  #: reports published, not polled yet
        self._applied = 0
        self._busy = False
        self._error: tuple[str, str] | None = None
        self._stopped: str | None = None  #: "" once the runtime shut down cleanly, else its error
        self._thread = threading.Thread(target=self._run, name="omni-ray-replica", daemon=True)
        self._thread.start()

    def where(self) -> tuple[int, str, str]:
        """Return this actor's process id, host name and Ray node id (the driver checks the actor is up with it)."""
        import ray  # here only: this module is ray-free, the actor that runs it is not

        return os.getpid(), os.uname().nodename, ray.get_runtime_context().get_node_id()

    def submit(self, seq: int, name: str, *args: Any) -> None:
        """Queue protocol call ``name(*args)`` as command ``seq``."""
        with self._cond:
            self._inbox[seq] = (name, args)
            self._cond.notify_all()

    def poll(self, applied: int, busy: bool) -> Batch:
        """Return the next batch once there is news for a caller who saw ``applied`` and ``busy`` (or ``POLL_S``)."""
        with self._cond:
            self._cond.wait_for(lambda: self._out or self._applied != applied or self._busy != busy
                                or self._error is not None or self._stopped is not None, POLL_S)  # fmt: skip
            out, self._out = tuple(self._out), []
            error, trace = self._error or (None, None)
            return Batch(out, self._applied, self._busy, error, trace)

    def stop(self, seq: int, timeout: float) -> str | None:
        """Shut the runtime down after every command before ``seq``; return its ``shutdown()``'s error, if any."""
        self.submit(seq, "shutdown")
        self._thread.join(timeout)
        return self._stopped if self._stopped else None

    # -- the stepping thread ----------------------------------------------------------------------

    def _take(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Wait for the next command or, while busy, for up to the back-off; return the commands due, in order."""
        due: list[tuple[str, tuple[Any, ...]]] = []
        with self._cond:
            if not self._busy:
                self._cond.wait_for(lambda: self._applied + 1 in self._inbox)
            while self._applied + len(due) + 1 in self._inbox:
                due.append(self._inbox.pop(self._applied + len(due) + 1))
        return due

    def _run(self) -> None:
        runtime, made, silent = self.runtime, self._made, 0
        while True:
            due = self._take()
            try:
                for name, args in due:
                    if name == "shutdown":
                        self._shut(runtime)
                        return
                    getattr(runtime, name)(*args)
                busy = runtime.step() if due or self._busy else False
            except Exception as exc:  # the runtime is broken: said once, nothing follows
                self._publish(len(due), False, (f"{type(exc).__name__}: {exc}", traceback.format_exc()))
                self._wait_for_stop()
                return
            silent = 0 if made or due else silent + 1
            self._publish(len(due), busy)
            if busy and silent:  # busy, yet nothing to say (a paused or parked runtime): back off a little
                with self._cond:
                    self._cond.wait_for(lambda: self._applied + 1 in self._inbox,
                                        min(IDLE_BACKOFF_S, 0.00005 * 2**min(silent, 10)))  # fmt: skip

    def _publish(self, applied: int, busy: bool, error: tuple[str, str] | None = None) -> None:
        with self._cond:
            self._out.extend(self._made)
            self._made.clear()
            self._applied += applied
            self._busy = busy
            self._error = error
            self._cond.notify_all()

    def _shut(self, runtime: Any) -> None:
        try:
            runtime.shutdown()
        except Exception as exc:  # the caller hears it; nothing is reported after shutdown either way
            self._stopped = f"{type(exc).__name__}: {exc}"
        else:
            self._stopped = ""
        with self._cond:
            self._made.clear()
            self._cond.notify_all()

    def _wait_for_stop(self) -> None:
        """After an error: take no command but the shutdown, which then only ends the thread."""
        with self._cond:
            while not any(name == "shutdown" for name, _ in self._inbox.values()):
                self._cond.wait()
            self._stopped = ""
