"""The worker side of an Omni AR stage on vLLM's CPU build: payload construction in a model-runner subclass.

``OmniCPUWorker`` is vLLM's ``CPUWorker`` given through vLLM's own ``worker_cls`` setting
(``EngineArgs(worker_cls="omni_runtime.runtimes.vllm.worker_ext.OmniCPUWorker")``); the payload policy
comes from ``additional_config`` (``payloads.PayloadPolicy``). Its model runner is vLLM's ``CPUModelRunner``
with ``PayloadRunnerMixin`` in front: ``sample_tokens`` takes the step's hidden states, query offsets, token
counts and prompt metadata before vLLM's own sampling and bookkeeping run (which leave logits, sampling and
the tokens exactly as vLLM makes them), then attaches the payloads to the ``ModelRunnerOutput`` vLLM built, by
row, in the request order vLLM's bookkeeping copied. Why not ``worker_extension_cls``: vLLM appends that class
to the worker's bases and refuses any name the worker already has, so it cannot change ``sample_tokens``.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import attrs
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput
from vllm.v1.worker.cpu_worker import CPUWorker

from omni_runtime.runtimes.vllm.payloads import PayloadBuilder, PayloadCounts, PayloadPolicy, Rows, runner_inputs

WORKER_CLS = "omni_runtime.runtimes.vllm.worker_ext.OmniCPUWorker"


class PayloadOutput(AsyncModelRunnerOutput):
    """vLLM's asynchronous runner output for one step whose payloads are built in the background: ``get_output()``
    waits for them and attaches them. (vLLM's CPU build never schedules asynchronously; on the synchronous path the
    runner calls ``get_output()`` before it returns.)"""

    def __init__(self, output: ModelRunnerOutput, payloads: Future[Rows | None]) -> None:
        self._output, self._payloads = output, payloads

    def get_output(self) -> ModelRunnerOutput:
        rows = self._payloads.result()
        if rows is not None:
            # row i belongs to output.req_ids[i] (vLLM's bookkeeping copy); a dict per row: vLLM only carries it
            self._output.pooler_output = rows  # type: ignore[assignment]
        return self._output


class PayloadRunnerMixin:
    """Put in front of vLLM's ``CPUModelRunner`` (``omni_runner_class``): builds each step's stage payloads."""

    omni_payloads: PayloadBuilder

    def sample_tokens(self, grammar_output: Any) -> Any:
        state = getattr(self, "execute_model_state", None)
        builder = self.omni_payloads
        if state is None or not builder.policy.builds_any:  # vLLM's own path, untouched
            if state is not None and builder.policy.enabled:  # nothing to send: no payload object is made at all
                builder.counts.skipped += self.input_batch.num_reqs  # type: ignore[attr-defined]
                builder.counts.empty_steps += 1
            return super().sample_tokens(grammar_output)  # type: ignore[misc]
        started = builder.start(runner_inputs(self, state.hidden_states))  # inline: consumed before this returns
        builder.collect_connector(self)  # on this (the runner's) thread, before vLLM's sampling takes it
        output = super().sample_tokens(grammar_output)  # type: ignore[misc]
        if not isinstance(output, ModelRunnerOutput):  # pipeline-parallel intermediates: nothing of ours
            return output
        return PayloadOutput(output, started).get_output()

    def omni_rows(self) -> Any:
        """Return the current step's construction inputs (views of this runner's buffers); tests only."""
        state = self.execute_model_state  # type: ignore[attr-defined]
        return None if state is None else runner_inputs(self, state.hidden_states)


_RUNNER_CLASSES: dict[type, type] = {}


def omni_runner_class(runner_cls: type) -> type:
    """Return ``runner_cls`` (a vLLM model runner class) with ``PayloadRunnerMixin`` in front (made once)."""
    if runner_cls not in _RUNNER_CLASSES:
        _RUNNER_CLASSES[runner_cls] = type(f"Omni{runner_cls.__name__}", (PayloadRunnerMixin, runner_cls), {})
    return _RUNNER_CLASSES[runner_cls]


def install(runner: Any, policy: PayloadPolicy) -> None:
    """Make ``runner`` (vLLM's, just built) an Omni runner under ``policy``."""
    runner.__class__ = omni_runner_class(type(runner))
    runner.omni_payloads = PayloadBuilder(policy)


class OmniCPUWorker(CPUWorker):
    """vLLM's CPU worker whose model runner builds stage payloads (``worker_cls``); control through vLLM's
    ``collective_rpc`` by the ``omni_*`` method names."""

    def init_device(self) -> None:
        super().init_device()  # type: ignore[no-untyped-call]
        config = self.vllm_config.additional_config
        install(self.model_runner, PayloadPolicy.from_config(config if isinstance(config, dict) else None))

    def omni_set_policy(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Change the payload policy (``PayloadPolicy`` fields), counts reset; return the policy now in effect."""
        builder: PayloadBuilder = self.model_runner.omni_payloads  # type: ignore[attr-defined]
        builder.policy = attrs.evolve(builder.policy, **changes)
        builder.counts = PayloadCounts()
        return attrs.asdict(builder.policy)

    def omni_payload_counts(self) -> dict[str, Any]:
        """Return what payload construction did so far, and on which threads (this one: the runner's)."""
        counts = self.model_runner.omni_payloads.counts  # type: ignore[attr-defined]
        return {"built": counts.built, "skipped": counts.skipped, "empty_steps": counts.empty_steps,
                "background": counts.background, "runner_thread": threading.get_ident(),
                "connector_threads": sorted(counts.connector_threads),
                "builder_threads": sorted(counts.builder_threads)}  # fmt: skip

    def shutdown(self) -> None:
        builder = getattr(self.model_runner, "omni_payloads", None)
        if builder is not None:
            builder.close()
        super().shutdown()


__all__ = ["WORKER_CLS", "OmniCPUWorker", "PayloadOutput", "PayloadRunnerMixin", "install", "omni_runner_class"]
