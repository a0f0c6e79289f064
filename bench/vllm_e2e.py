"""Benchmark the orchestrator on a real vLLM engine: one AR stage, the tiny local Llama, in-process.

16 concurrent requests x 128 greedy tokens, run to completion, two ways on ONE in-process
``EngineCore`` (vLLM allows one per process), alternated run by run:

- bare: ``EngineCore.add_request`` then ``EngineCore.step()`` until every request finished;
- orchestrated: the same prompts submitted to ``omni_runtime.Engine`` whose one replica is the vLLM
  runtime over that core (``VllmSchedulerRuntime(engine=CoreEngine.around(core))``), pumped until
  every request's terminal arrived.

Each figure is the median over the runs (at least 11 of each); tokens are counted from what each
side returned (both must return the same tokens; a request that samples EOS ends before 128: the
runtime's requests do not ignore EOS yet). ``orchestrator_us_per_token`` is the
orchestrated run's time minus the bare run's, per generated token, median over the pairs.

Not measured yet: the two-stage pipeline's time to first token and per-hop latency (it needs stage
processes); the last line says ``ttft_p50_ms=n/a`` until then.

Last line: ``vllm_e2e: bare_tok_s=... orchestrated_tok_s=... orchestrator_us_per_token=... ttft_p50_ms=...
overhead_ratio=...``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for key, value in {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                   "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                   "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}.items():  # fmt: skip
    os.environ.setdefault(key, value)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omni_fsm import StageKind  # noqa: E402
from omni_runtime import Engine, Prompt, simple_pipeline  # noqa: E402
from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime  # noqa: E402
from omni_runtime.runtimes.vllm._engine import CoreEngine  # noqa: E402
from omni_runtime.runtimes.vllm.tiny import build_tiny_llama  # noqa: E402

CONCURRENT, TOKENS = 16, 128


def prompts() -> list[list[int]]:
    return [[1, *(10 + (i * 13 + k) % 900 for k in range(6))] for i in range(CONCURRENT)]


def run_bare(core: Any, run: int) -> tuple[float, list[list[int]]]:
    """Return the seconds to finish every request through ``EngineCore.step()``, and the tokens."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    tokens: dict[str, list[int]] = {}
    start = time.perf_counter()
    for i, prompt in enumerate(prompts()):
        params = SamplingParams(max_tokens=TOKENS, temperature=0.0)  # as the runtime asks: EOS ends a request
        params.update_from_generation_config({}, eos_token_id=2)
        rid = f"bare-{run}-{i}"
        tokens[rid] = []
        core.add_request(Request(rid, prompt, params, None, block_hasher=core.request_block_hasher))
    while core.scheduler.has_requests():
        outputs, _ = core.step()
        for engine_outputs in outputs.values():
            for o in engine_outputs.outputs:
                tokens[o.request_id] += o.new_token_ids
    return time.perf_counter() - start, list(tokens.values())


def run_orchestrated(core: Any) -> tuple[float, list[list[int]]]:
    """Return the seconds to finish every request through the orchestrator and the vLLM runtime, and the tokens."""
    pipeline = simple_pipeline([StageKind.AR], [True], max_running=CONCURRENT)
    options = SchedulerOptions(max_num_seqs=CONCURRENT, block_size=32, max_model_len=256)
    runtime = VllmSchedulerRuntime(pipeline.stages[0], options, engine=CoreEngine.around(core),
                                   plans=lambda spec, rid, inp: RequestPlan(max_tokens=TOKENS))  # fmt: skip
    runtime.engine.shutdown = lambda: None  # type: ignore[method-assign]  # the core outlives this run
    engine = Engine(pipeline, [[runtime]])
    start = time.perf_counter()
    rids = [engine.submit(Prompt(tuple(p), max_tokens=TOKENS)) for p in prompts()]
    engine.run_until_idle()
    ends = [list(engine.outputs(rid))[-1] for rid in rids]
    spent = time.perf_counter() - start
    engine.shutdown()
    return spent, [list(m.data) for m in ends]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of each side, at least 11 (default 11)")
    args = parser.parse_args(argv)
    if args.runs < 11:
        parser.error("--runs must be at least 11")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor.abstract import Executor

    model = str(build_tiny_llama(Path(tempfile.gettempdir()) / f"omni-fsm-tiny-llama-model-{os.getuid()}"))
    config = EngineArgs(model=model, dtype="float32", max_model_len=256, enforce_eager=True, max_num_seqs=CONCURRENT,
                        seed=0, block_size=32, skip_tokenizer_init=True, disable_log_stats=True,
                        ignore_patterns=[]).create_engine_config()  # fmt: skip
    core = EngineCore(config, Executor.get_class(config), log_stats=False)
    run_bare(core, -1)  # warm up
    run_orchestrated(core)
    bare, orchestrated, extra = [], [], []
    for k in range(args.runs):
        b, bare_tokens = run_bare(core, k)
        o, our_tokens = run_orchestrated(core)
        if sorted(map(tuple, bare_tokens)) != sorted(map(tuple, our_tokens)):
            print("vllm_e2e: the two sides generated different tokens", file=sys.stderr)
            return 1
        generated = sum(map(len, our_tokens))
        bare.append(generated / b)
        orchestrated.append(generated / o)
        extra.append((o - b) / generated * 1e6)
        print(f"run {k}: requests={len(our_tokens)} tokens={generated} bare_s={b:.3f} orchestrated_s={o:.3f}",
              flush=True)  # fmt: skip
    core.shutdown()
    bare_tok_s, ours_tok_s = statistics.median(bare), statistics.median(orchestrated)
    print(f"vllm_e2e: bare_tok_s={bare_tok_s:.0f} orchestrated_tok_s={ours_tok_s:.0f} "
          f"orchestrator_us_per_token={statistics.median(extra):.1f} ttft_p50_ms=n/a "
          f"overhead_ratio={bare_tok_s / ours_tok_s:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
