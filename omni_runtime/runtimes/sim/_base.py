"""What every simulated replica shares: reporting (with report-stream faults), RPCs, death."""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from typing import Any

from omni_fsm import ControlMethod
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.core.text import IncrementalText, Tokenizer, stage_tokens
from omni_runtime.runtimes.sim.config import SimConfig


def request_rng(seed: int, stage: int, req_id: int) -> random.Random:
    """Return the request's own generator: its behaviour never depends on scheduling."""
    return random.Random((seed * 1_000_003 + stage) * 1_000_033 + req_id)


class SimRequest:
    """One request inside a simulated replica."""

    __slots__ = ("abort_fails", "arrival", "chunk_at", "fail", "fed", "generated", "input_ended", "length", "no_output",
                 "park", "phase", "preempt_at", "prompt", "req_id", "rng", "seq", "stage_input", "text", "tokens",
                 "turn_start")  # fmt: skip

    def __init__(self, req_id: int, stage_input: StageInput, rng: random.Random, arrival: int = 0) -> None:
        self.req_id, self.stage_input, self.rng = req_id, stage_input, rng
        self.arrival = arrival  #: its place among the replica's requests: each step takes them in this order
        self.prompt: tuple[int, ...] = ()  #: the prompt's token ids (text tokenized by the stage)
        self.text: IncrementalText | None = None  #: AR, detokenizing: the output text so far
        #: AR: what samples its tokens: its sampling seed's own generator, else the request's
        self.tokens: random.Random = rng
        #: a streaming-input session: the parts fed and not taken yet (token ids, last); whether its input ended
        self.fed: list[tuple[tuple[int, ...], bool]] = []
        self.input_ended = not stage_input.streaming
        self.turn_start = 0  #: tokens generated before the current turn of a streaming-input session
        self.phase = "waiting"
        self.seq = self.generated = self.length = 0
        self.park: rp.Status | None = None  #: the wait it parks in before running, if any
        self.preempt_at = self.chunk_at = -1
        self.no_output = self.abort_fails = self.fail = False


#: the phases that hold one of the replica's running slots
HOLDING = frozenset({"running", "parked", "chunk", "streaming"})
#: the phases that wait in the queue for a slot
QUEUED = frozenset({"waiting", "preempted"})


class SimReplica:
    """Base of the simulated AR and diffusion replicas (one replica of one stage).

    A step costs what the replica runs, not what it holds: the slot holders are kept apart (``holding``) and the
    queue is a heap by arrival, so that a replica holding many requests steps in time linear in the work done.
    Both are read against ``requests``, the one record of what the replica holds (a request missing there, or in
    another phase, is skipped and dropped): each step still takes its requests in arrival order.
    """

    def __init__(self, spec: StageSpec, stage: int, replica: int, seed: int = 0,
                 config: SimConfig | None = None) -> None:  # fmt: skip
        self.spec, self.stage, self.replica, self.seed = spec, stage, replica, seed
        self.config = config or SimConfig()
        self.rng = random.Random(seed * 7919 + stage * 131 + replica)  # report-stream faults only
        self.requests: dict[int, SimRequest] = {}
        self.holding: dict[int, SimRequest] = {}  #: the slot holders among ``requests`` (``HOLDING``), by id
        self._queue: list[tuple[int, int]] = []  #: (arrival, id) of the requests waiting for a slot (``QUEUED``)
        self._arrivals = 0
        self.ignored: list[SimRequest] = []  #: the requests whose prompt is 'too long': they end at the next step
        self._indexed = self.requests  #: the dict ``holding``, the queue and ``ignored`` were built from
        self.steps = 0
        self.dead = self.closed = False
        self._sink: rp.ReportSink | None = None
        self._rpcs: list[tuple[int, str | None]] = []  #: (call id, the worker's error) of the RPCs to answer
        self.tokenizer: Tokenizer | None = None  #: the stage's tokenizer (AR stages have one)
        self._delayed: list[tuple[int, rp.Report]] = []
        self._end_of_step: list[rp.Report] = []

    # -- the protocol ---------------------------------------------------------------------

    def bind(self, sink: rp.ReportSink) -> None:
        self._sink = sink

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        if self.dead or self.closed:
            return
        req = SimRequest(req_id, stage_input, request_rng(self.seed, self.stage, req_id), self._arrivals)
        self._arrivals += 1
        req.prompt = stage_tokens(stage_input, self.tokenizer)
        self.plan(req)
        self.requests[req_id] = req
        if req.phase == "ignored":
            self.ignored.append(req)
        self.enqueue(req)

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        if self.dead or self.closed:
            return
        for req_id in req_ids:
            req = self.requests.get(req_id)
            if req is not None and req.abort_fails:
                req.abort_fails = False  # the physical abort fails once; the request keeps running
                self.emit(rp.AbortResult(abort_id, req_id, False, "abort failed in the engine core"))
                continue
            self.requests.pop(req_id, None)
            self.holding.pop(req_id, None)
            self.emit(rp.AbortResult(abort_id, req_id, True))

    def feed_input(self, req_id: int, part: StageInput, last: bool) -> None:
        """Queue the next part of a streaming-input session's input; it is taken when the session waits for it."""
        req = self.requests.get(req_id)
        if self.dead or self.closed or req is None:
            return
        if req.input_ended:
            raise ValueError(f"request {req_id} takes no more input")
        req.fed.append((stage_tokens(part, self.tokenizer, continuation=True), last))
        req.input_ended = last

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        """Take a control RPC as it arrives (answered at the next step); a pause in abort mode ends every request
        in flight now, each reported ``Aborted`` (a request added later waits for resume)."""
        if self.dead or self.closed:
            return
        error = None
        if self.rng.random() < self.config.rpc_error:
            error = "WorkerError: injected failure in a worker"
        elif method is ControlMethod.PAUSE_SCHEDULER:
            try:
                mode = rp.pause_mode(tags)
            except ValueError as exc:
                mode, error = "keep", f"ValueError: {exc}"
            if mode == "abort":
                for req in list(self.requests.values()):
                    self.report(req, rp.Aborted)
                self.requests.clear()
                self.holding.clear()
        self._rpcs.append((call_id, error))

    def step(self) -> bool:
        if self.dead or self.closed:
            return False
        self.steps += 1
        if self._die():
            return False
        for call_id, error in self._rpcs:
            self.emit(rp.RpcResult(call_id, error is None, error))
        self._rpcs.clear()
        self.work()
        self._release_delayed()
        return self.busy()

    def busy(self) -> bool:
        """Return whether the replica has work left."""
        return bool(self.requests or self._rpcs or self._delayed) and not (self.dead or self.closed)

    def shutdown(self) -> None:
        self.closed = True
        self.requests.clear()
        self._rpcs.clear()
        self._delayed.clear()

    # -- for subclasses -------------------------------------------------------------------------

    def plan(self, req: SimRequest) -> None:
        """Decide the request's behaviour up front from its own generator."""
        cfg, rng = self.config, req.rng
        req.no_output = rng.random() < cfg.no_output
        req.fail = rng.random() < cfg.stage_fail
        req.abort_fails = rng.random() < cfg.abort_fail

    def work(self) -> None:
        """Advance every request by one scheduler step."""

    def report(self, req: SimRequest, make: Any, *args: Any) -> None:
        """Emit a per-request report with the request's next sequence number."""
        self.emit(make(req.req_id, req.seq, *args))
        req.seq += 1

    def emit(self, report: rp.Report) -> None:
        """Send ``report`` through the sink, with the configured report-stream faults."""
        assert self._sink is not None, "bind() first"
        cfg = self.config
        if cfg.breaks_stream:
            roll = self.rng.random()
            if roll < cfg.delay:
                self._delayed.append((self.steps + self.rng.randint(1, 3), report))
                return
            if roll < cfg.delay + cfg.reorder:
                self._end_of_step.append(report)
                return
            if roll < cfg.delay + cfg.reorder + cfg.duplicate:
                self._sink(report)
        self._sink(report)

    def _release_delayed(self) -> None:
        late, self._end_of_step = self._end_of_step, []
        due = [r for at, r in self._delayed if at <= self.steps]
        self._delayed = [(at, r) for at, r in self._delayed if at > self.steps]
        for report in (*late, *due):
            assert self._sink is not None
            self._sink(report)

    def _die(self) -> bool:
        here = (self.stage, self.replica, self.steps)
        if self.config.engine_death == here:
            self.dead = True
            self.requests.clear()
            assert self._sink is not None
            self._sink(rp.EngineDead())
            return True
        if here in self.config.replica_deaths:
            self.dead = True
            self.requests.clear()
            assert self._sink is not None
            self._sink(rp.ReplicaDied())
            return True
        return False

    def running(self) -> int:
        """Return the slots in use (running or parked)."""
        return len(self.holders())

    # -- the queue and the slot holders ------------------------------------------------------------------

    def move(self, req: SimRequest, phase: str) -> None:
        """Put ``req`` in ``phase``: a slot holder is kept among ``holding``, a waiting one goes back in the queue."""
        req.phase = phase
        if phase in HOLDING:
            self.holding[req.req_id] = req
        else:
            self.holding.pop(req.req_id, None)
            self.enqueue(req)

    def enqueue(self, req: SimRequest) -> None:
        """Queue ``req`` for a slot by its arrival, if its phase waits for one."""
        if req.phase in QUEUED:
            heapq.heappush(self._queue, (req.arrival, req.req_id))

    def end(self, req: SimRequest) -> None:
        """Forget ``req``: it ended here."""
        self.requests.pop(req.req_id, None)
        self.holding.pop(req.req_id, None)

    def reindex(self) -> None:
        """Build ``holding``, the queue and ``ignored`` anew if ``requests`` was replaced as a whole (a wrapper may
        hide them from one step by swapping in another dict: what it swaps back is indexed again)."""
        if self.requests is self._indexed:
            return
        self._indexed = requests = self.requests
        self.holding = {rid: req for rid, req in requests.items() if req.phase in HOLDING}
        self._queue = [(req.arrival, rid) for rid, req in requests.items() if req.phase in QUEUED]
        heapq.heapify(self._queue)
        self.ignored = sorted((req for req in requests.values() if req.phase == "ignored"), key=_by_arrival)

    def holders(self) -> list[SimRequest]:
        """Return the slot holders in arrival order (those no longer held, or no longer holding, dropped)."""
        self.reindex()
        requests = self.requests
        gone = [rid for rid, req in self.holding.items() if requests.get(rid) is not req or req.phase not in HOLDING]
        for rid in gone:
            del self.holding[rid]
        return sorted(self.holding.values(), key=_by_arrival)

    def next_queued(self) -> SimRequest | None:
        """Take the first request of the queue still waiting for a slot (``None``: none is)."""
        self.reindex()
        queue, requests = self._queue, self.requests
        while queue:
            _, rid = heapq.heappop(queue)
            req = requests.get(rid)
            if req is not None and req.phase in QUEUED:
                return req
        return None

    def schedule(self, free: int) -> list[SimRequest]:
        """Take up to ``free`` requests off the queue, in arrival order (the caller gives each a slot)."""
        taken: list[SimRequest] = []
        while len(taken) < free:
            req = self.next_queued()
            if req is None:
                break
            if req.phase in QUEUED and all(req is not other for other in taken):
                taken.append(req)
        return taken


def _by_arrival(req: SimRequest) -> int:
    return req.arrival
