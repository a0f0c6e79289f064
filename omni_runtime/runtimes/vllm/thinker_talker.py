"""Thinker -> talker on real vLLM engines: the thinker's stage payload reaches the talker through an input adapter.

Each stage is an in-process ``EngineCore`` in a process of its own (``ProcessRuntime``), driven by a
``PayloadStageRuntime``. What each engine is started with follows from the pipeline's adapters
(``stage_engine_args``):

- a stage whose next stage reads it through ``ar_hidden2embeds`` builds hidden-state payloads (``OmniCPUWorker``,
  ``PayloadPolicy(enabled=True)``); through ``ar_tokens2ar`` it is token-only
  (``omni_pooler_payload_include_hidden = False``: its worker builds no payload at all);
- a stage whose next stage reads it through ``ar_tokens2ar`` also runs the Omni scheduler (``scheduler_cls``) with
  the ``SampledTokens`` chunk processor (``requires_token_updates``): each step's sampled ids become a chunk for
  the next stage, the request's last one marked ``eof``; the talker's prompt is that chunk stream;
- a stage whose own adapter is ``ar_hidden2embeds`` takes prompt embeddings (``enable_prompt_embeds``; without it
  vLLM's ``EngineCore`` would take an embeddings-only request silently, so the runtime refuses one).

A stage's result (its ``Finished`` payload, what the orchestrator hands the next stage's adapter) is a mapping
(``RESULT_KEYS``): ``token_ids`` (what it sampled); ``hidden_states`` (the payload its worker built: every step's
rows of the last layer, in order, ``[prompt + sampled - 1, hidden]``; ``None`` when it built none);
``payload_counts`` (its worker's counters, ``None`` without a payload policy); ``prompt_token_ids`` and
``prompt_embeds`` (the prompt vLLM's request held: the evidence of what crossed); ``chunks`` (the chunk stream
the Omni scheduler queued for the request, ``(data, eof)`` in order; ``None`` on a stage without a processor) and
``chunk_counts`` (the scheduler's ``ChunkCounts``: why its processor was called, how often).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import torch
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput

from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.errors import ConfigError
from omni_runtime.hosting.process import ProcessRuntime, process_runtimes
from omni_runtime.runtimes.vllm._config import SchedulerOptions
from omni_runtime.runtimes.vllm._engine import CoreEngine
from omni_runtime.runtimes.vllm._plan import RequestPlan
from omni_runtime.runtimes.vllm.omni_scheduler import PROCESSOR_KEY, SCHEDULER_CLS, STAGE_ID_KEY, OmniSchedulingMixin
from omni_runtime.runtimes.vllm.payloads import HIDDEN, PayloadPolicy
from omni_runtime.runtimes.vllm.scheduler import LiveRequest, VllmSchedulerRuntime
from omni_runtime.runtimes.vllm.worker_ext import WORKER_CLS

HIDDEN_ADAPTER, TOKENS_ADAPTER = "ar_hidden2embeds", "ar_tokens2ar"
FACTORY = "omni_runtime.runtimes.vllm.thinker_talker:stage_factory"
EMBEDS = "prompt_embeds"  #: the ``StageInput.multimodal`` key of a stage's prompt embeddings ([tokens, hidden])
RESULT_KEYS = ("token_ids", "hidden_states", "payload_counts", "prompt_token_ids", "prompt_embeds", "chunks",
               "chunk_counts")  # fmt: skip
#: the chunk processor of a stage that streams its sampled tokens to the next (``ar_tokens2ar``)
TOKEN_CHUNKS = "omni_runtime.runtimes.vllm.thinker_talker.SampledTokens"


class SampledTokens:
    """The chunk processor of a token-only stage: each step's sampled ids are the chunk (``None``: none sampled).

    It declares ``requires_token_updates``, so the Omni scheduler calls it on the steps that carry no tensor
    payload, which on a token-only stage is every step (AR-INV-301)."""

    requires_token_updates = True

    def __call__(self, request_id: str, token_ids: list[int], payload: Any, finished: bool) -> Any:
        return tuple(token_ids) if token_ids else None


def stage_engine_args(pipeline: Pipeline) -> tuple[dict[str, Any], ...]:
    """Return each stage's extra ``EngineArgs``, from its own adapter and the next stage's."""
    stages, out = pipeline.stages, []
    for i, spec in enumerate(stages):
        args: dict[str, Any] = {}
        following = stages[i + 1].adapter if i + 1 < len(stages) else None
        if following in (HIDDEN_ADAPTER, TOKENS_ADAPTER):
            policy = PayloadPolicy(enabled=True, include_hidden=following == HIDDEN_ADAPTER)
            args.update(worker_cls=WORKER_CLS, additional_config=policy.as_config())
        if following == TOKENS_ADAPTER:  # its sampled ids stream to the next stage as chunks
            args["scheduler_cls"] = SCHEDULER_CLS
            args["additional_config"].update({PROCESSOR_KEY: TOKEN_CHUNKS, STAGE_ID_KEY: i})
        if spec.adapter == HIDDEN_ADAPTER:
            args["enable_prompt_embeds"] = True
        out.append(args)
    return tuple(out)


class PayloadEngine(CoreEngine):
    """A ``CoreEngine`` that keeps, per request, the hidden-state rows its worker attached to each step's output."""

    def __init__(self, model_dir: str, options: SchedulerOptions, **engine_args: Any) -> None:
        super().__init__(model_dir, options, **engine_args)
        self.payload_worker = "worker_cls" in engine_args  #: the worker builds payloads (``omni_payload_counts``)
        self.takes_embeds = bool(engine_args.get("enable_prompt_embeds", False))
        self.hidden_size = int(self.core.vllm_config.model_config.get_hidden_size())
        self.hidden_rows: dict[str, list[torch.Tensor]] = {}  #: vLLM request id -> its steps' hidden rows
        #: vLLM request id -> the chunks the Omni scheduler queued for it so far (no processor: no entry)
        self.streams: dict[str, list[tuple[Any, bool]]] = {}
        scheduler = self.core.scheduler
        self.chunking = isinstance(scheduler, OmniSchedulingMixin) and scheduler.chunk_processor is not None

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        output = super().execute(so)
        rows = output.pooler_output
        if rows:  # row i is output.req_ids[i]'s payload dict (``None``: nothing built for it)
            for rid, row in zip(output.req_ids, rows, strict=False):
                if isinstance(row, dict) and HIDDEN in row:
                    self.hidden_rows.setdefault(rid, []).append(row[HIDDEN])
        return output

    def stream_of(self, request_id: str) -> tuple[tuple[Any, bool], ...] | None:
        """Return (and forget) the chunks queued for ``request_id``, in order (``None``: this stage makes none)."""
        if not self.chunking:
            return None
        for chunk in cast(OmniSchedulingMixin, self.core.scheduler).take_chunks():  # the stage connector's work
            self.streams.setdefault(chunk.request_id, []).append((chunk.data, chunk.eof))
        return tuple(self.streams.pop(request_id, ()))

    def chunk_counts(self) -> dict[str, int] | None:
        """Return the Omni scheduler's chunk counters (``None``: this stage makes no chunks)."""
        if not self.chunking:
            return None
        return attrs.asdict(cast(OmniSchedulingMixin, self.core.scheduler).chunk_counts)

    def payload_counts(self) -> dict[str, int] | None:
        """Return the worker's payload counters (``None``: no payload worker)."""
        if not self.payload_worker:
            return None
        counts = self.core.collective_rpc("omni_payload_counts")[0]
        return {key: int(counts[key]) for key in ("built", "skipped", "empty_steps")}


class PayloadStageRuntime(VllmSchedulerRuntime):
    """An AR stage on a ``PayloadEngine``: takes prompt embeddings (``multimodal["prompt_embeds"]``) and finishes
    each request with its stage result (the module's docstring)."""

    engine: PayloadEngine

    def __init__(self, spec: StageSpec, options: SchedulerOptions, engine: PayloadEngine) -> None:
        super().__init__(spec, options, engine=engine, plans=_given_max_tokens)
        self._embeds: torch.Tensor | None = None  #: the prompt embeddings of the request being added

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        given = (stage_input.multimodal or {}).get(EMBEDS)
        self._embeds = None if given is None else torch.as_tensor(given, dtype=torch.float32).contiguous()
        try:
            super().add_request(req_id, stage_input)
        finally:
            self._embeds = None

    def _refusal(self, token_ids: tuple[int, ...]) -> str | None:
        embeds = self._embeds
        if embeds is None:
            return super()._refusal(token_ids)
        if not self.engine.takes_embeds:
            return "prompt embeddings given to a stage started without enable_prompt_embeds"
        if embeds.ndim != 2 or embeds.shape[1] != self.engine.hidden_size or not len(embeds):
            return f"prompt embeddings of shape {tuple(embeds.shape)}, not [tokens, {self.engine.hidden_size}]"
        if len(embeds) >= self.options.max_model_len:
            return f"{len(embeds)} prompt embeddings leave no room under max_model_len={self.options.max_model_len}"
        return None

    def _prompt(self, live: LiveRequest, token_ids: Sequence[int] | None) -> dict[str, Any]:
        if self._embeds is None:
            return super()._prompt(live, token_ids)
        return {"prompt_token_ids": None, "prompt_embeds": self._embeds}

    def _report(self, live: LiveRequest, make: Any, *args: Any) -> None:
        if make in (rp.Finished, rp.Failed, rp.Aborted):  # what was kept for the request goes with its end
            rows = self.engine.hidden_rows.pop(str(live.req_id), [])
            chunks = self.engine.stream_of(str(live.req_id))
            if make is rp.Finished:
                stop, _, stop_reason = args
                args = (stop, self._result(live, rows, chunks), stop_reason)
        super()._report(live, make, *args)

    def _result(self, live: LiveRequest, rows: list[torch.Tensor],
                chunks: tuple[tuple[Any, bool], ...] | None) -> dict[str, Any]:  # fmt: skip
        request = live.request
        assert request is not None
        prompt_ids = request.prompt_token_ids
        return {"token_ids": tuple(request.output_token_ids), "hidden_states": torch.cat(rows) if rows else None,
                "payload_counts": self.engine.payload_counts(),
                "prompt_token_ids": None if prompt_ids is None else tuple(prompt_ids),
                "prompt_embeds": request.prompt_embeds, "chunks": chunks,
                "chunk_counts": self.engine.chunk_counts()}  # fmt: skip

    def shutdown(self) -> None:
        self.engine.hidden_rows.clear()
        self.engine.streams.clear()
        super().shutdown()


def _given_max_tokens(spec: StageSpec, req_id: int, given: StageInput) -> RequestPlan:
    return RequestPlan(max_tokens=given.max_tokens or spec.max_tokens)


def stage_factory(spec: StageSpec, stage: int, replica: int, model_dir: str,
                  engine_args: Sequence[dict[str, Any]]) -> PayloadStageRuntime:  # fmt: skip
    """Return stage ``stage``'s replica on a ``PayloadEngine`` over ``model_dir`` with ``engine_args[stage]``
    (greedy unless the stage input samples; one engine per process: run it in a ``ProcessRuntime``)."""
    options = SchedulerOptions(max_num_seqs=spec.max_running, block_size=32, max_model_len=256,
                               max_num_batched_tokens=256)  # fmt: skip
    return PayloadStageRuntime(spec, options, PayloadEngine(model_dir, options, **engine_args[stage]))


def payload_runtimes(pipeline: Pipeline, model_dir: str) -> list[list[ProcessRuntime]]:
    """Return a ``PayloadStageRuntime`` per replica of every stage of ``pipeline``, each in a process of its own,
    its engine started as ``stage_engine_args`` says (``ENGINE_ENV`` set where not set already)."""
    from omni_runtime.runtimes.vllm import ENGINE_ENV

    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    if not (Path(model_dir) / "config.json").is_file():
        raise ConfigError(f"{model_dir}: no model there (config.json missing)")
    return process_runtimes(pipeline, FACTORY, model_dir, stage_engine_args(pipeline))


__all__ = ["EMBEDS", "FACTORY", "HIDDEN_ADAPTER", "RESULT_KEYS", "TOKENS_ADAPTER", "TOKEN_CHUNKS",
           "PayloadEngine", "PayloadStageRuntime", "SampledTokens", "payload_runtimes", "stage_engine_args",
           "stage_factory"]  # fmt: skip
