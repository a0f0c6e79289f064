"""A runtime in a process of its own: ``ProcessRuntime`` runs any stage runtime in a child process.

``ProcessRuntime("package.module:factory", *args)`` starts a child (``multiprocessing``, the
"spawn" start method: no parent state leaks into it) that builds ``factory(*args)`` and binds it
to a sink that collects reports; ``ProcessRuntime(name, spec, stage, replica, options=...)`` runs the runtime
the registry names (``omni_runtime.registry``), made with ``options``. Every protocol call is one command over a
pipe and one reply: the reports that call produced, in order (the parent hands them to its sink), and the call's
result or the text of its exception. Nothing runs in the parent between calls.

What the parent sees:

- the inner runtime raised (in any call): the call raises ``ChildRaised`` after the reports made
  before the exception went to the sink, as an in-process runtime's call would raise; so
  ``Host.step`` turns an exception in ``step()`` into ``ReplicaDied``, and ``Host`` answers one in
  ``add_request``, ``abort_requests`` or ``control`` as it does for any runtime. The child lives on.
- the child is gone (killed, crashed, the pipe broke, a reply that does not read, or a call
  interrupted between command and reply, by Ctrl-C say): ``ReplicaDied()`` goes to the sink once,
  the child is killed if it still runs, and from then on every call is a no-op and ``step()``
  returns ``False``. A child that dies before it is ready is reported the same way, from ``bind``.
- the factory raised in the child: ``bind`` raises ``ChildRaised`` (a configuration error).

No child outlives its parent: it asks the kernel for ``SIGKILL`` when the parent dies (Linux
``PR_SET_PDEATHSIG``: the only guard against a parent killed with ``SIGKILL``) and it exits at
end-of-file on its pipe; the parent stops the children still running at exit (an ``atexit`` hook,
registered after ``multiprocessing``'s own so that it runs first) and when a ``ProcessRuntime`` is
garbage-collected (``weakref.finalize``). The kernel's death signal follows the parent *thread* that
started the child: create ``ProcessRuntime`` objects in a thread that lives as long as they do
(the main thread). Children ignore ``SIGINT``. As with any "spawn" child, a parent script must
guard its entry point with ``if __name__ == "__main__":``.

This package imports no engine: it wraps whichever runtime the factory makes.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import time
import weakref
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from omni_fsm import ControlMethod
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.errors import ConfigError, OmniRuntimeError
from omni_runtime.hosting.process import _wire as w
from omni_runtime.hosting.process._child import serve
from omni_runtime.registry import RUNTIMES

#: how often a wait for a reply checks that the child still runs (seconds)
_POLL_S = 0.5


class ChildRaised(OmniRuntimeError):
    """The runtime in the child process raised; the message is ``TypeName: message``, ``child_traceback`` its
    traceback."""

    def __init__(self, error: str, child_traceback: str | None = None) -> None:
        super().__init__(error)
        self.child_traceback = child_traceback


class _ChildGone(Exception):
    """The child cannot answer: it exited, the pipe broke, or its reply is not the one awaited."""


class ProcessRuntime:
    """One stage replica run by ``factory(*args)`` in a child process (see the module's docstring); ``factory`` is
    ``package.module:callable`` or a runtime the registry names (its factory made with ``options``).

    ``stop_timeout``: how long ``shutdown()`` waits for the child to stop its runtime and exit before
    it is terminated, then killed.
    """

    def __init__(self, factory: str, *args: Any, options: Mapping[str, Any] | None = None,
                 stop_timeout: float = 5.0) -> None:  # fmt: skip
        module, _, name = factory.partition(":") if isinstance(factory, str) else ("", "", "")
        if (not module or not name) and factory not in RUNTIMES:
            raise ConfigError(f"ProcessRuntime wants a factory named package.module:callable or a runtime of the "
                              f"registry ({', '.join(sorted(RUNTIMES))}), got {factory!r}")  # fmt: skip
        self.factory, self.stop_timeout = factory, stop_timeout
        context = multiprocessing.get_context("spawn")
        self._conn, child_end = context.Pipe(duplex=True)
        # not daemonic: a daemonic process may not start processes of its own (an engine's workers)
        self._process = context.Process(target=serve, args=(child_end, os.getpid(), factory, args, dict(options or {})),
                                        name=f"omni-runtime[{factory}]", daemon=False)  # fmt: skip
        self._process.start()
        child_end.close()  # only the child holds its end: its death is end-of-file here
        assert self._process.pid is not None
        self.pid: int = self._process.pid  #: the child's process id
        _track(self.pid, self._process, self._conn)
        self._finalizer = weakref.finalize(self, _reap, self.pid, stop_timeout)
        self._sink: rp.ReportSink | None = None
        self._seq = 0
        self.lost: str | None = None  #: why the child was lost (it was reported as ``ReplicaDied``), if it was
        self.stopped = False  #: ``shutdown()`` was called

    # -- the protocol ---------------------------------------------------------------------------

    def bind(self, sink: rp.ReportSink) -> None:
        """Set the sink, then wait until the child has built its runtime; raise ``ChildRaised`` if that failed."""
        self._sink = sink
        try:
            hello = self._receive(-1)
        except Exception as exc:  # died before it was ready: a death like any other
            self._lose(f"before it was ready: {w.describe(exc)}")
            return
        if hello.error is not None:
            self.shutdown()
            raise ChildRaised(hello.error, hello.trace)

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        if not self._gone:
            self._call(w.AddRequest(self._next(), req_id, stage_input))

    def feed_input(self, req_id: int, part: StageInput, last: bool) -> None:
        """Feed streamed input to the runtime in the child (``ChildRaised``: it takes none)."""
        if not self._gone:
            self._call(w.FeedInput(self._next(), req_id, part, last))

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        if not self._gone:
            self._call(w.AbortRequests(self._next(), abort_id, w.as_tuple(req_ids)))

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        if not self._gone:
            self._call(w.Control(self._next(), call_id, method, level, frozenset(tags)))

    def step(self) -> bool:
        """Step the child's runtime once; return whether it has work left (``False`` once the child is gone)."""
        return not self._gone and self._call(w.Step(self._next())) is True

    def shutdown(self) -> None:
        """Stop the child's runtime and the child; idempotent. Raise ``ChildRaised`` if its ``shutdown()`` raised.

        The reports that come with the answer are dropped (no report follows shutdown). A child that
        does not exit within ``stop_timeout`` is terminated, then killed.
        """
        if self.stopped:
            return
        self.stopped = True
        error: w.Reply | None = None
        if self.lost is None:
            deadline = time.monotonic() + self.stop_timeout
            try:
                seq = self._next()
                self._conn.send(w.Shutdown(seq))
                reply = self._receive(seq, deadline, skip_stale=True)
                error = reply if reply.error is not None else None
            except Exception:  # gone, or too slow: the reaping below ends it
                pass
        self._finalizer()
        if error is not None:
            raise ChildRaised(str(error.error), error.trace)

    # -- the channel ----------------------------------------------------------------------------

    @property
    def _gone(self) -> bool:
        return self.stopped or self.lost is not None

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _call(self, command: w.Command) -> Any:
        """Send ``command``; hand the reply's reports to the sink; return its result, or raise ``ChildRaised``."""
        try:
            self._conn.send(command)
            reply = self._receive(command.seq)
        except Exception as exc:  # the child is gone: reported once, below
            self._lose(w.describe(exc))
            return None
        except BaseException:  # interrupted between command and reply: the stream is out of step for good
            self._lose("a call was interrupted")
            raise
        assert self._sink is not None, "bind() first"
        for report in reply.reports:
            self._sink(report)
        if reply.error is not None:
            raise ChildRaised(reply.error, reply.trace)
        return reply.result

    def _receive(self, seq: int, deadline: float | None = None, skip_stale: bool = False) -> w.Reply:
        """Return the child's reply to command ``seq`` (``-1``: its greeting); raise ``_ChildGone``.

        ``skip_stale``: replies to earlier commands are dropped (a shutdown from a signal handler that
        interrupted a call); else one is an error. ``deadline`` (``time.monotonic()``): give up then.
        """
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            if wait <= 0:
                raise _ChildGone("no answer in time")
            if not self._conn.poll(wait):
                if not self._process.is_alive():
                    raise _ChildGone(f"the child exited (exit code {self._process.exitcode})")
                continue
            reply = self._conn.recv()
            if not isinstance(reply, w.Reply):
                raise _ChildGone(f"the child sent a {type(reply).__name__}, not a reply")
            if reply.seq == seq:
                return reply
            if not (skip_stale and reply.seq < seq):
                raise _ChildGone(f"the child answered command {reply.seq}, not {seq}")

    def _lose(self, why: str) -> None:
        """The child is lost: kill it, report ``ReplicaDied`` (unless shut down already); once."""
        if self._gone:
            return
        self.lost = why
        _reap(self.pid, 0.0)
        if self._sink is not None:
            self._sink(rp.ReplicaDied())


def process_factory(factory: str, *args: Any, **options: Any) -> rp.RuntimeFactory[ProcessRuntime]:
    """Return the runtime factory of ``ProcessRuntime(factory, spec, stage, replica, *args)``: each replica
    ``factory``'s in a child process. ``factory`` a runtime the registry names: each replica its factory's, made with
    ``options``, given ``rpc_fails`` too. ``ConfigError`` for ``rpc_fails`` otherwise: ``args`` are the child
    factory's own."""

    def made(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> ProcessRuntime:
        if factory in RUNTIMES:
            return ProcessRuntime(factory, spec, stage, replica, rpc_fails, options=options)
        if rpc_fails:
            raise ConfigError(f"process_factory({factory!r}) passes its own arguments, not rpc_fails")
        return ProcessRuntime(factory, spec, stage, replica, *args)

    return made


def process_runtimes(pipeline: Pipeline, factory: str, *args: Any) -> list[list[ProcessRuntime]]:
    """Return one ``ProcessRuntime(factory, spec, stage, replica, *args)`` per replica of every stage."""
    return rp.build_runtimes(pipeline, process_factory(factory, *args))


# -- the children still running: stopped at exit ----------------------------------------------

_children: dict[int, tuple[BaseProcess, Connection]] = {}  #: pid -> (process, parent's end of its pipe)
_hooked: list[bool] = []  #: whether ``_reap_all`` is registered with ``atexit``


def _track(pid: int, process: BaseProcess, conn: Connection) -> None:
    """Remember a started child, to be stopped at exit if nobody stopped it before."""
    _children[pid] = (process, conn)
    if not _hooked:  # registered after multiprocessing's own hook (which joins children): so it runs first
        atexit.register(_reap_all)
        _hooked.append(True)


def _reap(pid: int, timeout: float) -> None:
    """Close the child's pipe (it stops its runtime and exits), join it for ``timeout`` seconds, then terminate,
    then kill it; idempotent."""
    entry = _children.pop(pid, None)
    if entry is None:
        return
    process, conn = entry
    conn.close()
    process.join(timeout)
    if process.exitcode is None:
        process.terminate()
        process.join(1.0)
    if process.exitcode is None:
        process.kill()
        process.join()


def _reap_all() -> None:
    """Stop every child still running (at exit): close every pipe first, so that they all stop at once."""
    for _, conn in list(_children.values()):
        conn.close()
    for pid in list(_children):
        _reap(pid, 5.0)


__all__ = ["ChildRaised", "ProcessRuntime", "process_factory", "process_runtimes"]
