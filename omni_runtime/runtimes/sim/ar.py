"""A simulated autoregressive stage replica: tokens step by step, vLLM-style sub-states."""

from __future__ import annotations

import random
from typing import Any

from omni_fsm import StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.text import IncrementalText
from omni_runtime.runtimes.sim._base import SimReplica, SimRequest
from omni_runtime.runtimes.sim.text import VOCAB, SimTokenizer

_S = rp.Status


class SimAR(SimReplica):
    """Generates 1-2 tokens per step per running request; stops on a stop token or at ``max_tokens``.

    Sub-states follow upstream vLLM: a queued request may park for a grammar or remote KVs (holding
    a slot) before it runs; a running one may be preempted (back to the queue) or wait for an
    input chunk; a request whose prompt is 'too long' finishes from the queue with nothing generated.
    An abort drops the request at once: its generated prefix is what it already reported.

    Text: prompts given as text are tokenized with ``SimTokenizer``; outputs carry their text (unless the
    request's sampling says ``detokenize=False``) and a stop string found in it ends the request (``stop``,
    with the string). A sampling ``seed`` fixes what is sampled: the output's length and its tokens.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tokenizer = self.words = SimTokenizer()

    def plan(self, req: SimRequest) -> None:
        super().plan(req)
        cfg, rng = self.config, req.rng
        sampling = req.stage_input.sampling
        if sampling is None or sampling.detokenize:
            req.text = IncrementalText(self.words, sampling.stop if sampling is not None else (), req.prompt)
        cap = req.stage_input.max_tokens or self.spec.max_tokens
        req.length = rng.randint(1, cap)
        if sampling is not None and sampling.seed is not None:  # the seed fixes what is sampled: length and tokens
            req.tokens = random.Random(sampling.seed)
            req.length = req.tokens.randint(1, cap)
        if rng.random() < cfg.park:
            req.park = rng.choice((_S.AWAIT_GRAMMAR, _S.AWAIT_REMOTE_KVS))
        if rng.random() < cfg.preempt and req.length > 1:
            req.preempt_at = rng.randint(1, req.length - 1)
        if rng.random() < cfg.chunk_wait and req.length > 1:
            req.chunk_at = rng.randint(1, req.length - 1)
        if rng.random() < cfg.prompt_ignored:
            req.phase = "ignored"

    def work(self) -> None:
        held = self.holders()
        for req in held:  # a streaming-input session between turns: its next part, or the end of its input
            if req.phase == "streaming" and req.fed:
                self._next_turn(req)
        for req in self.holders():  # what a parked request waited for has arrived
            if req.phase in ("parked", "chunk"):
                if self.config.parked_needs_free_slot and self.running() >= self.spec.max_running:
                    continue  # B4: its own slot is not counted as free, so with every slot parked it never resumes
                self.move(req, "waiting")
                self.report(req, rp.StatusChanged, _S.INPUT_READY)
        ignored, self.ignored = self.ignored, []
        starting = self.schedule(self.spec.max_running - self.running())
        for req in sorted((*ignored, *starting), key=lambda r: r.arrival):  # as they arrived
            if req.phase == "ignored":
                if self.requests.get(req.req_id) is req:
                    self.report(req, rp.Finished, StopKind.IGNORED)
                    self.end(req)
            elif req.park and req.phase == "waiting":
                self.report(req, rp.StatusChanged, req.park)
                req.park = None
                self.move(req, "parked")
            else:
                self.report(req, rp.StatusChanged, _S.SCHEDULED)
                self.move(req, "running")
        for req in self.holders():
            if req.phase == "running":
                self._generate(req)

    def _next_turn(self, req: SimRequest) -> None:
        """Take what was fed: a part with tokens starts the next turn; the end of the input alone ends the session
        as its last turn ended (``stop``)."""
        parts, req.fed = req.fed, []
        if not any(tokens for tokens, _ in parts):  # the session ends as its last turn did
            self._rest_of_text(req)
            self.report(req, rp.Finished, self._turn_stop(req))
            self.end(req)
            return
        req.prompt += tuple(t for tokens, _ in parts for t in tokens)
        req.turn_start = req.generated
        req.length = req.generated + req.rng.randint(1, req.stage_input.max_tokens or self.spec.max_tokens)
        self.move(req, "waiting")
        self.report(req, rp.StatusChanged, _S.INPUT_READY)

    def _turn_stop(self, req: SimRequest) -> StopKind:
        """Return how the request's (last) turn ended: ``length`` when it made its cap of tokens."""
        cap = req.stage_input.max_tokens or self.spec.max_tokens
        return StopKind.LENGTH if req.generated - req.turn_start >= cap else StopKind.STOP

    def _rest_of_text(self, req: SimRequest) -> None:
        """Report the text held back (a possible stop string's start) before the request finishes, if any."""
        rest = req.text.add((), final=True) if req.text is not None else ""
        if rest:
            self.report(req, rp.Output, 0, (), rest)

    def _generate(self, req: SimRequest) -> None:
        if req.fail:
            self.report(req, rp.Failed, "injected stage failure")
            self.end(req)
            return
        if not req.no_output:
            count = min(req.rng.randint(1, 2), req.length - req.generated)
            tokens = tuple(req.tokens.randrange(VOCAB) for _ in range(count))
            text = req.text.add(tokens) if req.text is not None else None
            self.report(req, rp.Output, count, tokens, text)
            req.generated += count
            if req.text is not None and req.text.stop_reason is not None:  # found above the scheduler: ended here
                self.report(req, rp.Finished, StopKind.STOP, None, req.text.stop_reason)
                self.end(req)
                return
        if req.generated >= req.length and (not req.input_ended or req.fed):  # a turn of a streaming session ended
            self.move(req, "streaming")
            self.report(req, rp.StatusChanged, _S.AWAIT_STREAMING)
        elif req.no_output or req.generated >= req.length:
            self._rest_of_text(req)
            self.report(req, rp.Finished, self._turn_stop(req))
            self.end(req)
        elif req.generated >= req.preempt_at > 0:
            req.preempt_at = -1
            self.move(req, "preempted")
            self.report(req, rp.StatusChanged, _S.PREEMPTED)
        elif req.generated >= req.chunk_at > 0:
            req.chunk_at = -1
            self.move(req, "chunk")
            self.report(req, rp.StatusChanged, _S.AWAIT_CHUNK)
