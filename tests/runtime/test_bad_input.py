"""Bad input from outside fails what it concerns and nothing else.

A runtime's report outside the protocol fails its own request (the error says why) while every
other request runs on; a prompt that is not a ``Prompt`` is refused before anything changes; a
physical abort that raises for a request that cannot run on does not loop; a replica that died
gets no abort; CFG companions reach the next stage in companion order, however they finished.
"""

from __future__ import annotations

from typing import Any

import pytest
from faulty_runtimes import Raising
from helpers import assert_drained

from omni_fsm import Outcome, StageKind, StopKind
from omni_runtime import Engine, Orchestrator, Prompt, RequestRefused, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import sim_runtimes

SCHEDULED = rp.Status.SCHEDULED


def terminals(commands: list[cmd.Command]) -> dict[int, cmd.ClientMessage]:
    return {c.message.rid: c.message for c in commands if isinstance(c, cmd.Deliver) and c.message.finished}


def dispatches(commands: list[cmd.Command]) -> list[cmd.Dispatch]:
    return [c for c in commands if isinstance(c, cmd.Dispatch)]


def two_running(orch: Orchestrator) -> tuple[int, int]:
    """Submit two requests to a one-stage AR pipeline of two replicas; both scheduled, one output each."""
    a, _ = orch.submit(Prompt((1,)))
    b, _ = orch.submit(Prompt((2,)))
    for rid in (a, b):
        replica = orch.routes[rid].replica
        orch.report(0, replica, rp.StatusChanged(rid, 0, SCHEDULED))
        orch.report(0, replica, rp.Output(rid, 1, 1, (5,)))
    return a, b


BAD_REPORTS: dict[str, tuple[Any, str]] = {
    "tokens not an int": (lambda rid: rp.Output(rid, 2, "3", (6,)), "an Output of '3' tokens (str; an int >= 0)"),
    "tokens a bool": (lambda rid: rp.Output(rid, 2, True, (6,)), "an Output of True tokens (bool; an int >= 0)"),
    "negative tokens": (lambda rid: rp.Output(rid, 2, -1, (6,)), "an Output of -1 tokens (int; an int >= 0)"),
    "seq not an int": (lambda rid: rp.Output(rid, "2", 1, (6,)), "the runtime's Output has seq '2' (an int is needed)"),
    "seq a float, in order": (lambda rid: rp.Output(rid, 2.0, 1, (6,)), "has seq 2.0 (an int is needed)"),
    "a payload its stage cannot take": (lambda rid: rp.Output(rid, 2, 1, [6]),
                                        "the runtime's Output cannot be taken by its stage: TypeError"),
    "stop not a StopKind": (lambda rid: rp.Finished(rid, 2, "stop"), "a Finished with stop 'stop' (a StopKind)"),
    "an unknown status": (lambda rid: rp.StatusChanged(rid, 2, "gone"), "an unknown status 'gone'"),
}


@pytest.mark.parametrize("bad", sorted(BAD_REPORTS))
def test_a_report_outside_the_protocol_fails_only_its_request(bad: str) -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR], replicas=2))
    a, b = two_running(orch)
    make, why = BAD_REPORTS[bad]
    ended = terminals(orch.report(0, orch.routes[a].replica, make(a)))
    assert list(ended) == [a] and ended[a].outcome is Outcome.FAILED
    assert ended[a].error is not None and why in ended[a].error, ended[a].error
    finished = terminals(orch.report(0, orch.routes[b].replica, rp.Finished(b, 2, StopKind.LENGTH)))
    assert finished[b].outcome is Outcome.FINISHED and finished[b].data == (5,)
    assert_drained(orch)


def test_a_late_report_outside_the_protocol_is_dropped_like_any_late_report() -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    a, _ = orch.submit(Prompt((1,)))
    orch.report(0, 0, rp.StatusChanged(a, 0, SCHEDULED))
    assert terminals(orch.report(0, 0, rp.Finished(a, 1, StopKind.STOP)))[a].outcome is Outcome.FINISHED
    assert orch.report(0, 0, rp.Finished(a, 2, "stop")) == [cmd.ReportAfterFinished(0, 0, a, "Finished")]  # logged
    assert orch.counters()["dropped_unknown"] == 1  # the request ended: nothing to fail


def test_a_token_count_of_an_int_subclass_is_an_int() -> None:
    class Count(int):
        pass

    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    a, _ = orch.submit(Prompt((1,)))
    orch.report(0, 0, rp.StatusChanged(a, 0, SCHEDULED))
    orch.report(0, 0, rp.Output(a, 1, Count(2), (5, 6)))
    assert terminals(orch.report(0, 0, rp.Finished(a, 2)))[a].cumulative == 2


def test_a_seq_of_an_int_subclass_is_an_int() -> None:
    class Seq(int):
        pass

    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    a, _ = orch.submit(Prompt((1,)))
    orch.report(0, 0, rp.StatusChanged(a, Seq(0), SCHEDULED))
    assert terminals(orch.report(0, 0, rp.Finished(a, Seq(1))))[a].outcome is Outcome.FINISHED


def test_an_output_without_a_payload_adds_no_tokens() -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    a, _ = orch.submit(Prompt((1,)))
    orch.report(0, 0, rp.StatusChanged(a, 0, SCHEDULED))
    orch.report(0, 0, rp.Output(a, 1, 1, (5,)))
    orch.report(0, 0, rp.Output(a, 2, 1))
    assert terminals(orch.report(0, 0, rp.Finished(a, 3)))[a].data == (5,)


@pytest.mark.parametrize("prompt", ["a text prompt", (1, 2), None])
def test_a_prompt_that_is_not_a_prompt_is_refused_and_changes_nothing(prompt: Any) -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    with pytest.raises(RequestRefused, match=f"a prompt is an omni_runtime.Prompt, not {type(prompt).__name__}"):
        orch.submit(prompt)
    assert_drained(orch)
    rid, out = orch.submit(Prompt((1,)))  # the next request is served as if nothing happened
    assert rid == 0 and len(dispatches(out)) == 1


@pytest.mark.parametrize(("fields", "error", "message"), [
    ({"token_ids": "12"}, TypeError, r"Prompt.token_ids must be a tuple of ints, not '12'"),
    ({"token_ids": (1,), "text": "a b"}, ValueError, "a Prompt has token_ids or text, not both"),
    ({"text": b"a b"}, TypeError, "Prompt.text must be a str"),
    ({"sampling": {"seed": 1}}, TypeError, "Prompt.sampling must be a Sampling"),
    ({"negative": (1, "x")}, TypeError, "Prompt.negative must be a tuple of ints"),
    ({"token_ids": (1, "2")}, TypeError, "Prompt.token_ids must be a tuple of ints"),
    ({"max_tokens": 0}, ValueError, "Prompt.max_tokens must be an int >= 1, not 0"),
    ({"height": 0}, ValueError, "Prompt.height must be an int >= 1, not 0"),
    ({"width": 2.5}, ValueError, "Prompt.width must be an int >= 1, not 2.5"),
])  # fmt: skip
def test_a_prompt_checks_its_fields_when_made(fields: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Prompt(**fields)


def test_an_abort_that_raises_for_samples_fails_them_once_without_a_retry_loop() -> None:
    pipeline = simple_pipeline([StageKind.AR])
    runtimes: list[list[Any]] = sim_runtimes(pipeline, seed=1)
    runtimes[0][0] = raising = Raising.around(runtimes[0][0], abort_requests=2)
    engine = Engine(pipeline, runtimes)
    rid = engine.submit(Prompt((1, 2)), n=2)
    engine.host.pump()  # both samples dispatched and scheduled
    # the samples failed before the abort took effect: the call is answered (ORCH-INV-106), not aborted (ok False)
    assert engine.abort(rid) is False
    assert raising.calls == {"abort_requests": 1}  # one abort for both samples, not sent again to the one that raised
    messages = list(engine.outputs(rid))
    ends = [(m.sample, m.outcome, m.error) for m in messages if m.stage_final or m.finished]
    error = "its physical abort raised: RuntimeError: abort_requests broke"
    assert ends == [(0, Outcome.FAILED, error), (1, Outcome.FAILED, error), (-1, Outcome.FAILED, "error")]
    assert_drained(engine.orchestrator)


def test_a_replica_that_died_gets_no_abort_for_the_companion_it_held() -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR, StageKind.DIFFUSION], replicas=2))
    rid, out = orch.submit(Prompt((1,)), companions=1)
    assert [(d.rid, d.stage, d.replica) for d in dispatches(out)] == [(rid, 0, 0), (rid + 1, 0, 0)]  # side by side
    out = orch.report(0, 0, rp.ReplicaDied())
    assert not [c for c in out if isinstance(c, cmd.AbortAt)]
    assert terminals(out)[rid].outcome is Outcome.FAILED
    assert_drained(orch)


def test_companions_reach_the_next_stage_in_companion_order_whatever_order_they_finished_in() -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR, StageKind.DIFFUSION]))
    rid, _ = orch.submit(Prompt((1,)), companions=2)
    for dep, tokens in ((rid + 2, (20,)), (rid + 1, (10,)), (rid, (1,))):  # the second companion finishes first
        orch.report(0, 0, rp.StatusChanged(dep, 0, SCHEDULED))
        orch.report(0, 0, rp.Output(dep, 1, 1, tokens))
        out = orch.report(0, 0, rp.Finished(dep, 2))
    (forward,) = dispatches(out)
    assert forward.stage == 1 and forward.stage_input.multimodal is not None
    assert forward.stage_input.multimodal["negative"] == ((10,), (20,))
