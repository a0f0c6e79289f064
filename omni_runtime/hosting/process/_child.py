"""The child side of ``ProcessRuntime``: build the inner runtime, then answer one command at a time.

The child dies with its parent: on Linux ``PR_SET_PDEATHSIG`` has the kernel send it ``SIGKILL``
when the parent (strictly, the parent's thread that started it) exits, and it also exits when the
pipe reaches end-of-file. It ignores ``SIGINT``: Ctrl-C in a terminal reaches the whole process
group, and the parent decides what an interrupt means.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from omni_runtime.core import protocol as rp
from omni_runtime.hosting.process import _wire as w
from omni_runtime.registry import hosted

_log = logging.getLogger("omni_runtime")
_PR_SET_PDEATHSIG = 1  #: from <linux/prctl.h>

#: command class -> the inner runtime's call it stands for (what it returns is the reply's ``result``)
_CALLS: dict[type[w.Command], Callable[[rp.StageRuntime, Any], Any]] = {
    w.AddRequest: lambda runtime, c: runtime.add_request(c.req_id, c.stage_input),
    w.AbortRequests: lambda runtime, c: runtime.abort_requests(c.abort_id, c.req_ids),
    w.FeedInput: lambda runtime, c: _feed(runtime, c),
    w.Control: lambda runtime, c: runtime.control(c.call_id, c.method, c.level, c.tags),
    w.Step: lambda runtime, c: bool(runtime.step()),
    w.Shutdown: lambda runtime, c: runtime.shutdown(),
}  # fmt: skip


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent exits (Linux); exit now if the parent is already gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            _log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    if os.getppid() != parent_pid:  # the parent died before prctl took effect: nobody will ever talk to us
        os._exit(1)


def build(factory: str, args: tuple[Any, ...], options: dict[str, Any]) -> rp.StageRuntime:
    """Return the runtime ``factory(*args)`` makes, ``factory`` naming ``package.module:callable`` or a runtime of the
    registry (its factory made with ``options``)."""
    runtime: rp.StageRuntime = hosted(factory, options)(*args)
    return runtime


def _feed(runtime: Any, c: w.FeedInput) -> None:
    if not isinstance(runtime, rp.StreamingInput):
        raise TypeError(f"{type(runtime).__name__} takes no streamed input (no feed_input)")
    runtime.feed_input(c.req_id, c.part, c.last)


def serve(conn: Connection, parent_pid: int, factory: str, args: tuple[Any, ...], options: dict[str, Any]) -> None:
    """The child's main function: answer the parent's commands until ``Shutdown`` or end-of-file."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reports: list[rp.Report] = []
    try:
        runtime = build(factory, args, options)
        runtime.bind(reports.append)
    except Exception as exc:  # the parent raises it from bind(); nothing to serve
        conn.send(w.Reply(-1, error=f"cannot build {factory}: {w.describe(exc)}", trace=traceback.format_exc()))
        return
    conn.send(w.Reply(-1))
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):  # the parent is gone or dropped us
            break
        reply = answer(runtime, command, reports)
        if isinstance(command, w.Shutdown):
            send(conn, reply)
            return
        if not send(conn, reply):
            break
    try:  # leaving without a Shutdown command: still stop the runtime (it may hold processes of its own)
        runtime.shutdown()
    except Exception as exc:
        _log.error("ProcessRuntime child %d: shutdown raised %s", os.getpid(), w.describe(exc))


def answer(runtime: rp.StageRuntime, command: w.Command, reports: list[rp.Report]) -> w.Reply:
    """Return the reply to ``command``: the reports its call produced (taken from ``reports``), its result or error."""
    try:
        result = _CALLS[type(command)](runtime, command)
    except Exception as exc:  # the runtime raised: the parent raises it in turn, as an in-process runtime would
        reply = w.Reply(command.seq, tuple(reports), error=w.describe(exc), trace=traceback.format_exc())
    else:
        reply = w.Reply(command.seq, tuple(reports), result)
    reports.clear()
    return reply


def send(conn: Connection, reply: w.Reply) -> bool:
    """Send ``reply``; return whether it went. One that does not pickle ends the child (the parent sees it die)."""
    try:
        conn.send(reply)
    except (EOFError, OSError):
        return False
    except Exception as exc:  # a report that does not pickle: the stream would have a hole, so the replica is lost
        _log.error("ProcessRuntime child %d: cannot send a reply (%s); exiting", os.getpid(), w.describe(exc))
        return False
    return True
