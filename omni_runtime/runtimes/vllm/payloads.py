"""What an AR stage sends the next stage beside its sampled tokens: the per-request payload (AR-INV-300..303).

A stage's ``PayloadPolicy`` travels in vLLM's ``additional_config`` (the scheduler and the worker read the
same one). A payload is a dict per request and step, carried by vLLM's own ``ModelRunnerOutput.pooler_output``
(``EngineCoreOutput.pooling_output`` at the scheduler): ``hidden_states`` (the step's rows of the last layer)
unless the stage is token-only (``omni_pooler_payload_include_hidden = False``), and ``prefill_conditioning``
(the prompt's last hidden row, on the step that completes the prompt) when the stage sends conditioning. A
request with neither gets no payload at all: ``None``, never an empty dict (``PayloadCounts.skipped``); a step
where no request has one leaves ``pooler_output`` as vLLM left it (``None``).

Construction reads three things the next step reuses: the query offsets (``query_start_loc``), the scheduled
token counts, and scheduler metadata (whether the step completes a request's prompt). Inline construction
consumes them before it returns; background construction works on a ``snapshot()`` of them. Both attach
payloads by row to the request ids vLLM's bookkeeping already copied (``ModelRunnerOutput.req_ids``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np
import torch

HIDDEN = "hidden_states"
CONDITIONING = "prefill_conditioning"
INLINE, BACKGROUND = "inline", "background"
Payload = dict[str, torch.Tensor]  #: one request's payload for one step
Rows = list[Payload | None]  #: one step's payloads, one per row (``None``: that request has nothing to send)
#: ``additional_config`` keys (vLLM's ``EngineArgs(additional_config={...})``)
INCLUDE_HIDDEN_KEY = "omni_pooler_payload_include_hidden"
CONDITIONING_KEY = "omni_prefill_conditioning"
MATERIALIZATION_KEY = "omni_payload_materialization"
PAYLOADS_KEY = "omni_payloads"  #: whether the stage builds payloads at all (off: the runner is vLLM's own path)


@attrs.frozen
class PayloadPolicy:
    """One stage's payload policy: what crosses the stage boundary, and where it is materialized."""

    enabled: bool = False  #: the stage sends payloads (off: vLLM's runner path, untouched)
    include_hidden: bool = True  #: ``omni_pooler_payload_include_hidden``
    prefill_conditioning: bool = False  #: the prompt's last hidden row crosses when the prompt completes
    materialization: str = attrs.field(default=INLINE, validator=attrs.validators.in_((INLINE, BACKGROUND)))

    @classmethod
    def from_config(cls, additional_config: Mapping[str, Any] | None) -> PayloadPolicy:
        """Return the policy ``additional_config`` names (defaults for what it does not name)."""
        config = additional_config or {}
        return cls(bool(config.get(PAYLOADS_KEY, False)), bool(config.get(INCLUDE_HIDDEN_KEY, True)),
                   bool(config.get(CONDITIONING_KEY, False)), str(config.get(MATERIALIZATION_KEY, INLINE)))  # fmt: skip

    def as_config(self) -> dict[str, Any]:
        """Return the ``additional_config`` entries that give this policy."""
        return {PAYLOADS_KEY: self.enabled, INCLUDE_HIDDEN_KEY: self.include_hidden,
                CONDITIONING_KEY: self.prefill_conditioning, MATERIALIZATION_KEY: self.materialization}  # fmt: skip

    @property
    def builds_any(self) -> bool:
        """Whether a request can ever get a payload (hidden states or conditioning)."""
        return self.enabled and (self.include_hidden or self.prefill_conditioning)


@attrs.define
class PayloadCounts:
    """What construction did: per-request payloads built and skipped (nothing to send), steps without any."""

    built: int = 0
    skipped: int = 0  #: request-steps with neither hidden states nor conditioning: no payload object made
    empty_steps: int = 0  #: steps where no request had a payload (``pooler_output`` left ``None``)
    background: int = 0  #: steps materialized on the background thread
    connector_threads: set[int] = attrs.field(factory=set)  #: threads that collected connector output
    builder_threads: set[int] = attrs.field(factory=set)  #: threads that built payloads


@attrs.frozen
class PayloadInputs:
    """What construction reads of one step. Taken from the runner, the arrays are views of buffers the next
    step overwrites; ``snapshot()`` copies them (background construction works on the copy)."""

    query_start_loc: np.ndarray  #: [num_reqs + 1] row offsets of each request in ``hidden_states``
    num_scheduled: np.ndarray  #: [num_reqs] tokens scheduled per request this step
    prompt_done: np.ndarray  #: [num_reqs] this step completes the request's prompt (scheduler metadata)
    hidden_states: torch.Tensor  #: [num_tokens, hidden] the last layer's output of the step

    def snapshot(self) -> PayloadInputs:
        """Return a copy that no later step can change."""
        return PayloadInputs(self.query_start_loc.copy(), self.num_scheduled.copy(), self.prompt_done.copy(),
                             self.hidden_states.detach().clone())  # fmt: skip


def runner_inputs(runner: Any, hidden_states: torch.Tensor) -> PayloadInputs:
    """Return the step's construction inputs as views of ``runner``'s (a vLLM ``GPUModelRunner``) own buffers."""
    batch = runner.input_batch
    n = batch.num_reqs
    offsets = runner.query_start_loc.np[: n + 1]
    scheduled = np.diff(offsets)  # a fresh array, but computed from the live offsets
    done = batch.num_computed_tokens_cpu[:n] + scheduled >= batch.num_prompt_tokens[:n]
    first = batch.num_computed_tokens_cpu[:n] < batch.num_prompt_tokens[:n]
    return PayloadInputs(offsets, scheduled, done & first, hidden_states)


def build_payloads(inputs: PayloadInputs, policy: PayloadPolicy, counts: PayloadCounts) -> Rows | None:
    """Return one payload per row of ``inputs`` (``None`` where a request has nothing to send), or ``None`` when
    no row has one; count what was built and skipped."""
    counts.builder_threads.add(threading.get_ident())
    rows: list[Payload | None] = []
    offsets, hidden = inputs.query_start_loc, inputs.hidden_states
    for i in range(len(offsets) - 1):
        start, end = int(offsets[i]), int(offsets[i + 1])
        conditioning = policy.prefill_conditioning and bool(inputs.prompt_done[i])
        if not (policy.include_hidden or conditioning):
            counts.skipped += 1
            rows.append(None)
            continue
        payload: dict[str, torch.Tensor] = {}
        if policy.include_hidden:
            payload[HIDDEN] = hidden[start:end].clone()
        if conditioning:
            payload[CONDITIONING] = hidden[end - 1 : end].clone()
        counts.built += 1
        rows.append(payload)
    if all(row is None for row in rows):
        counts.empty_steps += 1
        return None
    return rows


class PayloadBuilder:
    """Builds a runner's payloads inline or on one background thread (per ``policy.materialization``)."""

    def __init__(self, policy: PayloadPolicy) -> None:
        self.policy = policy
        self.counts = PayloadCounts()
        self._pool: ThreadPoolExecutor | None = None

    def start(self, inputs: PayloadInputs, gate: threading.Event | None = None) -> Future[Rows | None]:
        """Begin construction of one step's payloads: inline, done before this returns (``inputs`` consumed now);
        in the background, on a snapshot (``gate``: the thread waits for it first, so a test can let the next step
        overwrite the runner's buffers before construction reads anything)."""
        if self.policy.materialization == INLINE:
            done: Future[Rows | None] = Future()
            done.set_result(build_payloads(inputs, self.policy, self.counts))
            return done
        snapshot = inputs.snapshot()
        self.counts.background += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="omni-payloads")
        return self._pool.submit(self._build_after, snapshot, gate)

    def start_unsafe(self, inputs: PayloadInputs, gate: threading.Event) -> Future[Rows | None]:
        """Background construction WITHOUT the snapshot (what AR-INV-303 forbids): for the negative test only."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="omni-payloads")
        return self._pool.submit(self._build_after, inputs, gate)

    def _build_after(self, inputs: PayloadInputs, gate: threading.Event | None) -> Rows | None:
        if gate is not None:
            gate.wait()
        return build_payloads(inputs, self.policy, self.counts)

    def collect_connector(self, runner: Any) -> Any:
        """Take the runner's KV-connector output, on the calling (the runner's) thread: it can run a
        tensor-parallel collective, so it never moves to the background thread."""
        self.counts.connector_threads.add(threading.get_ident())
        return getattr(runner, "kv_connector_output", None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def same_payloads(a: Rows | None, b: Rows | None) -> bool:
    """Return whether two steps' payloads are equal (the same rows, keys and tensors)."""
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return False
        elif x.keys() != y.keys() or not all(torch.equal(x[k], y[k]) for k in x):
            return False
    return True


__all__ = ["BACKGROUND", "CONDITIONING", "HIDDEN", "INCLUDE_HIDDEN_KEY", "INLINE", "PayloadBuilder", "PayloadCounts",
           "PayloadInputs", "PayloadPolicy", "build_payloads", "runner_inputs", "same_payloads"]  # fmt: skip
