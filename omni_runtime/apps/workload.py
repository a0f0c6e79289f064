"""The demo's workload: random requests, aborts, cancellations and control RPCs on a pipeline.

Every lifecycle step is judged by ``omni_fsm.invariants.Monitor`` and written to a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from omni_fsm import ControlMethod
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import CHECKS, Monitor
from omni_fsm.trace import TraceWriter
from omni_runtime import registry
from omni_runtime.core.pipeline import Pipeline, require_pipeline
from omni_runtime.core.prompts import Prompt, Sampling
from omni_runtime.core.protocol import StageRuntime
from omni_runtime.engines.async_engine import EVENT, POLL, AsyncEngine
from omni_runtime.engines.host import STALL_TIMEOUT_S
from omni_runtime.errors import ConfigError, OmniRuntimeError, OptionError, RpcError


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at_least(minimum: int) -> Callable[[Any, Any, Any], None]:
    def check(options: Any, attribute: Any, value: Any) -> None:
        if not _integer(value):
            raise OptionError((attribute.name,), f"must be an integer, got {value!r}")
        if value < minimum:
            raise OptionError((attribute.name,), f"must be at least {minimum}, got {value!r}")

    return check


def _rate(options: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise OptionError((attribute.name,), f"must be a number, got {value!r}")
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise OptionError((attribute.name,), f"must be within [0, 1], got {value!r}")


def _deaths(options: Any, attribute: Any, value: Any) -> None:
    if value is not None:
        _at_least(0)(options, attribute, value)


def _loop(options: Any, attribute: Any, value: Any) -> None:
    if value not in (EVENT, POLL):
        raise OptionError((attribute.name,), f"must be {EVENT!r} or {POLL!r}, got {value!r}")


def _stall_timeout(options: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or not value > 0):
        raise OptionError((attribute.name,), f"must be a number of seconds > 0 (0 on the command line: no bound), "
                          f"got {value!r}")  # fmt: skip


def _seed(options: Any, attribute: Any, value: Any) -> None:
    if not _integer(value):
        raise OptionError((attribute.name,), f"must be an integer, got {value!r}")


@attrs.frozen
class WorkloadOptions:
    """What ``run_demo`` does; a bad value raises ``OptionError`` (a ``ConfigError``) naming the field."""

    requests: int = attrs.field(default=300, validator=_at_least(0))
    concurrency: int = attrs.field(default=32, validator=_at_least(1))  #: requests in flight at most
    abort_rate: float = attrs.field(default=0.2, validator=_rate)
    fault_rate: float = attrs.field(default=0.05, validator=_rate)
    parallel_rate: float = attrs.field(default=0.15, validator=_rate)  #: share of requests with n=2
    companion_rate: float = attrs.field(default=0.15, validator=_rate)  #: share with one CFG companion
    #: replicas that die (at most one per stage of several replicas); ``None``: one if any stage has several
    replica_deaths: int | None = attrs.field(default=None, validator=_deaths)
    seed: int = attrs.field(default=0, validator=_seed)
    loop: str = attrs.field(default=EVENT, validator=_loop)
    #: a busy replica's silence, in seconds, past which it is lost (``None``: no bound)
    stall_timeout_s: float | None = attrs.field(default=STALL_TIMEOUT_S, validator=_stall_timeout)

    def __attrs_post_init__(self) -> None:
        if self.parallel_rate + self.companion_rate > 1.0:  # a request has n=2 or a companion, not both
            raise OptionError(("parallel_rate", "companion_rate"), "must be at most 1 (a request has n=2 or a "
                              f"companion), got {self.parallel_rate!r} + {self.companion_rate!r}")  # fmt: skip


@attrs.define
class DemoReport:
    pipeline: str
    requests: int
    seconds: float = 0.0
    outcomes: dict[str, int] = attrs.field(factory=dict)
    stages: dict[str, dict[str, int]] = attrs.field(factory=dict)
    dropped: dict[str, int] = attrs.field(factory=dict)
    faults: dict[str, int] = attrs.field(factory=dict)
    held: dict[str, int] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)
    steps: int = 0
    checks: int = len(CHECKS)
    samples: list[tuple[str, str]] = attrs.field(factory=list)  #: (prompt, text) of a few finished requests


class RunFailed(OmniRuntimeError):
    """The run ended early (the engine died, a wait gave up, ...): the message says why; ``stalled``: replicas lost
    to a stall; the trace so far is at its path, without the end marker (``omni-fsm check --allow-incomplete``)."""

    def __init__(self, why: str, stalled: int) -> None:
        super().__init__(why)
        self.stalled = stalled


class _Tally:
    """Counts what the lifecycle did, from its steps."""

    def __init__(self, stages: int) -> None:
        self.outcomes: Counter[str] = Counter()
        self.dispatched = [0] * stages
        self.outputs = [0] * stages
        self.finished = [0] * stages

    def step(self, event: ev.Event | None, outputs: list[ob.Observation]) -> None:
        if isinstance(event, ev.StageOutput):
            self.outputs[event.stage] += 1
        elif isinstance(event, ev.StageFinished):
            self.finished[event.stage] += 1
        for o in outputs:
            if isinstance(o, ob.Dispatched):
                self.dispatched[o.stage] += 1
            elif isinstance(o, ob.Emitted) and o.finished:
                self.outcomes[f"{o.outcome.value if o.outcome else None}/{o.reason.value if o.reason else None}"] += 1


def _death_slots(pipeline: Pipeline) -> list[tuple[int, int, int]]:
    """Return (stage, replica, at step) for the last replica of every stage that has several."""
    return [(s, spec.replicas - 1, 30 + 25 * s) for s, spec in enumerate(pipeline.stages) if spec.replicas > 1]


def max_replica_deaths(pipeline: Pipeline) -> int:
    """Return how many replicas can die in the demo: one per stage that has several."""
    return len(_death_slots(pipeline))


def replica_deaths(pipeline: Pipeline, options: WorkloadOptions) -> tuple[tuple[int, int, int], ...]:
    """Return the replicas that die in the demo, (stage, replica, at step): ``options.replica_deaths`` of them (none
    given: one if any stage has several), the last replica of each stage that has several. Raises ``OptionError``
    for more than the pipeline has."""
    slots = _death_slots(pipeline)
    deaths = min(1, len(slots)) if options.replica_deaths is None else options.replica_deaths
    if deaths > len(slots):
        raise OptionError(("replica_deaths",), f"at most {len(slots)} for pipeline {pipeline.name!r} (one per "
                          f"stage with more than one replica), got {deaths}")  # fmt: skip
    return tuple(slots[:deaths])


@attrs.frozen
class SimSettings:
    """The simulator's settings for the demo, its ``sim`` options: every fault (report-stream faults included) at
    ``fault_rate``; the replicas that die, (stage, replica, at step)."""

    fault_rate: float
    replica_deaths: tuple[tuple[int, int, int], ...]


def sim_config(pipeline: Pipeline, options: WorkloadOptions) -> SimSettings:
    """Return the simulator's settings for the demo: every fault at the rate, ``replica_deaths``."""
    return SimSettings(options.fault_rate, replica_deaths(pipeline, options))


async def run_demo(pipeline: Pipeline, options: WorkloadOptions, trace_path: str,
                   progress: Callable[[int], None] | None = None,
                   runtimes: Sequence[Sequence[StageRuntime]] | None = None) -> DemoReport:  # fmt: skip
    """Run the workload on the simulator, or on ``runtimes``; return the summary (the trace is written to
    ``trace_path``).

    On the simulator, prompts are token ids and every fault is injected at ``fault_rate``. On given runtimes
    (real engines) prompts are text with seeded sampling, some with a stop string and the CFG companions with
    a negative prompt; a replica that ``replica_deaths`` names is killed (its process: ``SIGKILL``) once a
    third of the requests are done, when it runs in a process of its own (it has a ``pid``).

    A trace that cannot be written (disk full, file too large) stops being written; the run goes on
    to its end and then raises that ``OSError``. Whatever ends the run early, every client task is
    cancelled and the engine shut down while the trace is still open, and the trace's temporary file
    is removed: ``trace_path`` keeps what it held before. Whatever else ends it early (the engine died, a wait gave
    up: ``RunFailed``; Ctrl-C or SIGTERM: the cancellation), the trace so far is put at ``trace_path`` without its
    end marker, marked incomplete so.
    """
    pipeline = require_pipeline(pipeline, "run_demo")
    if not isinstance(options, WorkloadOptions):
        raise ConfigError(f"run_demo wants WorkloadOptions, not {type(options).__name__}")
    started = time.perf_counter()
    monitor = Monitor(pipeline.kinds, pipeline.final, pipeline.slots)
    tally = _Tally(len(pipeline.stages))
    rng = random.Random(options.seed)
    deaths = replica_deaths(pipeline, options)
    real = runtimes is not None
    if runtimes is None:
        settings = sim_config(pipeline, options)
        runtimes = registry.runtimes(pipeline, "sim", seed=options.seed, fault_rate=settings.fault_rate,
                                     replica_deaths=settings.replica_deaths)  # fmt: skip
    to_kill = [(s, r) for s, r, _ in deaths] if real else []
    report = DemoReport(pipeline.name, options.requests)
    unwritten: list[OSError] = []  #: the trace's write error, if one came
    with TraceWriter(trace_path) as writer:
        writer.header(pipeline.kinds, pipeline.final, pipeline.slots, loop=options.loop)

        def on_step(event: ev.Event | None, outputs: list[ob.Observation]) -> None:
            monitor.step(event, outputs)
            if not unwritten:
                try:
                    writer.step(event, outputs)
                except OSError as exc:  # raised here it would kill the engine's loop: raised after the run
                    unwritten.append(exc)
            tally.step(event, outputs)

        engine = AsyncEngine(pipeline, runtimes, loop=options.loop, on_step=on_step,
                             stall_timeout_s=options.stall_timeout_s)  # fmt: skip
        faults: Counter[str] = Counter()
        await engine.start()
        started_requests = done = 0

        async def client() -> None:  # one of ``concurrency`` clients, each submitting one request after another
            nonlocal started_requests, done
            while started_requests < options.requests:
                request_id = f"request-{started_requests}"  # the workload's own name: it pairs two runs' requests
                started_requests += 1
                roll = rng.random()
                n = 2 if roll < options.parallel_rate else 1
                companions = 1 if n == 1 and roll < options.parallel_rate + options.companion_rate else 0
                abort_mode = rng.choice(("cancel", "abort")) if rng.random() < options.abort_rate else ""
                abort_at = rng.randint(0, 6)
                if real:
                    prompt = _text_prompt(rng)
                else:
                    prompt = Prompt(tuple(rng.randrange(1000) for _ in range(rng.randint(1, 6))))
                await _consume(engine, prompt, n, companions, abort_mode, abort_at, faults, report, request_id)
                done += 1
                if to_kill and done >= options.requests // 3:
                    for stage, replica in to_kill:
                        _kill(runtimes[stage][replica], faults)
                    to_kill.clear()
                if progress is not None:
                    progress(done)

        tasks = [asyncio.create_task(client()) for _ in range(min(options.concurrency, options.requests))]
        tasks.append(asyncio.create_task(_control_plane(engine, rng, faults)))
        try:
            try:
                await asyncio.gather(*tasks)
            finally:  # a run that ends early leaves no task behind to talk to a closed trace
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await engine.shutdown()
        except BaseException as exc:  # the run ended early: the trace so far is kept, without its end marker
            if not unwritten:
                with contextlib.suppress(OSError):
                    writer.keep_incomplete()
            if isinstance(exc, OmniRuntimeError):
                why, death = str(exc), engine.host.orchestrator.death
                if death and death not in why:  # "the engine is shut down" says not why: its death does
                    why = f"{why}: the engine died: {death}"
                raise RunFailed(why, engine.host.replicas_stalled) from exc
            raise
        if unwritten:
            raise unwritten[0]
        writer.end()
    monitor.finish()
    orch = engine.host.orchestrator
    report.seconds = time.perf_counter() - started
    report.outcomes = dict(sorted(tally.outcomes.items()))
    for s, spec in enumerate(pipeline.stages):
        report.stages[spec.name] = {"dispatched": tally.dispatched[s], "outputs": tally.outputs[s],
                                    "finished": tally.finished[s]}  # fmt: skip
    report.dropped = orch.counters()
    report.faults = dict(sorted(faults.items())) | {"replicas_lost": sum(not up for st in orch.live for up in st),
                                                    "replicas_stalled": engine.host.replicas_stalled}  # fmt: skip
    report.held = orch.held_state()
    report.violations = [str(v) for v in monitor.violations]
    report.steps = monitor.steps
    return report


def _text_prompt(rng: random.Random) -> Prompt:
    """Return a text prompt in the tiny model's words, seeded sampling; now and then a stop string, and a negative
    prompt (what a CFG companion of it runs on)."""
    words = " ".join(f"w{rng.randrange(970)}" for _ in range(rng.randint(2, 6)))
    stop = (f"w{rng.randrange(10)}",) if rng.random() < 0.3 else ()
    sampling = Sampling(temperature=0.8, top_p=0.95, seed=rng.randrange(2**31), stop=stop)
    return Prompt(text=words, sampling=sampling, negative=" ".join(f"w{rng.randrange(970)}" for _ in range(2)))


def _kill(runtime: Any, faults: Counter[str]) -> None:
    """Kill a replica's process (the demo's replica death on real engines)."""
    pid = getattr(runtime, "pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        faults["stage_processes_killed"] += 1


async def _consume(engine: AsyncEngine, prompt: Prompt, n: int, companions: int, abort_mode: str, abort_at: int,
                   faults: Counter[str], report: DemoReport | None = None,
                   request_id: str | None = None) -> None:  # fmt: skip
    count = 0
    async with contextlib.aclosing(engine.generate(prompt, n, companions, request_id=request_id)) as stream:
        async for message in stream:
            count += 1
            if report is not None and message.finished and message.text and len(report.samples) < 3:
                report.samples.append((prompt.text or str(prompt.ids), message.text))
            if count == abort_at and abort_mode == "cancel":
                faults["consumer_cancelled"] += 1
                break  # closing the stream aborts the request
            if count == abort_at and abort_mode == "abort" and not message.finished:
                ok = await engine.abort(message.rid)
                faults["aborts_ok" if ok else "aborts_failed_physically"] += 1


async def _control_plane(engine: AsyncEngine, rng: random.Random, faults: Counter[str]) -> None:
    """Pause and resume the scheduler a few times while requests run; a worker may raise."""
    for _ in range(3):
        for _ in range(rng.randint(5, 20)):
            await asyncio.sleep(0)
        try:
            await engine.control(ControlMethod.PAUSE_SCHEDULER)
        except RpcError:
            faults["rpc_errors"] += 1
        for _ in range(20):  # resume until it succeeds: a paused engine admits nothing
            try:
                await engine.control(ControlMethod.RESUME_SCHEDULER)
                break
            except RpcError:
                faults["rpc_errors"] += 1
