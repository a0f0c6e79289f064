"""A Hypothesis state machine drives several requests through the real core with random
interleavings of every event family; the independent invariants judge every step.

Teardown drains everything (shutdown) and asserts each request ended exactly once and no
state remains. Profiles: ``ci`` (derandomized, the default under CI=true) and ``thorough``.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from omni_fsm import TERMINAL, ControlMethod, Lifecycle, LifecycleError, StageKind, StopKind
from omni_fsm import events as ev
from omni_fsm.invariants import Monitor

KINDS = (StageKind.AR, StageKind.AR, StageKind.DIFFUSION)
FINAL = (True, False, True)
STAGE_REPORTS = (ev.Scheduled, ev.Preempted, ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq,
                 ev.AwaitChunk, ev.InputReady, ev.StageOutput, ev.StageFinished, ev.StageFailed,
                 ev.ReplicaLost, ev.AbortDone, ev.AbortFailed)


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = Lifecycle(KINDS, FINAL, capacity=2)
        self.monitor = Monitor(KINDS, FINAL, capacity=2)
        self.next_rid = 1
        self.ever: list[int] = []
        self.next_call = 1

    def _apply(self, event: ev.Event) -> None:
        before = self.core.snapshot()
        try:
            outputs = self.core.handle(event)
        except LifecycleError:
            assert self.core.snapshot() == before, f"a refused {event!r} changed the core"
            return
        violations = self.monitor.step(event, outputs)
        assert not violations, "\n".join(map(str, violations))

    @rule(n=st.sampled_from([1, 1, 2]), companions=st.sampled_from([0, 0, 1]))
    def submit(self, n: int, companions: int) -> None:
        if n > 1:
            companions = 0
        rid = self.next_rid
        self.next_rid += 1 + max(n if n > 1 else 0, companions)
        self.ever.append(rid)
        self._apply(ev.Submit(rid, n, companions))

    @precondition(lambda self: bool(self.core.records))
    @rule(data=st.data(), report=st.sampled_from(STAGE_REPORTS), stop=st.sampled_from(list(StopKind)),
          stale=st.booleans())
    def runtime_report(self, data: st.DataObject, report: type[ev.StageEvent], stop: StopKind, stale: bool) -> None:
        rid = data.draw(st.sampled_from(sorted(self.core.records)))
        stage = self.core.records[rid].stage
        if stale:
            stage = data.draw(st.integers(0, len(KINDS) - 1))
        event = ev.StageFinished(rid, stage, stop) if report is ev.StageFinished else report(rid, stage)
        self._apply(event)

    @precondition(lambda self: bool(self.core.records))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self._apply(ev.Abort(data.draw(st.sampled_from(sorted(self.core.records)))))

    @precondition(lambda self: bool(self.ever))
    @rule(data=st.data(), report=st.sampled_from(STAGE_REPORTS))
    def late_report(self, data: st.DataObject, report: type[ev.StageEvent]) -> None:
        rid = data.draw(st.sampled_from(self.ever))
        self._apply(report(rid, data.draw(st.integers(0, len(KINDS) - 1))))

    @rule(method=st.sampled_from(list(ControlMethod)), ok=st.booleans())
    def control(self, method: ControlMethod, ok: bool) -> None:
        call = self.next_call
        self.next_call += 1
        self._apply(ev.Control(call, method))
        self._apply(ev.RpcDone(call) if ok else ev.RpcFailed(call, "worker raised"))

    @rule()
    def duplicate_rpc_result(self) -> None:
        self._apply(ev.RpcDone(max(self.next_call - 1, 0)))

    @precondition(lambda self: len(self.ever) >= 2)
    @rule()
    def engine_dies(self) -> None:
        self._apply(ev.EngineDied())

    @precondition(lambda self: len(self.ever) >= 3)
    @rule()
    def shutdown(self) -> None:
        self._apply(ev.Shutdown())

    @invariant()
    def terminal_records_are_never_kept(self) -> None:
        assert all(r.state not in TERMINAL for r in self.core.records.values())

    @invariant()
    def slots_match_holders(self) -> None:
        for stage in range(len(KINDS)):
            holders = sum(1 for r in self.core.records.values() if r.stage == stage and self.core.holds_slot(r))
            assert self.core.engine.slots_used[stage] == holders <= self.core.engine.capacity

    def teardown(self) -> None:
        self._apply(ev.Shutdown())
        assert not self.core.records, "state survived the drain"
        violations = self.monitor.finish()
        assert not violations, "\n".join(map(str, violations))


TestLifecycleMachine = pytest.mark.covers(
    "ORCH-INV-100", "ORCH-INV-101", "ORCH-INV-107", "ORCH-INV-109", "ORCH-INV-208", "ORCH-INV-211", "AR-INV-001"
)(LifecycleMachine.TestCase)
