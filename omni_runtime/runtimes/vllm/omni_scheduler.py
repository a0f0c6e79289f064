"""The Omni scheduler: vLLM's v1 ``Scheduler`` (or ``AsyncScheduler``) with a stage's chunk streaming on top.

Given through vLLM's own setting, ``EngineArgs(scheduler_cls="omni_runtime.runtimes.vllm.omni_scheduler.
OmniScheduler")`` (``SchedulerConfig.get_scheduler_cls()`` resolves it), or ``SchedulerOptions(scheduler_cls=...)``
at the scheduler level. It changes no scheduling decision: ``schedule()``, admission, preemption, KV blocks and
the prefix cache are vLLM's own (AR-INV-001, checked step by step against the upstream scheduler). What it adds,
after vLLM's ``update_from_output`` has made a step's outputs:

- the stage's ``PayloadPolicy`` (``payloads.py``), read from the same ``additional_config`` the worker reads;
- a chunk processor (``omni_chunk_processor``: a qualified name), the stage component that turns a request's
  step outputs into chunks for the next stage (AR-INV-301). It is called for a request's step when the step
  carries a tensor payload, when the request finished (its end of stream: the chunk is marked ``eof``), and, only
  for a processor that declares ``requires_token_updates = True``, when the step sampled tokens. A request whose
  final output stage is this one (``SamplingParams.extra_args["omni_final_stage_id"] == omni_stage_id``, read once
  at ``add_request``) sends nothing on: it is excluded. The chunks queue up in ``chunks`` for the stage's
  connector (``take_chunks()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from omni_runtime.runtimes.vllm.payloads import PayloadPolicy

SCHEDULER_CLS = "omni_runtime.runtimes.vllm.omni_scheduler.OmniScheduler"
PROCESSOR_KEY = "omni_chunk_processor"
STAGE_ID_KEY = "omni_stage_id"
FINAL_STAGE_ARG = "omni_final_stage_id"  #: ``SamplingParams.extra_args`` key: the request's final output stage


class ChunkProcessor(Protocol):
    """Turns one request's step outputs into a chunk for the next stage (``None``: nothing to send this step).

    ``requires_token_updates`` (class attribute, default ``False``): called on every step that sampled tokens,
    not only on steps that carry a tensor payload."""

    def __call__(self, request_id: str, token_ids: list[int], payload: Any, finished: bool) -> Any: ...


@attrs.frozen
class Chunk:
    """One chunk queued for the next stage: the processor's data, and whether the request's stream ends with it."""

    request_id: str
    data: Any
    eof: bool


@attrs.define
class ChunkCounts:
    """Why the processor was called, how often: per trigger, and requests excluded as final here."""

    payload: int = 0
    tokens: int = 0  #: token-only steps (``requires_token_updates``)
    finished: int = 0
    excluded: int = 0


class OmniSchedulingMixin:
    """The Omni scheduler's additions, put in front of ``Scheduler`` or ``AsyncScheduler``."""

    omni_policy: PayloadPolicy
    chunk_processor: ChunkProcessor | None
    chunks: list[Chunk]
    chunk_counts: ChunkCounts

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config: Mapping[str, Any] = self.vllm_config.additional_config or {}  # type: ignore[attr-defined]
        self.omni_policy = PayloadPolicy.from_config(config)
        processor = config.get(PROCESSOR_KEY)
        self.chunk_processor = resolve_obj_by_qualname(processor)() if isinstance(processor, str) else processor
        self.omni_stage_id = int(config.get(STAGE_ID_KEY, 0))
        self.chunks = []
        self.chunk_counts = ChunkCounts()
        self.final_here: set[str] = set()  #: requests whose final output stage is this one: no chunks

    def add_request(self, request: Any) -> None:
        params = request.sampling_params
        extra = params.extra_args if params is not None else None
        if extra and extra.get(FINAL_STAGE_ARG) == self.omni_stage_id:  # read once, at admission
            self.final_here.add(request.request_id)
        super().add_request(request)  # type: ignore[misc]

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)  # type: ignore[misc]
        if self.chunk_processor is not None:  # none: a stage with no next stage to stream to, vLLM's path alone
            self.hand_to_processor(outputs)
        return outputs

    def hand_to_processor(self, outputs: Mapping[int, Any]) -> None:
        """Give the chunk processor what it asked for of one step's outputs (``update_from_output``'s own work)."""
        processor = self.chunk_processor
        assert processor is not None
        wants_tokens = bool(getattr(processor, "requires_token_updates", False))
        excluded, chunks = self.final_here, self.chunks
        calls = skipped = 0  # counted here, added once: this loop runs for every request of every step
        for engine_outputs in outputs.values():
            for o in engine_outputs.outputs:
                if o.pooling_output is None and o.finish_reason is None:  # the hot path: a decode step's tokens
                    new = o.new_token_ids
                    if not (wants_tokens and new):
                        continue  # no tensor payload and no end: a processor without the declaration waits
                    rid = o.request_id
                    if excluded and rid in excluded:
                        skipped += 1
                        continue
                    calls += 1
                    data = processor(rid, new, None, False)
                    if data is not None:
                        chunks.append(Chunk(rid, data, False))
                else:
                    self._payload_or_end(processor, o)
        self.chunk_counts.tokens += calls
        self.chunk_counts.excluded += skipped
        if excluded:  # forget the excluded requests vLLM no longer tracks
            excluded.intersection_update(self.requests)  # type: ignore[attr-defined]

    def _payload_or_end(self, processor: ChunkProcessor, o: Any) -> None:
        """Hand the processor an output with a tensor payload or an end (the request's last chunk: ``eof``)."""
        rid, counts = o.request_id, self.chunk_counts
        if rid in self.final_here:
            counts.excluded += 1
            return
        finished = o.finish_reason is not None
        if o.pooling_output is not None:
            counts.payload += 1
        else:
            counts.finished += 1
        # a resumable request whose turn ended goes on (vLLM still tracks it unfinished): not its end
        requests = self.requests  # type: ignore[attr-defined]
        ended = finished and (rid not in requests or requests[rid].is_finished())
        data = processor(rid, o.new_token_ids, o.pooling_output, ended)
        if data is not None or ended:
            self.chunks.append(Chunk(rid, data, ended))

    def take_chunks(self) -> list[Chunk]:
        """Return the chunks queued since the last call (the stage connector sends them)."""
        taken, self.chunks = self.chunks, []
        return taken


class OmniScheduler(OmniSchedulingMixin, Scheduler):
    """vLLM's ``Scheduler`` with the Omni stage's chunk streaming."""


class OmniAsyncScheduler(OmniSchedulingMixin, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` (GPU's default) with the Omni stage's chunk streaming."""


__all__ = ["FINAL_STAGE_ARG", "PROCESSOR_KEY", "SCHEDULER_CLS", "STAGE_ID_KEY", "Chunk", "ChunkCounts",
           "ChunkProcessor", "OmniAsyncScheduler", "OmniScheduler", "OmniSchedulingMixin"]  # fmt: skip
