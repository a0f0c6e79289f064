"""The upstream contract (AR-INV-001), observed on vLLM's real scheduler: programs, their runner, the rules.

A *program* is a list of operations on a one-stage pipeline whose one replica is the vLLM scheduler
runtime: add a request (its ``RequestPlan`` and prompt), step the engine, abort a request, abort
every request waiting. ``run_program`` runs it through the orchestrator (``Engine``) and returns
every broken rule as a line naming the rule, the request and what was seen. The rules are written
from the contract, not from the binding: they read vLLM's own status assignments (recorded as they
happen), vLLM's own finish-reason map, the lifecycle's ``Rejected`` observations, the client
messages and the scheduler's block pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from omni_fsm import StageKind
from omni_fsm import observations as ob
from omni_fsm.invariants import Monitor
from omni_fsm.invariants import upstream as up
from omni_runtime import Prompt, simple_pipeline
from omni_runtime.core.commands import ClientMessage
from omni_runtime.core.protocol import AbortResult
from omni_runtime.engines.engine import Engine
from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime

RS = RequestStatus


@attrs.frozen
class Add:
    plan: RequestPlan
    prompt_len: int = 8
    shared_prefix: bool = False  #: its prompt starts like every other shared-prefix prompt (prefix-cache hits)


@attrs.frozen
class Step:
    rounds: int = 1


@attrs.frozen
class Abort:
    pick: int = 0  #: which open request (modulo the open ones, in submission order)


@attrs.frozen
class AbortWaiting:
    """Abort every open request whose last status in vLLM is a wait (preempted, or parked)."""


@attrs.frozen
class Setup:
    max_num_seqs: int = 2
    num_blocks: int = 64
    prefix_caching: bool = False
    connector: bool = False
    async_scheduling: bool = False  #: vLLM's ``AsyncScheduler``, step N+1 scheduled before step N's output applied
    block_size: int = 16


Op = Add | Step | Abort | AbortWaiting
WAITS = {RS.PREEMPTED, RS.WAITING_FOR_REMOTE_KVS, RS.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR,
         RS.WAITING_FOR_STREAMING_REQ}  # fmt: skip
#: rounds ``run_program`` gives the engine to drain before it calls the rest a hang
DRAIN_ROUNDS = 2000

# -- strategies ---------------------------------------------------------------------------------------------


@st.composite
def _stream(draw: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    at, chunks = 0, []
    for _ in range(draw(st.integers(0, 2))):
        at += draw(st.integers(1, 6))
        chunks.append((at, tuple(draw(st.lists(st.integers(4, 899), min_size=1, max_size=4)))))
    return tuple(chunks)


@st.composite
def plans(draw: Any) -> RequestPlan:
    """Return a request plan: EOS, stop tokens, max tokens, grammars, KV loads and saves, streamed input."""
    max_tokens = draw(st.integers(1, 10))
    index = st.integers(0, 9)
    grammar = draw(st.none() | st.integers(0, 3))
    streaming = grammar is None and draw(st.booleans())
    return RequestPlan(max_tokens=max_tokens, eos_at=draw(st.none() | index),
                       stop_at=draw(st.none() | st.tuples(index, st.integers(900, 999))), grammar_steps=grammar,
                       grammar_fails=draw(st.booleans()), kv_load_steps=draw(st.none() | st.integers(0, 3)),
                       kv_load_fails=draw(st.booleans()), kv_save_steps=draw(st.none() | st.integers(0, 3)),
                       stream=draw(_stream()) if streaming else (),
                       stream_end_after=draw(st.integers(0, 4)) if streaming else None)  # fmt: skip


def ops() -> st.SearchStrategy[Op]:
    """Return a strategy for one operation (adds and steps most often)."""
    add = st.builds(Add, plans(), st.integers(1, 40), st.booleans())
    return st.one_of(add, add, st.builds(Step, st.integers(1, 4)), st.builds(Step, st.integers(1, 4)),
                     st.builds(Abort, st.integers(0, 15)), st.just(AbortWaiting()))  # fmt: skip


def programs() -> st.SearchStrategy[list[Op]]:
    """Return a strategy for programs of 1-30 operations."""
    return st.lists(ops(), min_size=1, max_size=30)


def pressure_programs() -> st.SearchStrategy[list[Op]]:
    """Return a strategy for programs under KV pressure (with ``PRESSURE``): 2-4 requests of 28-32 prompt tokens
    growing by 8 to 10, on a cache that holds their prompts but not all their growth, so running requests are
    preempted; aborts and steps between, every behaviour of a plan possible."""
    # no streaming sessions here: vLLM keeps a parked session's KV blocks, and two of them on this cache can wait
    # for ever for a block to take their next chunk (seen on vLLM 0.32; docs/vllm.md)
    long = plans().map(lambda plan: attrs.evolve(plan, max_tokens=max(plan.max_tokens, 8), stream=(),
                                                 stream_end_after=None))  # fmt: skip
    add = st.builds(Add, long, st.integers(28, 32), st.booleans())
    rest = st.lists(st.one_of(st.builds(Step, st.integers(1, 4)), st.builds(Abort, st.integers(0, 15)),
                              st.just(AbortWaiting())), max_size=6)  # fmt: skip
    return st.tuples(st.lists(add, min_size=2, max_size=4), rest).map(lambda pair: [*pair[0], Step(2), *pair[1]])


#: the cache ``pressure_programs`` run on: 5 blocks of 16 tokens (one request's longest sequence fits in it)
PRESSURE = (16, 6)
#: (block size, blocks): an ample cache, and tight ones. With 4-token blocks a decode step often needs a new block,
#: so requests are preempted; 22 blocks still hold the longest request a program makes (40 prompt tokens, two
#: chunks of at most 4, three turns of at most 10 tokens: 20 blocks)
CACHES = ((16, 64), (16, 10), (4, 22), (4, 26))


def setups(async_scheduling: bool = False, caches: tuple[tuple[int, int], ...] = CACHES,
           fewest_seqs: int = 1) -> st.SearchStrategy[Setup]:  # fmt: skip
    """Return a strategy for the scheduler's settings: tight or ample KV cache, prefix caching, the connector."""
    return st.sampled_from(caches).flatmap(lambda cache: st.builds(
        Setup, st.integers(fewest_seqs, 4), st.just(cache[1]), st.booleans(), st.booleans(), st.just(async_scheduling),
        st.just(cache[0])))  # fmt: skip


# -- the runner ----------------------------------------------------------------------------------------------


def _prompt_tokens(n: int, add: Add) -> tuple[int, ...]:
    if add.shared_prefix:
        return tuple(10 + k for k in range(add.prompt_len))
    return tuple(100 + (n * 37 + k) % 700 for k in range(add.prompt_len))


class _Run:
    """One program's run: the engine, what was recorded, and the rules judged over it."""

    def __init__(self, setup: Setup, fault: type | None) -> None:
        self.pipeline = simple_pipeline([StageKind.AR], [True], replicas=1, max_running=setup.max_num_seqs)
        base = AsyncScheduler if setup.async_scheduling else Scheduler
        scheduler_cls = None if fault is None else type(f"{fault.__name__}{base.__name__}", (fault, base), {})
        options = SchedulerOptions(max_num_seqs=setup.max_num_seqs, num_blocks=setup.num_blocks,
                                   block_size=setup.block_size, enable_prefix_caching=setup.prefix_caching,
                                   kv_connector=setup.connector,
                                   async_scheduling=setup.async_scheduling, scheduler_cls=scheduler_cls)  # fmt: skip
        self.queue: list[RequestPlan] = []
        self.plans: dict[int, RequestPlan] = {}
        self.runtime = VllmSchedulerRuntime(self.pipeline.stages[0], options, plans=self._plan, on_move=self._moved)
        bind = self.runtime.bind
        self.runtime.bind = lambda sink: bind(self._judged(sink))  # type: ignore[method-assign]
        self.monitor = Monitor(self.pipeline.kinds, self.pipeline.final, self.pipeline.slots)
        self.engine = Engine(self.pipeline, [[self.runtime]], on_step=self._stepped)
        scheduler = self.runtime.scheduler
        self._update, scheduler.update_from_output = scheduler.update_from_output, self._updated  # type: ignore[method-assign]
        self.moves: dict[int, list[tuple[RS | None, RS]]] = {}
        self.messages: dict[int, list[ClientMessage]] = {}
        self.aborted: set[int] = set()  #: requests the program aborted while vLLM still had them unfinished
        self.broken: list[str] = []

    def _plan(self, spec: Any, req_id: int, stage_input: Any) -> RequestPlan:
        self.plans[req_id] = plan = self.queue.pop(0)
        return plan

    def _moved(self, req_id: int, old: RS | None, new: RS) -> None:
        seen = self.moves.setdefault(req_id, [])
        last = seen[-1][1] if seen else None
        if old != last:
            self.broken.append(f"AR-INV-001 request {req_id}: moved from {old} but was last seen {last}")
        resumable = self.plans[req_id].streaming if req_id in self.plans else False
        if not up.vllm_move_allowed(old, new, resumable):
            what = "resumable " if resumable else ""
            self.broken.append(f"AR-INV-001 {what}request {req_id}: {old} -> {new} is not an upstream vLLM move")
        seen.append((old, new))

    def _judged(self, sink: Any) -> Any:
        """Return ``sink`` behind a judge of the runtime's abort answers: ``ok`` only once vLLM let go of the request
        (it no longer tracks it, so no KV block of it is held)."""

        def judged(report: Any) -> None:
            if isinstance(report, AbortResult) and report.ok and str(report.req_id) in self.runtime.scheduler.requests:
                self.broken.append(f"ORCH-INV-202 request {report.req_id}: abort answered ok while vLLM still holds "
                                   f"it ({self.runtime.scheduler.requests[str(report.req_id)].status})")  # fmt: skip
            sink(report)

        return judged

    def _updated(self, so: Any, out: Any) -> Any:
        """vLLM's ``update_from_output``, its outputs judged: no token for a request after vLLM aborted it (with
        asynchronous scheduling, a placeholder resolved after the abort must not reach anyone)."""
        outputs = self._update(so, out)
        for engine_outputs in outputs.values():
            for o in engine_outputs.outputs:
                rid = int(o.request_id)
                if o.new_token_ids and RS.FINISHED_ABORTED in (new for _, new in self.moves.get(rid, [])):
                    self.broken.append(f"ORCH-INV-209 request {rid}: vLLM output {o.new_token_ids} after its abort")
        return outputs

    def _stepped(self, event: Any, observations: Any) -> None:
        for o in observations:
            if isinstance(o, ob.Rejected):
                self.broken.append(f"table: request {o.rid}: the lifecycle has no row for {o.event} "
                                   f"(vLLM moves so far: {self._path(o.rid)})")  # fmt: skip
        self.monitor.step(event, observations)

    def _path(self, rid: int) -> str:
        return " ".join(str(new) for _, new in self.moves.get(rid, []))

    def _listener(self, message: ClientMessage) -> None:
        self.messages[message.rid].append(message)

    # -- operations ----------------------------------------------------------------------------------------

    def add(self, op: Add) -> None:
        self.queue.append(op.plan)
        prompt = Prompt(_prompt_tokens(len(self.messages), op), max_tokens=op.plan.max_tokens)
        rid = self.engine.host.orchestrator.next_rid
        self.messages[rid] = []
        assert self.engine.host.submit(prompt, listener=self._listener) == rid

    def step(self, rounds: int) -> None:
        for _ in range(rounds):
            self.engine.host.pump()

    def abort(self, rids: Sequence[int]) -> None:
        for rid in rids:
            live = self._vllm_status(rid)
            if live is not None and not RS.is_finished(live):
                self.aborted.add(rid)
            self.engine.host.abort_nowait(rid)
            self.engine.host.drain()
            after = self._vllm_status(rid)
            if live is not None and not RS.is_finished(live) and after is not RS.FINISHED_ABORTED:
                self.broken.append(f"AR-INV-001 request {rid}: aborted in {live}, left {after} (abort must end "
                                   f"every unfinished request, whatever its status)")  # fmt: skip

    def open_requests(self) -> list[int]:
        return [rid for rid, ms in self.messages.items() if not (ms and ms[-1].finished)]

    def _vllm_status(self, rid: int) -> RS | None:
        seen = self.moves.get(rid)
        return seen[-1][1] if seen else None

    # -- the rules at the end --------------------------------------------------------------------------------

    def finish(self) -> list[str]:
        rounds = 0
        while self.engine.host.pump():
            rounds += 1
            if rounds > DRAIN_ROUNDS:
                stuck = {rid: str(self._vllm_status(rid)) for rid in self.open_requests()}
                self.broken.append(f"liveness: still busy after {DRAIN_ROUNDS} rounds; open: {stuck}")
                break
        for line in self.engine.host.history:
            if "raised" in line:
                self.broken.append(f"runtime: {line}")
        for rid, messages in self.messages.items():
            self._one_terminal(rid, messages)
            self._nothing_after_abort(rid)
        free, total = self.runtime.blocks()
        if free != total:
            self.broken.append(f"KV: {total - free} of {total} blocks still held after drain")
        if self.runtime.scheduler.requests:
            self.broken.append(f"KV: the scheduler still tracks {sorted(self.runtime.scheduler.requests)}")
        self.monitor.finish()
        self.broken += [f"{v.invariant} ({v.check}) request {v.rid}: {v.message}" for v in self.monitor.violations]
        self.engine.shutdown()
        return self.broken

    def _one_terminal(self, rid: int, messages: list[ClientMessage]) -> None:
        terminals = [m for m in messages if m.finished]
        if len(terminals) != 1:
            self.broken.append(f"ORCH-INV-101 request {rid}: {len(terminals)} terminals")
            return
        got, want = terminals[0].reason, self._expected_reason(rid)
        if got != want:
            self.broken.append(f"reason: request {rid} ended {got!r}, vLLM says {want!r} ({self._path(rid)})")

    def _expected_reason(self, rid: int) -> str:
        """The reason vLLM's own map gives the request's final status; for an abort nobody asked for (vLLM ending a
        streaming-input session whose input ended), the reason of the session's last turn, as vLLM's output of that
        turn carried it; a request vLLM never saw was refused (error)."""
        final = self._vllm_status(rid)
        if final is None:
            return "error"
        if final is RS.FINISHED_ABORTED and rid not in self.aborted:
            turns = [new for _, new in self.moves[rid] if new in up_turn_ends()]
            final = turns[-1] if turns else final
        reason = RS.get_finished_reason(final)
        return str(reason) if reason is not None else f"(unfinished: {final})"

    def _nothing_after_abort(self, rid: int) -> None:
        seen = self.moves.get(rid, [])
        ends = [i for i, (_, new) in enumerate(seen) if new is RS.FINISHED_ABORTED]
        if ends and ends[0] + 1 < len(seen):
            self.broken.append(f"ORCH-INV-209 request {rid}: vLLM moved it after its abort: {self._path(rid)}")


def up_turn_ends() -> set[RS]:
    """vLLM's statuses a turn of a streaming-input session can end in (as the upstream encoding names them)."""
    return {RS[name] for name in up.TURN_ENDS}


def run_program(program: Sequence[Op], setup: Setup = Setup(), fault: type | None = None) -> list[str]:
    """Run ``program`` on vLLM's scheduler (with ``fault`` mixed into it); return every broken rule (``[]``: none)."""
    return execute(program, setup, fault).broken


def execute(program: Sequence[Op], setup: Setup = Setup(), fault: type | None = None,
            observe: Callable[[_Run], None] | None = None) -> _Run:  # fmt: skip
    """Run ``program`` to its drain; return the run (``moves``: vLLM's moves per request; ``broken``). ``observe``
    sees the run before its first operation (to wrap its scheduler: ``differential.py``)."""
    run = _Run(setup, fault)
    if observe is not None:
        observe(run)
    for op in program:
        if isinstance(op, Add):
            run.add(op)
        elif isinstance(op, Step):
            run.step(op.rounds)
        elif isinstance(op, Abort):
            open_ = run.open_requests()
            if open_:
                run.abort([open_[op.pick % len(open_)]])
        else:
            run.abort([rid for rid in run.open_requests() if run._vllm_status(rid) in WAITS])
    run.finish()
    return run


# -- the fixed examples: the paths that found the moves the encoding lacked (test_upstream_contract.py) ----------

PLAIN = RequestPlan(max_tokens=6)
#: two long requests on 6 blocks: the second is preempted, its KV reloaded through the connector
#: (PREEMPTED -> WAITING_FOR_REMOTE_KVS -> PREEMPTED -> RUNNING)
RELOADED = RequestPlan(max_tokens=10, kv_load_steps=1)
PREEMPT_AND_RELOAD = ([Add(RELOADED, 30), Add(RELOADED, 30), Step(4)],
                      Setup(max_num_seqs=2, num_blocks=6, connector=True))
#: streaming-input sessions whose turns end by EOS and by length and resume (FINISHED_* -> WAITING, or -> WAITING_FOR_
#: STREAMING_REQ, within one call); each session's input ends while it is parked (vLLM finishes the session)
STREAMED_TURNS = ([Add(RequestPlan(max_tokens=2, stream=((1, (7, 8)), (9, (9,))), stream_end_after=6), 5),
                   Add(RequestPlan(max_tokens=3, eos_at=1, stream=((2, (7, 8)), (9, (9,))), stream_end_after=8), 5),
                   Step(30)], Setup(max_num_seqs=2))  # fmt: skip
#: grammars compiling while the one running slot is taken: more waits than slots
GRAMMARS = ([Add(RequestPlan(max_tokens=3, grammar_steps=3), 4) for _ in range(4)] + [Step(2)],
            Setup(max_num_seqs=1))  # fmt: skip
#: a request aborted while its remote KV load is in flight (its blocks stay held until the load ends)
ABORT_DURING_LOAD = ([Add(RequestPlan(max_tokens=4, kv_load_steps=3), 20), Step(1), AbortWaiting(), Step(1)],
                     Setup(max_num_seqs=2, connector=True))  # fmt: skip
#: a running request aborted, then more steps
ABORT_RUNNING = ([Add(PLAIN, 10), Step(2), Abort(0), Add(PLAIN, 10), Step(3)], Setup(max_num_seqs=2))
#: two requests on 4 blocks: one is preempted and runs again
PREEMPTION = ([Add(RequestPlan(max_tokens=10), 30), Add(RequestPlan(max_tokens=10), 30), Step(6)],
              Setup(max_num_seqs=2, num_blocks=6))  # fmt: skip
#: asynchronous scheduling: a request preempted while a batch of it is in flight gets that batch's token and stops on
#: it (PREEMPTED -> FINISHED_STOPPED, an output while preempted)
STOP_IN_FLIGHT = ([Add(RequestPlan(max_tokens=6, eos_at=2), 30), Add(RequestPlan(max_tokens=6, eos_at=2), 30), Step(8)],
                  Setup(max_num_seqs=2, num_blocks=5))  # fmt: skip
#: asynchronous scheduling: a streaming-input session preempted with a batch in flight stops its turn on that batch's
#: token and resumes (PREEMPTED -> FINISHED_STOPPED -> WAITING); vLLM 0.32 then drops it from its queues, and the
#: binding ends it with an error instead of waiting for ever
SESSION_STOPS_IN_FLIGHT = ([Add(RequestPlan(max_tokens=6, eos_at=2, stream=((1, (7, 8)),), stream_end_after=2), 30)] * 2
                           + [Step(40)], Setup(max_num_seqs=2, num_blocks=6))  # fmt: skip
FIXED = {
    "session_stops_in_flight": SESSION_STOPS_IN_FLIGHT, "stop_in_flight": STOP_IN_FLIGHT,
    "preempt_and_reload": PREEMPT_AND_RELOAD, "streamed_turns": STREAMED_TURNS, "grammars": GRAMMARS,
    "abort_during_load": ABORT_DURING_LOAD, "abort_running": ABORT_RUNNING, "preemption": PREEMPTION,
}


SCHEDULERS = {"Scheduler": False, "AsyncScheduler": True}


def on(setup: Setup, scheduler: str) -> Setup:
    """Return ``setup`` on the named scheduler."""
    return attrs.evolve(setup, async_scheduling=SCHEDULERS[scheduler])
