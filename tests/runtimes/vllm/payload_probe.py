"""Runs one real vLLM engine (the tiny model) in this process and prints what its stage payloads were, as JSON:
``python -m tests.runtimes.vllm.payload_probe MODEL_DIR CELL`` (one engine per process: vLLM's shutdown tears
down process-wide state). ``CELL`` is ``SCHEDULER,COMPILATION,PROCESS``:

- ``SCHEDULER``: ``stock`` (vLLM's own scheduler and worker) or ``omni`` (``OmniScheduler`` and
  ``OmniCPUWorker``, a chunk processor on);
- ``COMPILATION``: ``eager`` (``enforce_eager=True``) or ``compiled`` (vLLM's ``torch.compile`` path);
- ``PROCESS``: ``in-process`` (the model runner in this process: vLLM's ``UniProcExecutor``) or ``stage-process``
  (the model runner in a process of its own: vLLM's multiprocessing executor; payloads cross in its output).

The omni engine runs the same workload once per payload policy (``POLICIES``; the worker's policy is switched
through vLLM's ``collective_rpc``) and reports, per policy, the tokens and top-3 logprobs, each request's payloads
per step (keys, shapes and a digest of the tensors), the construction counts, the chunk processor's calls and the
chunks queued (one run, ``TENSOR_TRIGGER_RUN``, with a processor that does not declare ``requires_token_updates``).
In-process it also runs the overwrite scenario (``overwrite``: background construction gated until the next step has
overwritten the runner's buffers, against inline construction and against background construction without a
snapshot) and the workload under each faulty payload builder (``faults``: ``faulty_payloads.FAULTS``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import tests.runtimes.real_engines  # noqa: F401  (the engine environment)

PROMPTS = [[1, 10, 11, 12], [1, 500, 7, 8, 9, 40, 41, 42, 43], [1, 974, 975]]
MAX_TOKENS = 5
#: name -> worker policy changes (``PayloadPolicy`` fields)
POLICIES = {
    "hidden-inline": {"include_hidden": True, "prefill_conditioning": True, "materialization": "inline"},
    "hidden-background": {"include_hidden": True, "prefill_conditioning": True, "materialization": "background"},
    "token-only-inline": {"include_hidden": False, "prefill_conditioning": True, "materialization": "inline"},
    "token-only-background": {"include_hidden": False, "prefill_conditioning": True, "materialization": "background"},
    "nothing-inline": {"include_hidden": False, "prefill_conditioning": False, "materialization": "inline"},
    "nothing-background": {"include_hidden": False, "prefill_conditioning": False, "materialization": "background"},
    "token-only-tensor-trigger": {"include_hidden": False, "prefill_conditioning": True, "materialization": "inline"},
}  # fmt: skip
#: the run whose chunk processor does not declare ``requires_token_updates`` (every other run's does)
TENSOR_TRIGGER_RUN = "token-only-tensor-trigger"


def _digest(payload: Any) -> Any:
    if payload is None:
        return None
    return {k: [list(v.shape), hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest()[:16]]
            for k, v in sorted(payload.items())}  # fmt: skip


def build(model: str, scheduler: str, compiled: bool, process: str) -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor.abstract import Executor

    from omni_runtime.runtimes.vllm.omni_scheduler import PROCESSOR_KEY, SCHEDULER_CLS
    from omni_runtime.runtimes.vllm.payloads import PayloadPolicy
    from omni_runtime.runtimes.vllm.worker_ext import WORKER_CLS

    extra: dict[str, Any] = {}
    if scheduler == "omni":
        processor = "tests.runtimes.vllm.chunk_processors.TokenUpdates"
        config = {**PayloadPolicy(enabled=True).as_config(), PROCESSOR_KEY: processor}
        extra = {"scheduler_cls": SCHEDULER_CLS, "worker_cls": WORKER_CLS, "additional_config": config}
    if process == "stage-process":
        extra["distributed_executor_backend"] = "mp"
    args = EngineArgs(model=model, dtype="float32", max_model_len=128, enforce_eager=not compiled, max_num_seqs=4,
                      seed=0, block_size=32, skip_tokenizer_init=True, disable_log_stats=True,
                      enable_prefix_caching=False, **extra)  # fmt: skip
    config = args.create_engine_config()
    return EngineCore(config, Executor.get_class(config), log_stats=False)


def _request(core: Any, rid: str, prompt: list[int], final_here: bool = False) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=3,
                            extra_args={"omni_final_stage_id": 0} if final_here else None)  # fmt: skip
    params.update_from_generation_config({}, eos_token_id=2)
    ecr = EngineCoreRequest(request_id=rid, prompt_token_ids=prompt, mm_features=None, sampling_params=params,
                            pooling_params=None, arrival_time=time.time(), lora_request=None, cache_salt=None,
                            data_parallel_rank=None)  # fmt: skip
    return Request.from_engine_core_request(ecr, core.request_block_hasher)


def _step(core: Any) -> Any:
    scheduler, executor = core.scheduler, core.model_executor
    so = scheduler.schedule()
    future = executor.execute_model(so, non_block=True)
    grammar = scheduler.get_grammar_bitmask(so)
    out = future.result()
    if out is None:
        out = executor.sample_tokens(grammar)
    return scheduler.update_from_output(so, out)


def workload(core: Any, tag: str) -> dict:
    """Run ``PROMPTS`` (and one request that is final at this stage) to the end; return what came out."""
    for i, prompt in enumerate(PROMPTS):
        core.add_request(_request(core, f"{tag}-{i}", prompt))
    core.add_request(_request(core, f"{tag}-final", PROMPTS[0], final_here=True))
    tokens: dict[str, list[int]] = {}
    logprobs: dict[str, list[Any]] = {}
    payloads: dict[str, list[Any]] = {}
    outputs: list[list[Any]] = []
    for _ in range(100):
        if not core.scheduler.has_requests():
            break
        for engine_outputs in _step(core).values():
            for o in engine_outputs.outputs:
                key = o.request_id.rsplit("-", 1)[1]
                tokens.setdefault(key, []).extend(o.new_token_ids)
                if o.new_logprobs is not None:
                    logprobs.setdefault(key, []).append([[round(float(x), 5) for x in row]
                                                         for row in o.new_logprobs.logprobs])  # fmt: skip
                payloads.setdefault(key, []).append(_digest(o.pooling_output))
                outputs.append([key, len(o.new_token_ids), o.pooling_output is not None, o.finish_reason is not None])
    return {"tokens": tokens, "logprobs": logprobs, "payloads": payloads, "outputs": outputs}


def overwrite(core: Any) -> dict:
    """Background construction gated until the next step has run its forward pass (the runner's offsets, counts
    and metadata rewritten), against inline construction of the same step, and background construction without
    the snapshot."""
    from omni_runtime.runtimes.vllm.payloads import PayloadBuilder, PayloadPolicy, build_payloads, same_payloads

    runner = core.model_executor.driver_worker.worker.model_runner
    for i, prompt in enumerate(PROMPTS[:2]):
        core.add_request(_request(core, f"ow-{i}", prompt))
    scheduler, executor = core.scheduler, core.model_executor
    so = scheduler.schedule()
    executor.execute_model(so)
    policy = PayloadPolicy(enabled=True, include_hidden=True, prefill_conditioning=True, materialization="background")
    builder = PayloadBuilder(policy)
    rows = runner.omni_rows()
    offsets_before = rows.query_start_loc.tolist()
    inline = build_payloads(rows, policy, builder.counts)  # inline: consumed now
    gate = threading.Event()
    safe, unsafe = builder.start(rows, gate), builder.start_unsafe(rows, gate)
    scheduler.update_from_output(so, executor.sample_tokens(scheduler.get_grammar_bitmask(so)))
    so = scheduler.schedule()  # the next step: prepare_inputs rewrites the offsets, counts and metadata
    executor.execute_model(so)
    offsets_after = runner.omni_rows().query_start_loc.tolist()
    gate.set()
    result = {"offsets_before": offsets_before, "offsets_after": offsets_after,
              "background_equals_inline": same_payloads(safe.result(), inline),
              "unsnapshotted_equals_inline": same_payloads(unsafe.result(), inline)}  # fmt: skip
    scheduler.update_from_output(so, executor.sample_tokens(scheduler.get_grammar_bitmask(so)))
    while scheduler.has_requests():
        _step(core)
    builder.close()
    return result


def faults(core: Any) -> dict:
    """The workload on token-only stages whose payload builder is faulty (``faulty_payloads.FAULTS``)."""
    from omni_runtime.runtimes.vllm.payloads import PayloadPolicy
    from tests.runtimes.vllm.faulty_payloads import FAULTS

    runner = core.model_executor.driver_worker.worker.model_runner
    sound = runner.omni_payloads
    found = {}
    try:
        for name, fault in FAULTS.items():
            runner.omni_payloads = fault(PayloadPolicy(True, include_hidden=False, prefill_conditioning=True))
            run = workload(core, name)
            run["counts"] = core.collective_rpc("omni_payload_counts")[0]
            core.scheduler.take_chunks()
            core.scheduler.chunk_processor.calls.clear()
            found[name] = run
    finally:
        runner.omni_payloads = sound
    return found


def main(model: str, cell: str) -> dict:
    import attrs

    from omni_runtime.runtimes.vllm.omni_scheduler import ChunkCounts

    scheduler, compilation, process = cell.split(",")
    started = time.perf_counter()
    core = build(model, scheduler, compilation == "compiled", process)
    built = time.perf_counter() - started
    result: dict[str, Any] = {"cell": cell, "build_s": round(built, 1), "runs": {}}
    try:
        if scheduler == "stock":
            result["runs"]["stock"] = workload(core, "stock")
        else:
            from tests.runtimes.vllm.chunk_processors import TensorTrigger, TokenUpdates

            for name, changes in POLICIES.items():
                core.collective_rpc("omni_set_policy", args=(changes,))
                # one run with a processor that does not declare requires_token_updates
                core.scheduler.chunk_processor = TensorTrigger() if name == TENSOR_TRIGGER_RUN else TokenUpdates()
                run = workload(core, name)
                run["counts"] = core.collective_rpc("omni_payload_counts")[0]
                calls = core.scheduler.chunk_processor.calls
                run["chunks"] = [[c.request_id.rsplit("-", 1)[1], c.eof] for c in core.scheduler.take_chunks()]
                run["processor_calls"] = [[r.rsplit("-", 1)[1], list(t), list(k), f] for r, t, k, f in calls]
                calls.clear()
                run["chunk_counts"] = attrs.asdict(core.scheduler.chunk_counts)
                core.scheduler.chunk_counts = ChunkCounts()
                result["runs"][name] = run
            if process == "in-process":
                result["overwrite"] = overwrite(core)
                result["faults"] = faults(core)
        result["main_thread"] = threading.get_ident()
    finally:
        core.shutdown()
    result["total_s"] = round(time.perf_counter() - started, 1)
    return result


@functools.cache
def probe(model: str, cell: str) -> dict:
    """Return ``main(model, cell)`` run in a process of its own (once per test session)."""
    root = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-m", "tests.runtimes.vllm.payload_probe", model, cell], cwd=root,
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))  # type: ignore[no-any-return]


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2])))
