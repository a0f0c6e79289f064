"""Historic bugs coming from a runtime: the orchestrator tolerates them and flags them (counted, kit).

A faulty runtime is also fed a fixed sequence of protocol calls (add, step, abort, ...) and its
raw report stream is judged by the conformance kit's ``RawStreamChecker``, which names the
invariant: decided by that sequence, not by a random search. A runtime fault nothing can repair
(B4's scheduler deadlock) is caught by the sync engine's no-progress watchdog and the monitor.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs
import pytest
from faulty_runtimes import DoubleFinish, OutputAfterAbort, SwallowedRpcError
from helpers import demo_pipeline, monitored_engine, verdict

from omni_fsm import SPEC, ControlMethod, Effect, Outcome, StageKind
from omni_fsm import observations as ob
from omni_fsm.invariants import CHECKS
from omni_runtime import Engine, OmniRuntimeError, Orchestrator, Prompt, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core import translation as translation_module
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.runtimes.sim import SimConfig, sim_replica, sim_runtimes
from omni_runtime.testing import RawStreamChecker

AR_STAGE = StageSpec("s", StageKind.AR, final=True, max_running=2, max_tokens=8)
ABORT_PREFIX = CHECKS["ar_abort_delivers_prefix"]  #: ORCH-INV-200


def _wrapped(pipeline, cls):
    return [[cls(spec, s, r, False) for r in range(spec.replicas)] for s, spec in enumerate(pipeline.stages)]


def _sim(config: SimConfig | None = None):
    """Return one plain simulated AR replica (seed 0): request 0 streams 8 tokens over 4 steps."""
    return sim_replica(AR_STAGE, 0, 0, 0, config or SimConfig())


def _raw_stream(runtime, script) -> tuple[list[list[tuple[str, int]]], list[tuple[str, str, int | None]]]:
    """Drive ``runtime`` through ``script`` and judge its raw report stream with the kit's checker.

    ``script``: ``("add", rid)``, ``("abort", rid)`` (abort id 100), ``("control", a worker raises)``
    (call id 10), ``("step",)``. Return the reports (kind, id) that followed each call, and the
    checker's violations (invariant, check, subject) as they happened.
    """
    checker, after = RawStreamChecker(), []

    def sink(report: rp.Report) -> None:
        after[-1].append((type(report).__name__, getattr(report, "req_id", getattr(report, "call_id", -1))))
        checker(report)

    runtime.bind(sink)
    for op, *args in script:
        after.append([])
        if op == "add":
            checker.added(args[0])
            runtime.add_request(args[0], StageInput((1, 2), None, 8))
        elif op == "abort":
            checker.aborting(100, [args[0]])
            runtime.abort_requests(100, [args[0]])
        elif op == "control":
            checker.rpc(10, args[0])
            runtime.control(10, ControlMethod.PAUSE_SCHEDULER, 1, frozenset())
        else:
            runtime.step()
    return after, [(v.invariant, v.check, v.subject) for v in checker.violations]


def test_b3_report_for_a_request_that_just_ended_is_dropped():
    """B3 (vllm#42157): a report arrives for a request that finished mid-step: dropped, counted, never fatal; it
    follows the runtime's own Finished, so it is logged (the command) and counted as that too."""
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    rid, _ = orch.submit(Prompt())
    for report in (rp.StatusChanged(rid, 0, rp.Status.SCHEDULED), rp.Finished(rid, 1)):
        orch.report(0, 0, report)
    assert orch.report(0, 0, rp.Output(rid, 2, 1, (5,))) == [cmd.ReportAfterFinished(0, 0, rid, "Output")]
    assert orch.lifecycle.counters.dropped_unknown == 1 and orch.idle()
    assert orch.counters()["after_finished"] == 1


B6_SCRIPT = [("add", 0), ("step",), ("abort", 0), ("step",)]
B6_BEFORE_ABORT = [[], [("StatusChanged", 0), ("Output", 0)], [("AbortResult", 0)]]  #: running when aborted


def test_b6_zombie_outputs_after_abort_are_dropped_and_flagged():
    """B6 (vllm-omni#3736): outputs of an aborted (freed) request: tolerated here, flagged by the kit.

    The fixed sequence (add, step, abort, step) shows the zombie at once: ORCH-INV-209.
    """
    pipeline = demo_pipeline()
    engine, monitor = monitored_engine(pipeline, _wrapped(pipeline, OutputAfterAbort))
    rids = [engine.submit(Prompt(max_tokens=8)) for _ in range(3)]
    engine.host.pump()
    for rid in rids:
        engine.abort(rid)
    engine.run_until_idle()
    assert all([m.finished for m in engine.outputs(r)].count(True) == 1 for r in rids)
    assert engine.orchestrator.counters()["dropped_unknown"] > 0
    assert monitor.finish() == [] and monitor.violations == []
    assert _raw_stream(_sim(), B6_SCRIPT) == ([*B6_BEFORE_ABORT, []], [])
    assert _raw_stream(OutputAfterAbort.around(_sim()), B6_SCRIPT) == (
        [*B6_BEFORE_ABORT, [("Output", 0)]], [("ORCH-INV-209", "no_output_after_acknowledged_abort", 0)])


B10_SEED, B10_CONFIG = 3, SimConfig.legal(0.2)  #: the seed makes the simulator duplicate some reports


class _RecordedDoubleFinish(DoubleFinish):
    """B10's runtime over a simulator that also duplicates reports (``SimConfig.duplicate``); keeps what it sent."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, attrs.evolve(B10_CONFIG, duplicate=0.3), B10_SEED)
        self.sent: list[rp.Report] = []

    def bind(self, sink):
        def recording(report):
            self.sent.append(report)
            sink(report)

        super().bind(recording)


B10_SCRIPT = [("add", 0), ("step",), ("step",), ("step",), ("step",)]
B10_STREAM = [[], [("StatusChanged", 0), ("Output", 0)], [("Output", 0)], [("Output", 0)],
              [("Output", 0), ("Finished", 0)]]  # fmt: skip


def test_b10_duplicate_completion_is_tolerated_and_flagged():
    """B10 (vllm-omni#5983): a late duplicate completion never breaks delivery for others.

    Every completion is sent twice and, with a fixed seed, the simulator duplicates some other
    reports too: each copy is dropped and counted, and the client sees exactly what it sees
    without any duplicate. The fixed sequence (add, step x4) flags the second finish: ORCH-INV-101.
    """
    pipeline = demo_pipeline()
    clean = Engine(pipeline, sim_runtimes(pipeline, B10_SEED, B10_CONFIG))
    expected = [clean.generate(Prompt()) for _ in range(4)]
    runtimes = _wrapped(pipeline, _RecordedDoubleFinish)
    engine, monitor = monitored_engine(pipeline, runtimes)
    messages = [engine.generate(Prompt()) for _ in range(4)]
    assert messages == expected
    assert all(ms[-1].finished and [m.finished for m in ms].count(True) == 1 for ms in messages)
    extra = Counter({kind: 0 for kind in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed)})
    for runtime in (runtime for replicas in runtimes for runtime in replicas):
        copies = Counter((type(r), r.req_id, r.seq) for r in runtime.sent if isinstance(r, rp.RequestReport))
        for (kind, _, _), count in copies.items():
            extra[kind] += count - 1
    assert extra[rp.Finished] >= sum(ms[-1].outcome is Outcome.FINISHED for ms in messages) > 0
    assert extra[rp.StatusChanged] + extra[rp.Output] > 0
    counters = engine.orchestrator.counters()
    assert counters["duplicates"] == extra[rp.StatusChanged] + extra[rp.Output]
    assert counters["dropped_stale"] + counters["dropped_unknown"] == extra[rp.Finished] + extra[rp.Failed]
    assert monitor.finish() == [] and monitor.violations == []
    assert _raw_stream(_sim(), B10_SCRIPT) == (B10_STREAM, [])
    assert _raw_stream(DoubleFinish.around(_sim()), B10_SCRIPT) == (
        [*B10_STREAM[:-1], [*B10_STREAM[-1], ("Finished", 0)]],
        [("ORCH-INV-101", "one_finish_per_accepted_request", 0)])


def test_b11_a_runtime_swallowing_its_worker_error_is_flagged():
    """B11 (vllm-omni#7685) from a runtime: a worker raised, but the runtime answers the RPC as done.

    The orchestrator cannot know (its caller is told the pause worked, the requests run on); the
    fixed sequence (control with a raising worker, step) flags it: ORCH-INV-205.
    """
    pipeline = demo_pipeline()
    raising = SimConfig(rpc_error=1.0)
    runtimes = [[SwallowedRpcError.around(r) for r in rs] for rs in sim_runtimes(pipeline, 2, raising)]
    engine, monitor = monitored_engine(pipeline, runtimes)
    rids = [engine.submit(Prompt()) for _ in range(3)]
    engine.host.pump()
    assert engine.control(ControlMethod.PAUSE_SCHEDULER) is None  # no RpcError: the error was swallowed
    assert engine.control(ControlMethod.RESUME_SCHEDULER) is None
    assert [list(engine.outputs(rid))[-1].outcome for rid in rids] == [Outcome.FINISHED] * 3
    assert verdict(monitor) == []
    script = [("control", True), ("step",)]
    assert _raw_stream(_sim(raising), script) == ([[], [("RpcResult", 10)]], [])
    assert _raw_stream(SwallowedRpcError.around(_sim(raising)), script) == (
        [[], [("RpcResult", 10)]], [("ORCH-INV-205", "rpc_errors_propagated", 10)])


# -- B4 (vllm#53130): parked requests and admission ------------------------------------------------


@pytest.mark.parametrize("capacity", [0, 1], ids=["derived-capacity", "capacity-1"])
def test_b4_parked_requests_never_deadlock_admission(capacity):
    """B4 (vllm#53130): parked requests hold slots; every admitted request still reaches a terminal.

    Six requests that all park, wait for a chunk and are preempted, one slot per replica,
    ``capacity`` lifecycle slots per stage (0: derived). B4 in our core is caught by the explorer
    (``test_core_historic_bugs``), B4 in the scheduler by the next test.
    """
    pipeline = attrs.evolve(simple_pipeline([StageKind.AR, StageKind.AR], replicas=1, max_running=1),
                            capacity=capacity)  # fmt: skip
    runtimes = sim_runtimes(pipeline, 4, SimConfig(park=1.0, chunk_wait=1.0, preempt=1.0))
    engine, monitor = monitored_engine(pipeline, runtimes)
    outcomes = [engine.generate(Prompt(max_tokens=4))[-1].outcome for _ in range(6)]
    assert outcomes == [Outcome.FINISHED] * 6
    assert verdict(monitor) == []


def _parked_requests_fill_every_slot(config: SimConfig) -> dict[str, Any]:
    """One AR replica with two slots; four requests that all park before they run (seed 4). Read each,
    then run until idle; return the ends, what the replica holds, and the monitor's verdict."""
    pipeline = simple_pipeline([StageKind.AR], replicas=1, max_running=2)
    runtimes = sim_runtimes(pipeline, 4, config)
    engine, monitor = monitored_engine(pipeline, runtimes)
    engine.max_silent_rounds = 1000  # busy and silent for 1000 rounds: a deadlock, not a long step
    rids = [engine.submit(Prompt(max_tokens=4)) for _ in range(4)]
    ends: list[Any] = []
    for rid in rids:
        try:
            ends.append(list(engine.outputs(rid))[-1].outcome)
        except OmniRuntimeError as exc:
            ends.append(str(exc))
    try:
        idle = engine.run_until_idle()
    except OmniRuntimeError as exc:
        idle = str(exc)
    replica = runtimes[0][0]
    return {"ends": ends, "idle": idle, "held": {rid: req.phase for rid, req in replica.requests.items()},
            "busy": replica.busy(), "monitor": verdict(monitor)}  # fmt: skip


def test_b4_a_scheduler_deadlocked_by_parked_requests_is_caught():
    """B4 switched into the simulated scheduler (``SimConfig.parked_needs_free_slot``): a parked request
    resumes only while a slot is free, though it holds one itself. Two park, the two slots are theirs,
    and nothing runs or is admitted again while the replica keeps saying it is busy.

    The sync engine's watchdog for silent runtimes ends every wait (no report in ``max_silent_rounds``
    rounds), and the monitor names the requests left without a terminal: ORCH-INV-101 and ORCH-INV-208.
    """
    parked = SimConfig(park=1.0)
    assert _parked_requests_fill_every_slot(parked) == {
        "ends": [Outcome.FINISHED] * 4, "idle": None, "held": {}, "busy": False, "monitor": []}
    no_report = "no progress: a runtime says it is busy but reported nothing for 1000 rounds"
    assert _parked_requests_fill_every_slot(attrs.evolve(parked, parked_needs_free_slot=True)) == {
        "ends": [no_report] * 4,
        "idle": no_report,
        "held": {0: "parked", 1: "parked", 2: "waiting", 3: "waiting"}, "busy": True,
        "monitor": [(invariant, check, rid) for rid in range(4) for invariant, check in
                    (("ORCH-INV-101", "one_terminal_per_request"), ("ORCH-INV-208", "no_state_after_terminal"))]}


# -- B8 (vllm-omni#6367): an AR abort's generated prefix -----------------------------------------------


def _prefix_judged(messages) -> list[tuple[str, str, int]]:
    """Judge ORCH-INV-200 on what the client received: an aborted AR request's terminal carries exactly
    the tokens streamed before it (the monitor judges the core's observations, not the rendered data)."""
    end = messages[-1]
    streamed = tuple(t for m in messages[:-1] for t in m.data)
    if end.outcome is Outcome.ABORTED and (end.data != streamed or end.cumulative != len(streamed)):
        return [(ABORT_PREFIX.invariant, ABORT_PREFIX.name, end.rid)]
    return []


def _abort_after_two_messages() -> dict[str, Any]:
    """Abort request 0 after its second message; return its terminal, what was streamed, and the verdicts.

    Seed 1 makes request 0 generate 8 tokens in 5 streamed messages; the abort lands after the
    second one (4 tokens), so it certainly cuts the request short.
    """
    pipeline = simple_pipeline([StageKind.AR], max_tokens=8)
    full = Engine(pipeline, sim_runtimes(pipeline, 1)).generate(Prompt(max_tokens=8))
    assert full[-1].outcome is Outcome.FINISHED and len(full) > 3  # the seed still gives a long request
    engine, monitor = monitored_engine(pipeline, sim_runtimes(pipeline, 1))
    rid = engine.submit(Prompt(max_tokens=8))
    seen = []
    for message in engine.outputs(rid):
        seen.append(message)
        if len(seen) == 2:
            assert not message.finished
            assert engine.abort(rid)
    streamed = tuple(t for m in seen[:-1] for t in m.data)
    assert [m.finished for m in seen] == [False, False, True] and seen[-1].outcome is Outcome.ABORTED
    assert streamed == tuple(t for m in full[:2] for t in m.data) and len(streamed) == 4 < len(full[-1].data)
    return {"terminal": (seen[-1].data, seen[-1].cumulative), "streamed": streamed, "client": _prefix_judged(seen),
            "monitor": verdict(monitor)}  # fmt: skip


def test_b8_ar_abort_delivers_the_generated_prefix():
    """B8 (vllm-omni#6367): an AR abort at a final-output stage carries the prefix the client already saw."""
    run = _abort_after_two_messages()
    streamed = run.pop("streamed")  # (the helper checked it: the first two messages' four tokens)
    assert run == {"terminal": (streamed, 4), "client": [], "monitor": []}


def _b8_core_sizes_no_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """B8 switched into the core: an AR abort's terminal is sized as if it kept nothing (the rule that a
    final AR stage keeps its generated prefix is missing)."""
    emit = SPEC.effects[Effect.EMIT_TERMINAL]

    def sized_without_prefix(lc, rec, event, source, out):
        emit(lc, rec, event, source, out)
        if out and isinstance(out[-1], ob.Emitted) and out[-1].outcome is Outcome.ABORTED:
            out[-1] = out[-1]._replace(cumulative=0)

    monkeypatch.setitem(SPEC.effects, Effect.EMIT_TERMINAL, sized_without_prefix)


def _b8_orchestrator_renders_no_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """B8 switched into the orchestrator: it renders no data for an aborted terminal."""
    real = translation_module._HANDLERS[ob.Emitted]

    def prefix_dropped(translation, o, out, ctx):
        real(translation, o, out, ctx)
        if o.finished and o.outcome is Outcome.ABORTED:  # as if the `o.cumulative` clause were missing
            out[-1] = attrs.evolve(out[-1], message=attrs.evolve(out[-1].message, data=None))

    monkeypatch.setitem(translation_module._HANDLERS, ob.Emitted, prefix_dropped)


def test_b8_an_abort_sized_without_its_prefix_is_caught(monkeypatch: pytest.MonkeyPatch):
    """B8 switched into the core (the terminal is sized without the prefix): the monitor and the client's
    view name ORCH-INV-200."""
    _b8_core_sizes_no_prefix(monkeypatch)
    run = _abort_after_two_messages()
    del run["streamed"]  # (the helper checked it)
    assert run == {"terminal": (None, 0),
                   "client": [("ORCH-INV-200", "ar_abort_delivers_prefix", 0)],
                   "monitor": [("ORCH-INV-200", "ar_abort_delivers_prefix", 0)]}  # fmt: skip


def test_b8_an_abort_rendered_without_its_prefix_is_caught(monkeypatch: pytest.MonkeyPatch):
    """B8 switched into the orchestrator (no data rendered for an aborted terminal). The core sized the
    prefix right, so the monitor is clean; the client's view names ORCH-INV-200."""
    _b8_orchestrator_renders_no_prefix(monkeypatch)
    run = _abort_after_two_messages()
    del run["streamed"]  # (the helper checked it)
    assert run == {"terminal": (None, 4),
                   "client": [("ORCH-INV-200", "ar_abort_delivers_prefix", 0)], "monitor": []}  # fmt: skip
