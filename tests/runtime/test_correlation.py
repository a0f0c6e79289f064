"""RPC and abort results that come back out of order reach their own callers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_fsm import ControlMethod, StageKind
from omni_runtime import AbortAnswer, AbortAt, Orchestrator, Prompt, RpcAnswer, RpcCall, simple_pipeline
from omni_runtime.core import protocol as rp

METHODS = [ControlMethod.PAUSE_SCHEDULER, ControlMethod.RESUME_SCHEDULER]


@settings(max_examples=50)
@given(calls=st.lists(st.tuples(st.sampled_from(METHODS), st.booleans()), min_size=1, max_size=5), data=st.data())
def test_rpc_results_out_of_order_reach_their_callers(calls, data):
    orch = Orchestrator(simple_pipeline([StageKind.AR], replicas=2))
    sent: dict[int, tuple[ControlMethod, bool]] = {}
    results = []
    for method, fails in calls:
        call, out = orch.control(method)
        sent[call] = (method, fails)
        targets = [c for c in out if isinstance(c, RpcCall)]
        assert {(c.stage, c.replica) for c in targets} == {(0, 0), (0, 1)}
        results += [(c.replica, rp.RpcResult(call, not (fails and c.replica == 1), "Boom" if fails else None))
                    for c in targets]  # fmt: skip
    answers = []
    for replica, result in data.draw(st.permutations(results)):
        answers += [c for c in orch.report(0, replica, result) if isinstance(c, RpcAnswer)]
    assert sorted(a.call_id for a in answers) == sorted(sent)
    for answer in answers:
        method, fails = sent[answer.call_id]
        assert answer.method is method and answer.ok is (not fails)
        assert (answer.error == "Boom") if fails else answer.error is None


@settings(max_examples=50)
@given(oks=st.lists(st.booleans(), min_size=1, max_size=6), data=st.data())
def test_abort_results_out_of_order_reach_their_callers(oks, data):
    orch = Orchestrator(simple_pipeline([StageKind.AR], replicas=1, max_running=8))
    pending = []
    for ok in oks:
        rid, _ = orch.submit(Prompt())
        orch.report(0, 0, rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
        call, out = orch.abort(rid)
        (abort,) = [c for c in out if isinstance(c, AbortAt)]
        pending.append((call, rid, rp.AbortResult(abort.abort_id, rid, ok)))
    answers = {}
    for _call, _rid, result in data.draw(st.permutations(pending)):
        for c in orch.report(0, 0, result):
            if isinstance(c, AbortAnswer):
                answers[c.call_id] = c
    for (call, rid, _result), ok in zip(pending, oks, strict=True):
        assert answers[call].rid == rid and answers[call].ok is ok


def test_a_parent_whose_companions_are_being_aborted_retries_its_failed_abort_instead_of_running_on():
    """Its companions were aborted with it: ``AbortAnswer(ok=False)`` ("nothing changed") would be untrue."""
    orch = Orchestrator(simple_pipeline([StageKind.AR, StageKind.DIFFUSION]))
    rid, _ = orch.submit(Prompt((1,)), companions=1)
    for req in (rid, rid + 1):
        orch.report(0, 0, rp.StatusChanged(req, 0, rp.Status.SCHEDULED))
    call, out = orch.abort(rid)
    first = {r: c.abort_id for c in out if isinstance(c, AbortAt) for r in c.req_ids}
    assert sorted(first) == [rid, rid + 1]
    out = orch.report(0, 0, rp.AbortResult(first[rid], rid, False, "busy"))  # the companion's abort is in flight
    (again,) = [c for c in out if isinstance(c, AbortAt)]
    assert again.req_ids == (rid,) and not [c for c in out if isinstance(c, AbortAnswer)]
    out = orch.report(0, 0, rp.AbortResult(first[rid + 1], rid + 1, True))
    out += orch.report(0, 0, rp.AbortResult(again.abort_id, rid, True))
    assert [c for c in out if isinstance(c, AbortAnswer)] == [AbortAnswer(call, rid, True)]
    assert orch.idle()
