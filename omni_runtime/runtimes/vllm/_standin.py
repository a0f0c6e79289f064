"""Deterministic stand-ins for what surrounds vLLM's scheduler: the model executor, grammars, a KV connector.

The scheduler is vLLM's own; only its inputs are made up here, from each request's ``RequestPlan``:

- ``StandInModel.execute``: a ``ModelRunnerOutput`` for a ``SchedulerOutput``, made as the batch
  runs (right after ``schedule()``). A request whose scheduled tokens reach the end of its
  sequence samples one token (EOS or a stop token where
  the plan says, otherwise a token derived from its id and position); a partial prefill samples
  none. The connector's transfers that completed this step ride along, as a worker reports them.
- ``StandInGrammar``: a structured-output grammar that accepts every token; its compilation is a
  ``Future`` resolved after the plan's steps (or with an exception).
- ``OmniStandInConnector``: a scheduler-side KV connector whose loads are asynchronous (the request
  waits in ``WAITING_FOR_REMOTE_KVS``) and whose saves keep a completed request's blocks a few steps.
"""

from __future__ import annotations

import zlib
from concurrent.futures import Future
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

from omni_runtime.runtimes.vllm.tiny import EOS_TOKEN_ID


def sampled_token(request: Request, index: int) -> int:
    """Return the token the stand-in model samples as ``request``'s ``index``-th output."""
    plan = getattr(request, "plan", None)
    if plan is not None:
        if plan.eos_at == index:
            return EOS_TOKEN_ID
        if plan.stop_at is not None and plan.stop_at[0] == index:
            return int(plan.stop_at[1])
    # ids 4..899: never EOS, never a stop token a plan draws (900..999)
    return 4 + zlib.crc32(f"{request.request_id}:{index}".encode()) % 896


class StandInGrammar(StructuredOutputGrammar):
    """A grammar that accepts every token and never terminates on its own."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return tokens

    def rollback(self, num_tokens: int) -> None:
        return None

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        return None

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        return None


def grammar_future() -> Future[StructuredOutputGrammar]:
    """Return a grammar compilation in flight (resolve it with ``compile_grammar``)."""
    return Future()


def compile_grammar(future: Future[StructuredOutputGrammar], fails: bool) -> None:
    """Finish a compilation: a ``StandInGrammar``, or a compile error."""
    if fails:
        future.set_exception(ValueError("stand-in grammar does not compile"))
    else:
        future.set_result(StandInGrammar())


class OmniStandInConnector(KVConnectorBase_V1):
    """A scheduler-side KV connector: asynchronous remote loads and delayed frees, as each request's plan says.

    The worker side is simulated here too: ``tick()`` advances every transfer by one step and
    returns the ``KVConnectorOutput`` a worker would report.
    """

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.loading: dict[str, list[Any]] = {}  #: request id -> [steps left, fails]
        self.saving: dict[str, int] = {}  #: request id -> steps left
        self._loads_started: set[tuple[str, int]] = set()  #: (request id, its preemptions) whose load began

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        plan = getattr(request, "plan", None)
        key = (request.request_id, request.num_preemptions)
        if plan is None or plan.kv_load_steps is None or key in self._loads_started:
            return 0, False
        matched = request.num_prompt_tokens - num_computed_tokens - 1  # the last prompt token is computed here
        return (matched, True) if matched > 0 else (0, False)

    def update_state_after_alloc(self, request: Request, blocks: Any, num_external_tokens: int) -> None:
        plan = getattr(request, "plan", None)
        if num_external_tokens > 0 and plan is not None and plan.kv_load_steps is not None:
            self._loads_started.add((request.request_id, request.num_preemptions))
            self.loading[request.request_id] = [plan.kv_load_steps, plan.kv_load_fails]

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        plan = getattr(request, "plan", None)
        # a producer sends the KV of a request that completed (as a prefill instance hands it to decode)
        completed = request.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
        if plan is not None and plan.kv_save_steps is not None and block_ids and completed:
            self.saving[request.request_id] = plan.kv_save_steps
            return True, None
        return False, None

    # -- the worker side, simulated -------------------------------------------------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None

    def tick(self) -> KVConnectorOutput | None:
        """Advance every transfer one step; return what completed (``None``: nothing)."""
        recving, failed, sending = set(), set(), set()
        for rid, entry in list(self.loading.items()):
            entry[0] -= 1
            if entry[0] < 0:
                del self.loading[rid]
                recving.add(rid)
                if entry[1]:
                    failed.add(rid)
        for rid in list(self.saving):
            self.saving[rid] -= 1
            if self.saving[rid] < 0:
                del self.saving[rid]
                sending.add(rid)
        if not (recving or sending):
            return None
        return KVConnectorOutput(finished_sending=sending or None, finished_recving=recving or None,
                                 failed_recving=failed)  # fmt: skip


class StandInModel:
    """The model executor's stand-in: one ``ModelRunnerOutput`` per ``SchedulerOutput``."""

    def __init__(self, requests: dict[str, Request], connector: OmniStandInConnector | None) -> None:
        self.requests = requests  #: the scheduler's own id -> request map
        self.connector = connector

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        """Return what the model would: sampled tokens for requests at the end of their sequence."""
        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = self.requests[rid]
            # schedule() already advanced num_computed_tokens and said whether this chunk ends a prefill; with
            # asynchronous scheduling the tokens of earlier steps still in flight are placeholders (this step's
            # included), so this token's index counts them
            index = len(req.output_token_ids) + max(req.num_output_placeholders - 1, 0)
            sampled.append([] if req.is_prefill_chunk else [sampled_token(req, index)])
        kv = self.connector.tick() if self.connector is not None else None
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, kv_connector_output=kv)  # fmt: skip
