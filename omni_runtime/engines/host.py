"""The runtime host: binds stage runtimes to an orchestrator and carries out its commands.

No asyncio: the synchronous engine and both asyncio loops share it. Each runtime's sink stamps
its own stage and replica and buffers the report; the drivers decide when the orchestrator
takes reports (pushed: event-driven; polled: the polling loop and the synchronous engine). What the host tells
its driver is one declared interface, ``HostDriver`` (``host_driver.py``), given when the host is made.

When the engine dies (``EngineChanged(DEAD)``) the host shuts the system down by itself, once the
commands already queued (the fatal terminals among them) are carried out: the orchestrator stops,
then the runtimes (B9).

A mailbox holds at most ``max_buffered`` messages: past that its consumer has stalled, and its request is
aborted ("consumer stalled": its terminal's error), so that it holds no more memory; its messages until
the terminal are dropped. Nothing else waits for a consumer: a stalled one delays no other request.

A replica whose steps say it is busy while it holds requests and reports nothing for ``stall_timeout_s``
seconds (``StallClock``; ``None``: no bound) is lost as one whose step raised: ``ReplicaDied``, its requests
failed naming the stall. The engine paused or asleep (the client's own call) is not silence.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence

import attrs

from omni_fsm import SPEC, ControlMethod, EngineState, Outcome, Spec
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.orchestrator import Orchestrator
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt
from omni_runtime.core.translation import StepHook
from omni_runtime.engines.host_driver import HostDriver
from omni_runtime.engines.watchdog import StallClock
from omni_runtime.errors import ConfigError, EngineNotRunning, OmniRuntimeError, RequestRefused

Listener = Callable[[cmd.ClientMessage], None]

_log = logging.getLogger("omni_runtime")
#: what ``fail_engine`` drops from the queue: work for the runtimes (deliveries and answers still go out)
_RUNTIME_COMMANDS = (cmd.Dispatch, cmd.AbortAt, cmd.RpcCall)
STALLED = "consumer stalled"  #: the error of the terminal of a request aborted because its mailbox was full
STALL_TIMEOUT_S = 300.0  #: a replica's silence while busy that loses it, by default (as vLLM's execute-model bound)
#: engine states the client's own call brought about: a replica's silence then is not a stall
_CLIENT_HELD = (EngineState.PAUSED, EngineState.SLEEPING)


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

    def stop_runtimes(self, shut_down: Callable[[], None]) -> None:
        """Shut the runtimes down now."""
        shut_down()


class Host:
    """One orchestrator, its runtimes (``runtimes[stage][replica]``) and the client's mailboxes."""

    LISTENER_ERRORS_KEPT = 8  #: listener errors kept (with their tracebacks) until reported; the rest are counted

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[rp.StageRuntime]], *, spec: Spec = SPEC,
                 on_step: StepHook | None = None, max_buffered: int | None = 10_000,
                 driver: HostDriver | None = None,
                 stall_timeout_s: float | None = STALL_TIMEOUT_S) -> None:  # fmt: skip
        pipeline = require_pipeline(pipeline, "Host")
        if max_buffered is not None and (not isinstance(max_buffered, int) or isinstance(max_buffered, bool)
                                         or max_buffered < 1):  # fmt: skip
            raise ConfigError(f"max_buffered is an integer >= 1 or None, not {max_buffered!r}")
        self.stall = StallClock(stall_timeout_s, [s.replicas for s in pipeline.stages])
        rp.check_runtimes(pipeline, runtimes)  # one line naming the position, before any runtime is bound
        self.pipeline = pipeline
        self.orchestrator = Orchestrator(pipeline, spec=spec, on_step=on_step, vocab_size=rp.vocab_size(runtimes[0]))
        self.runtimes = [list(r) for r in runtimes]
        self.buffers: list[list[deque[rp.Report]]] = [[deque() for _ in r] for r in runtimes]
        self.mailboxes: dict[int, deque[cmd.ClientMessage]] = {}
        self.max_buffered = max_buffered  #: messages a mailbox holds at most (``None``: no limit)
        self.stalled: set[int] = set()  #: requests aborted because their consumer stalled, until their terminal
        self.listeners: dict[int, Listener] = {}
        self.abort_answers: dict[int, cmd.AbortAnswer] = {}
        self.rpc_answers: dict[int, cmd.RpcAnswer] = {}
        self._unclaimed: set[int] = set()  #: abort / RPC calls nobody waits for: their answers are not kept
        self.engine_state = EngineState.RUNNING
        self.orchestrator_stopped = False
        self.runtimes_stopped = False
        self.history: list[str] = []  #: shutdown order, for tests: 'orchestrator stopped', 'runtime s/r shut down'
        self.driver: HostDriver = driver if driver is not None else Pumped()  #: what this host tells (one, for good)
        self.pending: deque[cmd.Command] = deque()
        self.reports_taken = 0  #: reports handed to the orchestrator (the drivers' watchdogs measure progress by it)
        self.runtimes_busy = False  #: whether a runtime said it has work left in the last ``pump``
        self.replicas_stalled = 0  #: replicas lost because they stalled (``stall_timeout_s``)
        self._executing = False
        self._shutdown_due = False  #: the engine died: shut down once the queued commands are carried out
        self._death_logged = False  #: why the engine died was logged (by ``fail_engine``'s caller)
        self._stopping_by_itself = False  #: that shutdown runs: no caller hears a runtime's failure to stop
        self.deferred_error: OmniRuntimeError | None = None  #: that failure, raised by ``shutdown()``
        #: (request id, exception) of the first listeners that raised since the last report (each
        #: request was aborted, nothing else); ``listener_error_count`` counts them all, also those not kept
        self.listener_errors: list[tuple[int, Exception]] = []
        self.listener_error_count = 0
        self._sinks = [[self._sink(stage, replica, self.buffers[stage][replica]) for replica in range(len(r))]
                       for stage, r in enumerate(runtimes)]  # fmt: skip
        for stage, replicas in enumerate(self.runtimes):
            for replica, runtime in enumerate(replicas):
                runtime.bind(self._sinks[stage][replica])

    def _sink(self, stage: int, replica: int, buffer: deque[rp.Report]) -> rp.ReportSink:
        """Return the sink of the runtime at ``stage``/``replica`` (a replaced one's keeps filling a buffer nobody
        reads: its late reports go nowhere)."""
        silent_since = self.stall.since[stage]

        buffered = self.driver.report_buffered

        def sink(report: rp.Report) -> None:
            buffer.append(report)
            silent_since[replica] = None
            buffered(stage, replica)

        return sink

    # -- client calls ----------------------------------------------------------------------

    def submit(self, prompt: Prompt, n: int = 1, companions: int = 0, listener: Listener | None = None,
               request_id: str | None = None) -> int:  # fmt: skip
        """Submit; return the request id. Messages go to ``listener`` (called at once) or the mailbox; ``request_id``
        (the client's own id) is on each of them."""
        rid, out = self.orchestrator.submit(prompt, n, companions, request_id)
        if listener is not None:
            self.listeners[rid] = listener
        else:
            self.mailboxes[rid] = deque()
        self.execute(out)
        return rid

    def submit_all(self, prompts: Sequence[Prompt], n: int, companions: int,
                   request_ids: Sequence[str | None] | None,
                   listeners: Sequence[Listener | None]) -> list[int]:  # fmt: skip
        """Submit every prompt (prompt ``i`` with ``request_ids[i]``, ``listeners[i]``); return their request ids.

        All or none: ``RequestRefused`` for a prompt that is not a ``Prompt`` or streams its input, or a request id
        taken (by an open request, or twice here), before any is submitted; a refusal after that (the engine
        died) aborts those submitted already.
        """
        if request_ids is None:
            request_ids = [None] * len(prompts)
        elif not isinstance(request_ids, list | tuple) or len(request_ids) != len(prompts):
            what = f"{len(request_ids)} ids" if isinstance(request_ids, list | tuple) else repr(request_ids)[:80]
            raise RequestRefused(f"request_ids is a list of one id (or None) per prompt: {len(prompts)} prompts, "
                                 f"{what}")  # fmt: skip
        given: set[str] = set()
        for index, (prompt, request_id) in enumerate(zip(prompts, request_ids, strict=True)):
            if not isinstance(prompt, Prompt):
                tip = " (token ids go in a Prompt: Prompt([1, 2, 3]))" if isinstance(prompt, int) else ""
                raise RequestRefused(f"prompt {index} of the list is not an omni_runtime.Prompt but a "
                                     f"{type(prompt).__name__}: {prompt!r:.80}{tip}")  # fmt: skip
            if prompt.streaming:
                raise RequestRefused(f"prompt {index} of the list streams its input: submit it alone and feed it")
            self.orchestrator.check_prompt(prompt, f"prompt {index} of the list")
            self.orchestrator.check_request_id(request_id)
            if request_id in given:
                raise RequestRefused(f"request id {request_id!r} is given to two prompts of the list")
            if request_id is not None:
                given.add(request_id)
        rids: list[int] = []
        try:
            for prompt, request_id, listener in zip(prompts, request_ids, listeners, strict=True):
                rids.append(self.submit(prompt, n, companions, listener, request_id))
        except BaseException:
            for rid in rids:  # nobody will read them: their messages go nowhere
                self.listeners.pop(rid, None)
                self.mailboxes.pop(rid, None)
                self.cancel(rid)
            raise
        return rids

    def abort(self, rid: int | str) -> int:
        """Ask to abort ``rid``; return the abort call id (its answer lands in ``abort_answers``)."""
        call, out = self.orchestrator.abort(rid)
        self.execute(out)
        return call

    def feed(self, rid: int, part: Prompt, last: bool = False) -> None:
        """Feed the next part of ``rid``'s streamed input (``last``: the input ends with it)."""
        self.execute(self.orchestrator.feed(rid, part, last))

    def abort_nowait(self, rid: int | str) -> int:
        """Ask to abort ``rid``; nobody waits for the answer (it is dropped when it comes); return the call id."""
        call, out = self.orchestrator.abort(rid)
        self._unclaimed.add(call)
        self.execute(out)
        return call

    def cancel(self, rid: int) -> None:
        """The consumer of ``rid`` stopped before its terminal: abort it if it still runs (the answer is dropped)."""
        if rid in self.orchestrator.routes and not (self.orchestrator_stopped or self.runtimes_stopped):
            self.abort_nowait(rid)

    def control(self, method: ControlMethod, level: int = 1, tags: frozenset[str] = frozenset()) -> int:
        """Call a control RPC; return its call id (its answer lands in ``rpc_answers``)."""
        call, out = self.orchestrator.control(method, level, tags)
        self.execute(out)
        return call

    def fail_engine(self, reason: str | None = None) -> None:
        """The engine cannot go on (its loop failed): every open request ends as fatal, then it shuts down.

        ``reason`` (its caller logs it) is named by each fatal terminal. Of the commands a failed ``execute``
        left queued, deliveries and answers (already decided: their requests and callers are released) are
        still carried out; work for the runtimes is dropped.
        """
        if not self.orchestrator_stopped:
            self._death_logged = True
            decided = [c for c in self.pending if not isinstance(c, _RUNTIME_COMMANDS)]
            self.pending.clear()
            self.execute(decided + self.orchestrator.engine_died(reason))

    def replace(self, stage: int, replica: int, runtime: rp.StageRuntime) -> None:
        """Put ``runtime`` in the place of ``replica`` of ``stage``, a replica that was lost (its ``ReplicaDied``
        taken: its requests have ended); new work may be bound to it from now on.

        ``runtime`` is bound first; only then is the lost one shut down (what that raises is logged in
        ``history``, not raised: it is gone already). Reports the lost runtime still makes go nowhere. Raises
        ``ConfigError`` for a position the pipeline lacks or an object that is no ``StageRuntime``,
        ``RequestRefused`` for a live replica, ``EngineNotRunning`` once the engine stopped or died; then nothing
        changed. What ``runtime.bind`` raises propagates, and nothing changed either.
        """
        if not (0 <= stage < len(self.runtimes) and 0 <= replica < len(self.runtimes[stage])):
            raise ConfigError(f"replace: pipeline {self.pipeline.name!r} has no replica {stage}/{replica}")
        rp.check_runtime(runtime, f"replace({stage}, {replica}, runtime): runtime")
        self.drain()  # the lost replica's ReplicaDied, if it is buffered still
        if self.orchestrator_stopped or self.runtimes_stopped:
            raise EngineNotRunning("the engine is shut down: no replica is replaced")
        orchestrator = self.orchestrator
        orchestrator.replica_replaced(stage, replica)  # refused: nothing changed
        buffer: deque[rp.Report] = deque()
        sink = self._sink(stage, replica, buffer)
        try:
            runtime.bind(sink)
        except BaseException:
            orchestrator.live[stage][replica] = False  # still lost
            raise
        lost, self.runtimes[stage][replica] = self.runtimes[stage][replica], runtime
        self.stall.since[stage][replica] = None
        self.buffers[stage][replica], self._sinks[stage][replica] = buffer, sink
        try:
            lost.shutdown()
        except Exception as exc:  # outside code, and gone already: noted, not raised
            self.history.append(f"runtime {stage}/{replica} (lost) raised in shutdown: {type(exc).__name__}: {exc}")
        self.history.append(f"runtime {stage}/{replica} replaced")
        self.driver.work_given(stage, replica)

    def shutdown(self) -> None:
        """Shut the orchestrator down (every open request gets its terminal), then the runtimes; idempotent.

        Raises ``OmniRuntimeError`` naming the runtimes that failed to shut down, also when that
        happened as the engine shut itself down after its death (then once, here).
        """
        if not self.orchestrator_stopped:
            self.execute(self.orchestrator.shutdown())
        error, self.deferred_error = self.deferred_error, None
        if error is not None:
            raise error

    def take_hook_error(self) -> OmniRuntimeError | None:
        """Return an error naming what the ``on_step`` hook raised (the engine died of it), once; else ``None``."""
        exc = self.orchestrator.take_hook_error()
        if exc is None:
            return None
        error = OmniRuntimeError(f"the on_step hook raised {type(exc).__name__}: {exc}; every open request ended "
                                 f"as fatal")  # fmt: skip
        error.__cause__ = exc
        return error

    def take_listener_errors(self) -> OmniRuntimeError | None:
        """Return one error naming the listeners that raised since the last call (``None``: none); forget them."""
        count, kept = self.listener_error_count, self.listener_errors
        if not count:
            return None
        self.listener_errors, self.listener_error_count = [], 0
        if count == 1:
            rid, exc = kept[0]
            error = OmniRuntimeError(f"the listener of request {rid} raised {exc!r}; the request is aborted")
        else:
            named = "; ".join(f"request {rid} raised {exc!r}" for rid, exc in kept)
            more = f"; {count - len(kept)} more (logged)" if count > len(kept) else ""
            error = OmniRuntimeError(f"the listeners of {count} requests raised (each request is aborted): "
                                     f"{named}{more}")  # fmt: skip
        error.__cause__ = kept[0][1]
        return error

    # -- reports ------------------------------------------------------------------------------

    def progress(self) -> int:
        """Return how many reports the orchestrator took and did not drop (a watchdog compares two readings)."""
        return self.reports_taken - self.orchestrator.reports_dropped()

    def drain(self) -> bool:
        """Hand every buffered report to the orchestrator, polling stages in order; return whether any."""
        taken, report = 0, self.orchestrator.report
        for stage, replicas in enumerate(self.buffers):
            for replica, buffer in enumerate(replicas):
                while buffer and not self.orchestrator_stopped:
                    self.execute(report(stage, replica, buffer.popleft()))
                    taken += 1
        self.reports_taken += taken
        return taken > 0

    def step_runtimes(self) -> bool:
        """Step every runtime once, in stage order; return whether any has work left."""
        busy = False
        for stage, replicas in enumerate(self.runtimes):
            for replica in range(len(replicas)):
                busy = self.step(stage, replica) or busy
        return busy

    def step(self, stage: int, replica: int) -> bool:
        """Step one runtime; return whether it has work left. One that raises is lost (``ReplicaDied``).

        A lost replica is never stepped again: its ``ReplicaDied`` is taken before any runtime steps again;
        nor is any runtime once the orchestrator has stopped (nobody would take its reports).
        """
        if self.orchestrator_stopped or not self.orchestrator.live[stage][replica]:
            return False
        try:
            busy = self.runtimes[stage][replica].step()
        except Exception as exc:  # outside code: the replica is gone, its requests fail, nothing hangs
            self.history.append(f"runtime {stage}/{replica} raised in step: {type(exc).__name__}: {exc}")
            self.orchestrator.replica_failing(stage, replica, f"its step() raised {type(exc).__name__}: {exc}")
            self._sinks[stage][replica](rp.ReplicaDied())
            return False
        if not busy:
            self.stall.since[stage][replica] = None
        elif self.stall.silent(stage, replica):
            return self._stalled(stage, replica)
        return busy

    def _stalled(self, stage: int, replica: int) -> bool:
        """The replica said it is busy and reported nothing past ``stall_timeout_s``: lose it if it holds requests the
        runtimes owe an answer (not while the client's call holds them); return whether it is still busy."""
        orchestrator = self.orchestrator
        if orchestrator.lifecycle.engine.state in _CLIENT_HELD or not self._owes(stage, replica):
            self.stall.since[stage][replica] = None  # not silence: its clock starts afresh
            return True
        cause = f"it stalled: busy but no report for {self.stall.stall_timeout_s:g} s (stall_timeout_s)"
        _log.error("replica %d/%d is lost: %s", stage, replica, cause)
        self.history.append(f"runtime {stage}/{replica} stalled")
        self.replicas_stalled += 1
        orchestrator.replica_failing(stage, replica, cause)
        self._sinks[stage][replica](rp.ReplicaDied())
        return False

    def _owes(self, stage: int, replica: int) -> bool:
        """Return whether the replica holds a request that waits for it (not for the client's next input part), or
        an RPC call it has not answered."""
        orchestrator, where = self.orchestrator, (stage, replica)
        if any(where in call.waiting for call in orchestrator.routing.rpcs.values()):
            return True
        return any(route.stage == stage and route.replica == replica and not orchestrator.waits_for_client(rid)
                   for rid, route in orchestrator.routes.items())  # fmt: skip

    def pump(self) -> bool:
        """One polling round: take reports, step the runtimes, take reports; return whether anything moved."""
        if self.runtimes_stopped:
            return False
        moved = self.drain()
        busy = self.runtimes_busy = self.step_runtimes()
        return self.drain() or moved or busy

    # -- commands -------------------------------------------------------------------------------

    def execute(self, commands: list[cmd.Command]) -> None:
        """Carry out commands in order (a listener's nested call queues behind them).

        After the engine died, and once every queued command is carried out, the system shuts down.
        """
        if not commands and not self.pending:  # most reports change no command: nothing to do
            return
        self.pending.extend(commands)
        if self._executing:
            return
        self._executing = True
        try:
            while True:
                while self.pending:
                    self._do(self.pending.popleft())
                if not self._shutdown_due:
                    break
                self._shutdown_due, self._stopping_by_itself = False, True
                self.pending.extend(self.orchestrator.shutdown())  # B9: after the fatal terminals, in order
        finally:
            self._executing = False

    def _do(self, c: cmd.Command) -> None:
        kind = c.__class__
        if kind is cmd.Deliver:
            self._deliver(c.message)  # type: ignore[attr-defined]
        elif kind is cmd.Dispatch or kind is cmd.AbortAt or kind is cmd.RpcCall or kind is cmd.FeedInput:
            runtime = self.runtimes[c.stage][c.replica]  # type: ignore[attr-defined]
            try:
                if kind is cmd.Dispatch:
                    runtime.add_request(c.rid, c.stage_input)  # type: ignore[attr-defined]
                elif kind is cmd.FeedInput:
                    if not isinstance(runtime, rp.StreamingInput):
                        raise TypeError(f"{type(runtime).__name__} takes no streamed input (no feed_input)")
                    runtime.feed_input(c.rid, c.part, c.last)  # type: ignore[attr-defined]
                elif kind is cmd.AbortAt:
                    runtime.abort_requests(c.abort_id, c.req_ids)  # type: ignore[attr-defined]
                else:
                    runtime.control(c.call_id, c.method, c.level, c.tags)  # type: ignore[attr-defined]
            except Exception as exc:  # a runtime is outside code: its failure is answered, not propagated
                self.execute(self.orchestrator.runtime_raised(c, f"{type(exc).__name__}: {exc}"))
            self.driver.work_given(c.stage, c.replica)  # type: ignore[attr-defined]
        elif kind is cmd.AbortAnswer or kind is cmd.RpcAnswer:
            if c.call_id in self._unclaimed:  # type: ignore[attr-defined]
                self._unclaimed.discard(c.call_id)  # type: ignore[attr-defined]
            else:  # kept for the caller that waits for it
                answers = self.abort_answers if kind is cmd.AbortAnswer else self.rpc_answers
                answers[c.call_id] = c  # type: ignore[attr-defined,assignment]
            self.driver.answered(c)
        elif kind is cmd.EngineChanged:
            self.engine_state = c.state  # type: ignore[attr-defined]
            if c.state is EngineState.DEAD and not self.orchestrator_stopped:  # type: ignore[attr-defined]
                self._shutdown_due = True
                if self.orchestrator.death and not self._death_logged:  # a hook or a runtime's step() raised
                    _log.error("the engine died: %s; every open request ends as fatal", self.orchestrator.death,
                               exc_info=self.orchestrator.hook_error)  # fmt: skip
        elif kind is cmd.StopOrchestrator:
            self.orchestrator_stopped = True
            self.history.append("orchestrator stopped")
        elif kind is cmd.StopRuntimes:
            self._stop_runtimes()
        elif kind is cmd.ReportAfterFinished:
            _log.warning("runtime %d/%d broke its protocol: %s about request %d after its own Finished of it (dropped)",
                         c.stage, c.replica, c.what, c.rid)  # type: ignore[attr-defined]  # fmt: skip

    def _stop_runtimes(self) -> None:
        if not self._stopping_by_itself:
            self.driver.stop_runtimes(self.shutdown_runtimes)
            return
        try:
            self.driver.stop_runtimes(self.shutdown_runtimes)
        except OmniRuntimeError as exc:  # nobody called: kept for ``shutdown()`` to raise
            self.deferred_error = exc

    def _deliver(self, message: cmd.ClientMessage) -> None:
        listener = self.listeners.get(message.rid)
        if message.finished:
            self.listeners.pop(message.rid, None)
        if listener is not None:
            try:
                listener(message)
            except Exception as exc:  # the consumer broke: like one that stopped early, its request is aborted
                self._listener_failed(message, exc)
        else:
            box = self.mailboxes.get(message.rid)
            if self.stalled and message.rid in self.stalled:  # aborted: only its terminal still goes in
                if not message.finished:
                    return
                self.stalled.discard(message.rid)
                if message.outcome is Outcome.ABORTED:
                    message = attrs.evolve(message, error=STALLED)
            if box is None:
                return
            if self.max_buffered is not None and len(box) >= self.max_buffered and not message.finished:
                self._consumer_stalled(message.rid, len(box))
                return
            box.append(message)
            self.driver.mailed(message.rid)

    def _consumer_stalled(self, rid: int, held: int) -> None:
        _log.warning("request %d: its consumer stalled (%d messages unread); the request is aborted", rid, held)
        self.stalled.add(rid)
        self.cancel(rid)

    def _listener_failed(self, message: cmd.ClientMessage, exc: Exception) -> None:
        _log.error("the listener of request %d raised %r; the request is aborted", message.rid, exc, exc_info=exc)
        self.listener_error_count += 1
        if len(self.listener_errors) < self.LISTENER_ERRORS_KEPT:  # bounded: tracebacks hold frames
            self.listener_errors.append((message.rid, exc))
        self.listeners.pop(message.rid, None)
        if not message.finished:
            self.cancel(message.rid)

    def unclaim(self, call: int) -> None:
        """Nobody waits for the answer of abort or RPC ``call`` any more: drop it when it comes."""
        if self.abort_answers.pop(call, None) is None and self.rpc_answers.pop(call, None) is None:
            self._unclaimed.add(call)

    def shutdown_runtimes(self) -> None:
        """Shut every runtime down (after the orchestrator stopped); idempotent.

        Every runtime is asked, even after one raised; then ``OmniRuntimeError`` names those that did.
        """
        if self.runtimes_stopped:
            return
        self.runtimes_stopped = True
        failed = []
        for stage, replicas in enumerate(self.runtimes):
            for replica, runtime in enumerate(replicas):
                try:
                    runtime.shutdown()
                except Exception as exc:  # outside code: the others still get their shutdown
                    failed.append(f"runtime {stage}/{replica}: {type(exc).__name__}: {exc}")
                    self.history.append(f"runtime {stage}/{replica} raised in shutdown")
                else:
                    self.history.append(f"runtime {stage}/{replica} shut down")
        if failed:
            raise OmniRuntimeError("shutdown raised in " + "; ".join(failed))
