"""An AR stage replica over vLLM's real v1 ``Scheduler``, with a deterministic stand-in for the model.

Each ``step()`` is one engine step, unrolled as vLLM's ``EngineCore.step()`` does it:
``schedule()``, the (stand-in) model, ``update_from_output()``. Every assignment of a request's
status is observed as it happens (``_observe.ObservedRequest``) and, after each scheduler call,
mapped to the runtime protocol's reports by ``reports_for_moves``: a wait is a ``StatusChanged``, a
final status is a ``Finished`` or ``Failed``, and a turn of a streaming-input session that finishes
and resumes within one call is not an end.

Abort is vLLM's own ``finish_requests(ids, FINISHED_ABORTED)``; its ``AbortResult`` is truthful: ``ok``
only once the scheduler really ended the request, and deferred while the KV connector still holds
the request's blocks. Requests vLLM's engine would reject (an empty prompt, one that does not fit
``max_model_len``, an id outside the vocabulary) are refused at ``add_request``, that request alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.request import Request, RequestStatus

from omni_fsm import ControlMethod, StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import Sampling, StageInput
from omni_runtime.core.text import IncrementalText, stage_tokens
from omni_runtime.runtimes.vllm._config import SchedulerOptions, free_blocks
from omni_runtime.runtimes.vllm._engine import CoreEngine, StandInEngine
from omni_runtime.runtimes.vllm._observe import ObservedRequest
from omni_runtime.runtimes.vllm._plan import RequestPlan, plan_for
from omni_runtime.runtimes.vllm._standin import compile_grammar, grammar_future

RS = RequestStatus
S = rp.Status
#: a request's sampling when its stage input names none: greedy (the stand-in model samples what its plan says)
_GREEDY = Sampling(temperature=0.0)


class _WorkerError(RuntimeError):
    """What a worker raises in a control RPC when the runtime is made with ``rpc_fails``."""

#: a move into one of these statuses is reported as this ``Status``
_MOVE_REPORT: dict[RequestStatus, rp.Status] = {
    RS.RUNNING: S.SCHEDULED,
    RS.PREEMPTED: S.PREEMPTED,
    RS.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR: S.AWAIT_GRAMMAR,
    RS.WAITING_FOR_REMOTE_KVS: S.AWAIT_REMOTE_KVS,
    RS.WAITING_FOR_STREAMING_REQ: S.AWAIT_STREAMING,
}
#: a final status -> how the request ended at this stage (``None``: it failed). ``FINISHED_ABORTED`` that the
#: binding did not ask for is vLLM ending a parked streaming-input session when its input ended (``SESSION_END``):
#: the session ends as its last turn did.
_END: dict[RequestStatus, StopKind | None] = {
    RS.FINISHED_STOPPED: StopKind.STOP,
    RS.FINISHED_LENGTH_CAPPED: StopKind.LENGTH,
    RS.FINISHED_REPETITION: StopKind.REPETITION,
    RS.FINISHED_IGNORED: StopKind.IGNORED,
    RS.FINISHED_ERROR: None,
}
SESSION_END = "session_end"
#: one request's status moves within one scheduler call: (old or ``None`` at creation, new)
Moves = Sequence[tuple[RequestStatus | None, RequestStatus]]
#: what one request's moves say: a ``Status`` to report; ``("end", StopKind or None: failed)``; ``(SESSION_END,
#: None)``; or ``("turn", StopKind)``, a streaming-input turn that ended (not reported: the session goes on)
Said = rp.Status | tuple[str, StopKind | None]
#: observers of raw moves: (request id, old, new), called as each assignment happens
MoveHook = Callable[[int, RequestStatus | None, RequestStatus], None]


def reports_for_moves(moves: Moves) -> list[Said]:
    """Return what one request's moves within one scheduler call say, in order (see ``_reports_for``)."""
    return list(_reports_for(tuple(moves)))


@functools.lru_cache(maxsize=4096)
def _reports_for(moves: tuple[tuple[RequestStatus | None, RequestStatus], ...]) -> tuple[Said, ...]:
    """Return what one request's moves within one scheduler call say, in order.

    A move into a final status followed by a move out of it in the same call (a resumable
    request's turn ended and it resumed) is reported as the wait for the next input
    (``AWAIT_STREAMING``, then ``INPUT_READY`` when that input was already queued), not as an end.
    """
    said: list[Said] = []  # memoised: a call's moves are a short sequence over a closed vocabulary
    for i, (old, new) in enumerate(moves):
        if RS.is_finished(new):
            if i + 1 < len(moves):
                said.append(("turn", _END.get(new)))
            elif new is RS.FINISHED_ABORTED:
                said.append((SESSION_END, None))
            else:
                said.append(("end", _END[new]))
        elif old is not None and RS.is_finished(old):
            said.append(S.AWAIT_STREAMING)
            if new is RS.WAITING:
                said.append(S.INPUT_READY)
        elif new is RS.WAITING:
            if old is not None:
                said.append(S.INPUT_READY)
        else:
            said.append(_MOVE_REPORT[new])
    return tuple(said)


class LiveRequest:
    """The binding's view of one request it accepted and has not ended."""

    __slots__ = ("added_at", "grammar", "plan", "req_id", "request", "resumable", "sampling", "seq", "stream_left",
                 "text", "turn_end")  # fmt: skip

    def __init__(self, req_id: int, plan: RequestPlan, added_at: int, sampling: Sampling | None) -> None:
        self.req_id, self.plan, self.added_at, self.seq, self.sampling = req_id, plan, added_at, 0, sampling
        self.text: IncrementalText | None = None  #: its output text so far (when it detokenizes)
        self.resumable = plan.streaming  #: a streaming-input session
        self.turn_end: StopKind | None = StopKind.STOP  #: how its last streaming-input turn ended
        self.request: Request | None = None
        self.grammar: Any = None  #: the grammar compilation in flight
        #: the streamed input still to send: (step it arrives, prompt token ids, whether the input ends there)
        self.stream_left: list[tuple[int, tuple[int, ...], bool]] = []


#: (stage spec, request id, stage input) -> the request's plan
PlanSource = Callable[[StageSpec, int, StageInput], RequestPlan]


class VllmSchedulerRuntime:
    """One AR stage replica on vLLM's real scheduler (``options``) with the stand-in model.

    ``plans`` decides each request's ``RequestPlan`` (default: drawn from ``seed`` and the request id);
    ``rpc_fails`` makes every control RPC fail in the "workers"; ``on_move`` sees every raw status
    assignment ``(req_id, old, new)`` as it happens (the upstream-contract test records them).
    """

    def __init__(self, spec: StageSpec, options: SchedulerOptions | None = None, *, seed: int = 0,
                 plans: PlanSource | None = None, rpc_fails: bool = False, on_move: MoveHook | None = None,
                 engine: StandInEngine | CoreEngine | None = None) -> None:  # fmt: skip
        self.spec = spec
        self.options = options or SchedulerOptions(max_num_seqs=spec.max_running)
        self.engine = engine or StandInEngine(self.options)
        self.scheduler = self.engine.scheduler
        self.connector = self.engine.connector
        self.seed, self.rpc_fails, self.on_move = seed, rpc_fails, on_move
        self._plans = plans or self._drawn_plan
        self._hasher = self.engine.block_hasher
        self._sink: rp.ReportSink | None = None
        self._live: dict[int, LiveRequest] = {}
        self._log: list[tuple[Request, RequestStatus | None, RequestStatus]] = []
        self._refused: list[tuple[int, str]] = []
        #: vLLM id -> (abort id, req id) of the aborts owed once vLLM let go of the request (a KV transfer held it)
        self._deferred: dict[str, list[tuple[int, int]]] = {}
        self._rpcs: list[tuple[int, str | None]] = []  #: (call id, error) of the control RPCs to answer
        self._engine_aborts = False  #: within a pause in abort mode: an abort nobody sent is the engine's
        self._held: set[ControlMethod] = set()  #: PAUSE_SCHEDULER and SLEEP in effect
        self._in_flight: list[tuple[Any, Any]] = []  #: asynchronous scheduling: batches scheduled, output not applied
        self.steps = 0
        self.closed = False

    @property
    def vocab_size(self) -> int:
        """Return the model's vocabulary size (``protocol.DeclaresVocabulary``: the engine checks prompts with it)."""
        return self.engine.vocab_size

    def _drawn_plan(self, spec: StageSpec, req_id: int, stage_input: StageInput) -> RequestPlan:
        return plan_for(self.seed, req_id, stage_input.max_tokens or spec.max_tokens, self.connector is not None)

    # -- the protocol ---------------------------------------------------------------------------

    def bind(self, sink: rp.ReportSink) -> None:
        self._sink = sink

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        if self.closed:
            return
        problem: str | None
        try:
            token_ids = stage_tokens(stage_input, self.engine.tokenizer)
        except ValueError as exc:
            token_ids, problem = (), str(exc)
        else:
            problem = self._refusal(token_ids)
        if problem is not None:
            self._refused.append((req_id, problem))
            return
        plan = self._plans(self.spec, req_id, stage_input)
        if isinstance(self.engine, CoreEngine) and plan.stand_in_only():
            raise ValueError(f"request {req_id}: {', '.join(plan.stand_in_only())} describe the stand-in model and "
                             f"its world; a real engine decides them itself")  # fmt: skip
        sampling = stage_input.sampling
        live = LiveRequest(req_id, plan, self.steps, sampling)
        live.resumable = plan.streaming or stage_input.streaming
        if sampling is None or sampling.detokenize:
            live.text = IncrementalText(self.engine.tokenizer, sampling.stop if sampling is not None else (), token_ids)
        self._live[req_id] = live
        live.request = self._request(live, token_ids, live.resumable)
        if plan.grammar_steps is not None:
            assert live.request.structured_output_request is not None
            live.grammar = live.request.structured_output_request.grammar = grammar_future()
        arrivals = [(self.steps + at, chunk, False) for at, chunk in plan.stream]
        if plan.stream_end_after is not None:
            last = arrivals[-1][0] if arrivals else self.steps
            arrivals.append((last + plan.stream_end_after, (), True))
        live.stream_left = arrivals
        self.engine.add_request(live.request)

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        if self.closed:
            return
        self._flush()
        for req_id in req_ids:
            live = self._live.get(req_id)
            key = str(req_id)
            if live is None and key in self._deferred:  # an abort already waits for its blocks: so does this one
                self._deferred[key].append((abort_id, req_id))
                continue
            if live is None:  # ended (or refused, or never accepted): it is gone
                self._refused = [(r, why) for r, why in self._refused if r != req_id]
                self._emit(rp.AbortResult(abort_id, req_id, True))
                continue
            assert live.request is not None
            try:
                self.scheduler.finish_requests(key, RS.FINISHED_ABORTED)
                failure = None
            except Exception as exc:  # judged below by the request's status, as if it had returned
                failure = f"{type(exc).__name__}: {exc}"
            if live.request.status is not RS.FINISHED_ABORTED:
                status = live.request.status.name
                why = failure or f"the scheduler left the request {status}"
                self._emit(rp.AbortResult(abort_id, req_id, False, why))
                continue
            del self._live[req_id]
            self._log = [m for m in self._log if m[0] is not live.request]
            if key in self.scheduler.requests:  # vLLM keeps it (and its blocks) until a KV transfer lets go
                self._deferred[key] = [(abort_id, req_id)]
            else:
                self._emit(rp.AbortResult(abort_id, req_id, True))

    def feed_input(self, req_id: int, part: StageInput, last: bool) -> None:
        """Queue the next part of a streaming-input session's input (``last``: its input ends with it); vLLM takes
        it at the next step as an update of the same request."""
        live = self._live.get(req_id)
        if self.closed or live is None:
            return
        if not live.resumable:
            raise ValueError(f"request {req_id} is not a streaming-input session")
        tokens = stage_tokens(part, self.engine.tokenizer, continuation=True)
        vocab = self.engine.vocab_size
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:  # vLLM's input processor checks every part of a streamed input as it checks a prompt
            raise ValueError(f"token id {bad[0]} is outside the model's vocabulary (0..{vocab - 1})")
        assert live.request is not None
        queued = sum(len(chunk) for _, chunk, _ in live.stream_left)
        total = live.request.num_tokens + queued + len(tokens)
        if total >= self.options.max_model_len:
            raise ValueError(f"the session would hold {total} tokens, leaving no room under "
                             f"max_model_len={self.options.max_model_len}")  # fmt: skip
        if tokens:
            live.stream_left.append((self.steps, tuple(tokens), False))
        if last:  # vLLM's end of a session's input: an update with no tokens that is not resumable
            live.stream_left.append((self.steps, (), True))
            live.resumable = False

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        """Take a control RPC as it arrives (answered at the next step): the engine runs it now, so a pause in
        abort mode ends the requests in flight, each reported ``Aborted``, and none added after it."""
        if self.closed:
            return
        error = None
        try:
            mode = rp.pause_mode(tags) if method is ControlMethod.PAUSE_SCHEDULER else "keep"
            if self.rpc_fails:
                raise _WorkerError(f"{method.value} raised in a worker")
            self._flush()
            self._engine_aborts = mode == "abort"
            self.engine.control(method, mode)
            self._flush()
        except Exception as exc:  # the engine refused or failed it: nothing changed, the caller is told
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self._engine_aborts = False
        if error is None:
            if method in (ControlMethod.PAUSE_SCHEDULER, ControlMethod.SLEEP):
                self._held.add(method)
            else:
                self._held.discard(ControlMethod.SLEEP if method is ControlMethod.WAKE_UP else
                                   ControlMethod.PAUSE_SCHEDULER)  # fmt: skip
        self._rpcs.append((call_id, error))

    def step(self) -> bool:
        if self.closed:
            return False
        self.steps += 1
        self._answer_rpcs()
        for req_id, why in self._refused:
            self._emit(rp.Failed(req_id, 0, why))
        self._refused.clear()
        self._arrivals()
        self._flush()
        if self.options.async_scheduling:
            self._step_async()
        elif self._may_step() and self._wants_batch():
            so = self.scheduler.schedule()
            self._flush()
            self._update(so, self.engine.execute(so))
        return self.busy()

    def _step_async(self) -> None:
        """One step as ``EngineCore.step_with_batch_queue`` takes it: schedule the next batch before the last one's
        output is applied, while fewer than two are in flight; else apply the oldest batch's output."""
        if self._may_step() and self._wants_batch():
            so = self.scheduler.schedule()
            self._flush()
            self._in_flight.append((so, self.engine.execute(so)))  # the batch runs now; its output is applied later
            if len(self._in_flight) < 2 and (so.total_num_scheduled_tokens > 0 or self.scheduler.has_requests()):
                return
        if self._in_flight:
            self._update(*self._in_flight.pop(0))

    def _update(self, so: Any, out: Any) -> None:
        self._flush(self.scheduler.update_from_output(so, out))
        self._release_deferred()

    def busy(self) -> bool:
        """Return whether work is left (requests, transfers, answers owed)."""
        return not self.closed and bool(self._live or self._refused or self._rpcs or self._has_work())

    def shutdown(self) -> None:
        if not self.closed:
            self.closed = True  # nothing is reported from here on
            # the requests it still holds leave the engine with it (an engine shared by runtimes, one after
            # another, is left as found; a private one is stopped next anyway); nothing is reported for them
            held = [str(req_id) for req_id, live in self._live.items() if live.request is not None]
            if held:
                self.scheduler.finish_requests(held, RS.FINISHED_ABORTED)
            self.engine.shutdown()
        self.closed = True
        self._live.clear()
        self._log.clear()
        self._refused.clear()
        self._rpcs.clear()
        self._deferred.clear()
        self._in_flight.clear()

    # -- inside ---------------------------------------------------------------------------------

    def _refusal(self, token_ids: tuple[int, ...]) -> str | None:
        """Return why vLLM's engine would reject this prompt (``None``: it would take it)."""
        if not token_ids:
            return "vLLM rejects an empty prompt"
        limit = self.options.max_model_len
        if len(token_ids) >= limit:
            return f"a prompt of {len(token_ids)} tokens leaves no room under max_model_len={limit}"
        vocab = self.engine.vocab_size
        bad = [t for t in token_ids if not 0 <= t < vocab]
        if bad:
            return f"token id {bad[0]} is outside the model's vocabulary (0..{vocab - 1})"
        return None

    def _request(self, live: LiveRequest, token_ids: Sequence[int] | None, resumable: bool) -> Request:
        """Return the request vLLM schedules (observed), or, once it exists, a carrier of a streamed-input update
        (a plain ``Request`` for the same id: vLLM copies its fields into the session and never schedules it)."""
        plan, sampling = live.plan, live.sampling or _GREEDY
        stop_ids = [*sampling.stop_token_ids, *([plan.stop_at[1]] if plan.stop_at else [])]
        params = SamplingParams(max_tokens=plan.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k, seed=sampling.seed, ignore_eos=sampling.ignore_eos,
                                stop_token_ids=stop_ids or None,
                                structured_outputs=StructuredOutputsParams(regex="[a-z]+")
                                if plan.grammar_steps is not None and live.request is None else None)  # fmt: skip
        params.update_from_generation_config({}, eos_token_id=self.engine.eos_token_id)
        if live.request is not None:
            return Request(str(live.req_id), list(token_ids or ()), params, None, resumable=resumable)
        return ObservedRequest(str(live.req_id), sampling_params=params, pooling_params=None, hook=self._observe,
                               plan=plan, block_hasher=self._hasher, resumable=resumable,
                               **self._prompt(live, token_ids))  # fmt: skip

    def _prompt(self, live: LiveRequest, token_ids: Sequence[int] | None) -> dict[str, Any]:
        """Return a new request's prompt, as vLLM's ``Request`` takes it (a subclass may give prompt embeddings)."""
        return {"prompt_token_ids": list(token_ids or ())}

    def _observe(self, request: Request, old: RequestStatus | None, new: RequestStatus) -> None:
        self._log.append((request, old, new))
        if self.on_move is not None:
            self.on_move(int(request.request_id), old, new)

    def _may_step(self) -> bool:
        """Return whether to step vLLM: not while paused or asleep, unless a KV transfer must go on (vLLM's engine
        keeps stepping a paused scheduler, which then schedules no tokens, while requests are held)."""
        return not self._held or (self.connector is not None and bool(self.connector.loading or self.connector.saving))

    def _wants_batch(self) -> bool:
        """Return whether a batch is worth scheduling: requests (or finished ones to clear), or KV transfers."""
        transfers = self.connector is not None and bool(self.connector.loading or self.connector.saving)
        return self.scheduler.has_requests() or transfers or bool(self._deferred)

    def _has_work(self) -> bool:
        return self._wants_batch() or bool(self._in_flight)

    def _arrivals(self) -> None:
        """What arrives from outside the scheduler: grammars compiled, chunks of streamed input."""
        for live in list(self._live.values()):
            if live.grammar is not None and self.steps - live.added_at > (live.plan.grammar_steps or 0):
                compile_grammar(live.grammar, live.plan.grammar_fails)
                live.grammar = None
            while live.stream_left and live.stream_left[0][0] <= self.steps:
                _, chunk, last = live.stream_left[0]
                if last and live.request is not None and live.request.status is not RS.WAITING_FOR_STREAMING_REQ:
                    break  # the end of the input waits until the session waits for input: queued while a turn runs,
                    # vLLM 0.32 can go on to schedule the session with nothing to compute (an assertion in schedule())
                live.stream_left.pop(0)
                # a part (or the end of the input) for the same request id: vLLM's streaming-input update
                self.engine.add_request(self._request(live, chunk, not last))

    def take_moves(self) -> dict[str, tuple[Said, ...]]:
        """Return what the status assignments since the last call say, per vLLM request id (the observation)."""
        log = self._log
        if not log:
            return {}
        self._log = []
        moves: dict[str, list[tuple[RequestStatus | None, RequestStatus]]] = {}
        for request, old, new in log:
            moves.setdefault(request.request_id, []).append((old, new))
        return {key: _reports_for(tuple(m)) for key, m in moves.items()}

    def _flush(self, engine_outputs: Any = None) -> None:
        """Report what the scheduler did since the last flush: each request's tokens, then its moves."""
        said_by_request = self.take_moves()
        turned: list[LiveRequest] = []
        if engine_outputs:  # the hot path: one Output per request and step
            sink, live_of = self._sink, self._live.get
            assert sink is not None, "bind() first"
            for outputs in engine_outputs.values():
                for o in outputs.outputs:
                    new = o.new_token_ids
                    live = live_of(int(o.request_id)) if new else None
                    if live is None:
                        continue
                    new, text = tuple(new), live.text
                    sink(rp.Output(live.req_id, live.seq, len(new), new, None if text is None else text.add(new)))
                    live.seq += 1
                    if text is not None and text.stop_reason is not None:
                        self._stop_on_string(live, text.stop_reason)  # its moves in this call are not reported
        for key, saids in said_by_request.items():
            live = self._live.get(int(key))
            if live is None:
                continue
            for said in saids:
                if isinstance(said, rp.Status):
                    self._report(live, rp.StatusChanged, said)
                    continue
                what, stop = said
                if what == "turn":
                    live.turn_end = stop
                    turned.append(live)
                    continue
                assert live.request is not None
                if what == SESSION_END and self._engine_aborts:  # the engine ended it: pause in abort mode
                    self._report(live, rp.Aborted)
                elif what == SESSION_END and live.turn_end is not None:
                    self._rest_of_text(live)
                    self._report(live, rp.Finished, live.turn_end)
                elif stop is None or what == SESSION_END:
                    self._report(live, rp.Failed, f"vLLM finished the request {live.request.status.name}")
                else:
                    self._rest_of_text(live)
                    self._report(live, rp.Finished, stop, None, live.request.stop_reason)
                del self._live[live.req_id]
        for live in turned:
            self._end_if_lost(live)

    def _rest_of_text(self, live: LiveRequest) -> None:
        """Report the text held back (a possible stop string's start) before the request finishes, if any."""
        rest = live.text.add((), final=True) if live.text is not None else ""
        if rest:
            self._report(live, rp.Output, 0, (), rest)

    def _stop_on_string(self, live: LiveRequest, stop: str) -> None:
        """End a request whose text reached a stop string, as vLLM's frontend does: the engine request is aborted
        (its tokens past the string are never reported) and the request finishes ``stop`` with the string."""
        assert live.request is not None
        del self._live[live.req_id]
        if not RS.is_finished(live.request.status):
            self.scheduler.finish_requests(live.request.request_id, RS.FINISHED_ABORTED)
        self._log = [m for m in self._log if m[0] is not live.request]
        self._report(live, rp.Finished, StopKind.STOP, None, stop)

    def _end_if_lost(self, live: LiveRequest) -> None:
        """End a session vLLM resumed but no longer schedules: vLLM 0.32 drops a session that stopped while
        preempted from its queues right after resuming it (``update_from_output``, stopped preempted requests), so
        it would wait for ever. It ends with an error, as vLLM's own status then says."""
        request, scheduler = live.request, self.scheduler
        if request is None or live.req_id not in self._live or RS.is_finished(request.status):
            return
        if request in scheduler.running or request in scheduler.waiting or request in scheduler.kv_holding_waiting:
            return
        scheduler.finish_requests(request.request_id, RS.FINISHED_ERROR)

    def _release_deferred(self) -> None:
        for key in [k for k in self._deferred if k not in self.scheduler.requests]:
            for abort_id, req_id in self._deferred.pop(key):
                self._emit(rp.AbortResult(abort_id, req_id, True))

    def _answer_rpcs(self) -> None:
        for call_id, error in self._rpcs:
            self._emit(rp.RpcResult(call_id, error is None, error))
        self._rpcs.clear()

    def _report(self, live: LiveRequest, make: Any, *args: Any) -> None:
        self._emit(make(live.req_id, live.seq, *args))
        live.seq += 1

    def _emit(self, report: rp.Report) -> None:
        assert self._sink is not None, "bind() first"
        self._sink(report)

    def blocks(self) -> tuple[int, int]:
        """Return (free KV blocks, blocks in the pool): equal once nothing holds a block."""
        return free_blocks(self.scheduler)
