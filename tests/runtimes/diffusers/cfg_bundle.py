"""CFG bundles (a parent and its companion) driven through the Engine with a fault put at one chosen point:
the AR stage on the simulator, the diffusion stage on diffusers (3 steps), each replica behind a ``_Gate`` that
holds a request's stage-0 ``Finished`` until its moment came and then fails, ends or asks to abort the target.

``run_bundles(faults, spec)`` returns the run's observed history judged by the monitor (``check_history``) and
each bundle's client messages; ``test_cfg_bundle.py`` asserts the companion rules over it, on ``SPEC`` and on
faulty tables. The gate only ever delays a report or ends a request the way a runtime may (``Failed``,
``Aborted``, an abort answered): the stream it hands the engine is a legal one.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs

from omni_fsm import SPEC, Outcome, Spec, StageKind
from omni_fsm.invariants import Violation, check_history
from omni_runtime import Engine, Prompt, Sampling, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.core.commands import ClientMessage
from omni_runtime.runtimes.diffusers import diffusers_runtimes

STEPS = 3  #: denoising steps of the diffusion stage: faults go before the first, between, and before the last
PARENT, COMPANION = "parent", "companion"
#: client abort (the parent only), the stage fails it (``Failed``), the stage ends it (``Aborted``)
ABORT, FAIL, STAGE_ABORT = "abort", "fail", "stage_abort"
#: both at the AR stage, neither done / the parent done at the AR stage, waiting for its running companion /
#: the companion done, the parent still at the AR stage / the parent at the diffusion stage after ``at`` steps
BEFORE_COMPANION_DONE, PARENT_WAITS, COMPANION_DONE, DIFFUSION = "before_companion_done", "parent_waits", \
    "companion_done", "diffusion"  # fmt: skip


@attrs.frozen
class Fault:
    """One fault of one bundle: ``action`` on ``target`` at ``moment`` (``at``: denoising steps taken first)."""

    target: str
    moment: str
    action: str
    at: int = 0


#: every point of a bundle a fault can be put at (the companion is done, so out of reach, from ``COMPANION_DONE``)
EVERY_FAULT: tuple[Fault, ...] = (
    *(Fault(COMPANION, m, a) for m in (BEFORE_COMPANION_DONE, PARENT_WAITS) for a in (FAIL, STAGE_ABORT)),
    *(Fault(PARENT, m, a) for m in (BEFORE_COMPANION_DONE, COMPANION_DONE) for a in (ABORT, FAIL, STAGE_ABORT)),
    Fault(PARENT, PARENT_WAITS, ABORT),  # waiting in no stage: only the client can end it
    *(Fault(PARENT, DIFFUSION, a, at) for at in range(STEPS) for a in (ABORT, FAIL, STAGE_ABORT)),
)  # fmt: skip


class _Bundle:
    """What the gates know of one bundle: its fault, whether it fired, an abort the client still owes."""

    def __init__(self, rid: int, fault: Fault | None) -> None:
        self.rid, self.companion, self.fault = rid, rid + 1, fault
        self.fired = False
        self.abort_due = False

    def target(self) -> int:
        assert self.fault is not None
        return self.rid if self.fault.target == PARENT else self.companion

    def holds(self, req_id: int) -> bool:
        """Return whether the stage-0 ``Finished`` of ``req_id`` waits for this bundle's fault."""
        if self.fault is None or self.fired:
            return False
        moment = self.fault.moment
        return (moment == BEFORE_COMPANION_DONE or (moment == PARENT_WAITS and req_id == self.companion)
                or (moment == COMPANION_DONE and req_id == self.rid))  # fmt: skip


class _Watch:
    """What every gate saw pass (``(stage, req_id)`` -> scheduled, outputs, finished), shared by the gates."""

    def __init__(self) -> None:
        self.scheduled: set[tuple[int, int]] = set()
        self.added: set[tuple[int, int]] = set()
        self.outputs: dict[tuple[int, int], int] = {}
        self.finished: set[tuple[int, int]] = set()
        self.bundles: dict[int, _Bundle] = {}  #: by parent rid and companion rid

    def reached(self, stage: int, bundle: _Bundle) -> bool:
        """Return whether ``bundle``'s fault is due now at ``stage``."""
        fault, p, c = bundle.fault, bundle.rid, bundle.companion
        assert fault is not None
        if fault.moment == DIFFUSION:
            return stage == 1 and (1, p) in self.added and self.outputs.get((1, p), 0) >= fault.at
        if stage != 0:
            return False
        if fault.moment == BEFORE_COMPANION_DONE:
            return (0, p) in self.scheduled and (0, c) in self.scheduled
        if fault.moment == PARENT_WAITS:
            return (0, p) in self.finished and (0, c) in self.scheduled
        return (0, c) in self.finished and (0, p) in self.scheduled


class _Gate:
    """One replica behind the fault injector (see the module's docstring)."""

    _abort_ids = itertools.count(-1, -1)  #: the gate's own physical aborts: negative ids, never the engine's

    def __init__(self, inner: Any, stage: int, watch: _Watch) -> None:
        self.inner, self.stage, self.watch = inner, stage, watch
        self.sink: Any = None
        self.seq: dict[int, int] = {}
        self.held: dict[int, rp.Finished] = {}  #: a finished request's report, kept back until its moment
        self.dead: set[int] = set()  #: ended here by the gate: the inner runtime's answers about it are dropped
        self.own_aborts: set[int] = set()

    def bind(self, sink: Any) -> None:
        self.sink = sink
        self.inner.bind(self._filter)

    def _filter(self, report: rp.Report) -> None:
        if isinstance(report, rp.AbortResult) and report.abort_id in self.own_aborts:
            return
        if isinstance(report, rp.RequestReport):
            if report.req_id in self.dead:
                return
            key = (self.stage, report.req_id)
            self.seq[report.req_id] = report.seq + 1
            if isinstance(report, rp.StatusChanged) and report.status is rp.Status.SCHEDULED:
                self.watch.scheduled.add(key)
            elif isinstance(report, rp.Output):
                self.watch.outputs[key] = self.watch.outputs.get(key, 0) + report.tokens
            elif isinstance(report, rp.Finished):
                bundle = self.watch.bundles.get(report.req_id)
                if self.stage == 0 and bundle is not None and bundle.holds(report.req_id):
                    self.held[report.req_id] = report
                    return
                self.watch.finished.add(key)
        self.sink(report)

    def add_request(self, req_id: int, stage_input: Any) -> None:
        self.watch.added.add((self.stage, req_id))
        self.inner.add_request(req_id, stage_input)

    def abort_requests(self, abort_id: int, req_ids: Any) -> None:
        inner = []
        for req_id in req_ids:
            if self.held.pop(req_id, None) is not None:  # done inside, not yet told: it ends as the abort says
                self.sink(rp.AbortResult(abort_id, req_id, True))
            else:
                inner.append(req_id)
        if inner:
            self.inner.abort_requests(abort_id, inner)

    def control(self, call_id: int, method: Any, level: int, tags: Any) -> None:
        self.inner.control(call_id, method, level, tags)

    def step(self) -> bool:
        bundles = {id(b): b for b in self.watch.bundles.values()}.values()
        if any(b.abort_due for b in bundles):
            return True  # the client's abort comes after this round: nothing moves before it
        for bundle in bundles:
            if bundle.fault is not None and not bundle.fired and self.watch.reached(self.stage, bundle):
                bundle.fired = True
                if bundle.fault.action == ABORT:
                    bundle.abort_due = True
                    return True
                self._end(bundle.target(), rp.Failed if bundle.fault.action == FAIL else rp.Aborted)
        for req_id in [r for r in self.held if not self.watch.bundles[r].holds(r)]:
            self.watch.finished.add((self.stage, req_id))
            self.sink(self.held.pop(req_id))
        return self.inner.step() or bool(self.held)

    def _end(self, req_id: int, make: Any) -> None:
        """End ``req_id`` here as a runtime may: gone inside (its Finished dropped, or aborted), then reported."""
        held = self.held.pop(req_id, None)
        if held is None:
            abort_id = next(self._abort_ids)
            self.own_aborts.add(abort_id)
            self.inner.abort_requests(abort_id, [req_id])
            self.dead.add(req_id)
        seq = held.seq if held is not None else self.seq.get(req_id, 0)
        self.sink(make(req_id, seq, "injected stage failure") if make is rp.Failed else make(req_id, seq))

    def shutdown(self) -> None:
        self.inner.shutdown()


@attrs.frozen
class Run:
    """A run's verdict: the monitor's violations over its observed history, each bundle's client messages (in the
    order of the faults), and the prompts they were given."""

    violations: list[Violation]
    messages: list[list[ClientMessage]]
    fired: list[bool]
    prompts: list[Prompt]
    #: bundle index -> the messages of its prompt submitted again once it was aborted (``retry_aborted``)
    retries: dict[int, list[ClientMessage]] = attrs.Factory(dict)

    def invariants(self) -> set[str]:
        """Return the IDs of the invariants broken."""
        return {v.invariant for v in self.violations}


def pipeline() -> Any:
    """Return AR (simulator, 6 tokens at most) -> diffusion (diffusers, ``STEPS`` steps)."""
    return simple_pipeline([StageKind.AR, StageKind.DIFFUSION], max_running=8, max_tokens=6, steps=STEPS)


def bundle_prompt(index: int) -> Prompt:
    """Return bundle ``index``'s prompt (its own seed, a negative prompt for its companion)."""
    return Prompt((index + 1, 2, 3), height=16, width=16, negative=(4, index + 5), sampling=Sampling(seed=100 + index))


def run_bundles(faults: list[Fault | None], spec: Spec = SPEC, rounds: int = 2000, retry_aborted: bool = False) -> Run:
    """Submit one bundle per entry of ``faults`` (``None``: left alone), run them to their ends (then, with
    ``retry_aborted``, submit each aborted bundle's prompt again, alone, to its end), judge the run."""
    pipe = pipeline()
    watch = _Watch()
    runtimes = [[_Gate(r, stage, watch) for r in replicas] for stage, replicas in enumerate(diffusers_runtimes(pipe))]
    history: list[tuple[Any, list[Any]]] = []
    engine = Engine(pipe, runtimes, spec=spec, on_step=lambda e, o: history.append((e, list(o))))
    boxes: list[list[ClientMessage]] = [[] for _ in faults]
    prompts = [bundle_prompt(i) for i in range(len(faults))]
    bundles = []
    try:
        for fault, box, prompt in zip(faults, boxes, prompts, strict=True):
            rid = engine.submit(prompt, companions=1, listener=box.append)
            bundle = _Bundle(rid, fault)
            watch.bundles[rid] = watch.bundles[rid + 1] = bundle
            bundles.append(bundle)
        for _ in range(rounds):
            if all(box and box[-1].finished for box in boxes):
                break
            engine.host.pump()
            for bundle in bundles:
                if bundle.abort_due:
                    bundle.abort_due = False
                    engine.host.abort_nowait(bundle.rid)
        engine.run_until_idle()
        retries = {i: engine.generate(prompts[i], companions=1) for i, box in enumerate(boxes)
                   if retry_aborted and box and box[-1].outcome is Outcome.ABORTED}  # fmt: skip
    finally:
        engine.shutdown()
    violations = check_history(pipe.kinds, pipe.final, history, pipe.slots)
    return Run(violations, boxes, [b.fired for b in bundles], prompts, retries)
