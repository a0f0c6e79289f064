"""Benchmark the orchestrator on a real vLLM engine: one AR stage, the tiny local Llama, in-process.

16 concurrent requests x 128 greedy tokens, run to completion, two ways on ONE in-process
``EngineCore`` (vLLM allows one per process), alternated run by run:

- bare: ``EngineCore.add_request`` then ``EngineCore.step()`` until every request finished;
- orchestrated: the same prompts submitted to ``omni_runtime.Engine`` whose one replica is the vLLM
  runtime over that core (``VllmSchedulerRuntime(engine=CoreEngine.around(core))``), pumped until
  every request's terminal arrived.

Each figure is the median over the runs (at least 11 of each); tokens are counted from what each
side returned (both must return the same tokens; both ignore EOS, so each request makes 128).
The orchestrated requests ask for token ids only (``detokenize=False``), as the bare side gets.
``orchestrator_us_per_token`` is the orchestrated run's time minus the bare run's, per generated
token, median over the pairs; ``overhead_ratio`` is the orchestrated run's time over the bare run's,
median over the pairs (each pair runs back to back, so a shared machine's drifting load cancels out).

Then the two-stage pipeline (thinker -> talker, the thinker's text tokenized by the talker), each
stage an ``EngineCore`` in a process of its own (``ProcessRuntime``): 16 concurrent text requests, 16
tokens per stage. Time to first token: from submit to the client's first message with text (the
talker's first output). Per-hop latency: from the thinker's finish (as the orchestrator took it) to
the talker's first output of the same request. p50 and p99 over the requests.

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
from omni_fsm import events as ev  # noqa: E402
from omni_runtime import Engine, Prompt, Sampling, simple_pipeline  # noqa: E402
from omni_runtime.hosting.process import ProcessRuntime  # noqa: E402
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
        params = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True, detokenize=False)
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
    sampling = Sampling(temperature=0.0, ignore_eos=True, detokenize=False)
    rids = [engine.submit(Prompt(tuple(p), max_tokens=TOKENS, sampling=sampling)) for p in prompts()]
    engine.run_until_idle()
    ends = [list(engine.outputs(rid))[-1] for rid in rids]
    spent = time.perf_counter() - start
    engine.shutdown()
    return spent, [list(m.data) for m in ends]


HOP_TOKENS = 16


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def run_two_stage(model: str) -> tuple[list[float], list[float], int]:
    """Return each request's time to first token and per-hop latency (ms) through thinker -> talker on stage
    processes, and the tokens the client got."""
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR], [False, True], max_running=CONCURRENT,
                               max_tokens=HOP_TOKENS)  # fmt: skip
    runtimes = [[ProcessRuntime("omni_runtime.runtimes.vllm:engine_factory", spec, i, 0, model)]
                for i, spec in enumerate(pipeline.stages)]  # fmt: skip
    finished_at: dict[int, float] = {}
    hop: dict[int, float] = {}

    def on_step(event: Any, outputs: Any) -> None:
        if isinstance(event, ev.StageFinished) and event.stage == 0:
            finished_at[event.rid] = time.perf_counter()
        elif isinstance(event, ev.StageOutput) and event.stage == 1 and event.rid not in hop:
            hop[event.rid] = (time.perf_counter() - finished_at[event.rid]) * 1e3

    engine = Engine(pipeline, runtimes, on_step=on_step)
    engine.generate(Prompt(text="w1 w2", max_tokens=2))  # both stage processes up and warm
    hop.clear()
    sampling = Sampling(temperature=0.0, ignore_eos=True)
    submitted = {}
    for i in range(CONCURRENT):
        rid = engine.submit(Prompt(text=" ".join(f"w{10 + (i * 7 + k) % 900}" for k in range(5)),
                                   max_tokens=HOP_TOKENS, sampling=sampling))  # fmt: skip
        submitted[rid] = time.perf_counter()
    first: dict[int, float] = {}
    tokens = 0
    while len(first) < CONCURRENT or engine.orchestrator.open_requests():
        engine.host.pump()
        for rid in submitted:
            box = engine.host.mailboxes.get(rid)
            while box:
                message = box.popleft()
                if message.text and rid not in first:
                    first[rid] = (time.perf_counter() - submitted[rid]) * 1e3
                if message.finished:
                    tokens += len(message.data or ())
    engine.shutdown()
    return list(first.values()), [hop[rid] for rid in submitted], tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each side, at least 11 (default 21)")
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
    bare, orchestrated, extra, ratios = [], [], [], []
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
        ratios.append(o / b)
        print(f"run {k}: requests={len(our_tokens)} tokens={generated} bare_s={b:.3f} orchestrated_s={o:.3f}",
              flush=True)  # fmt: skip
    core.shutdown()
    ttft, hops, client_tokens = run_two_stage(model)
    print(f"two-stage: requests={len(ttft)} client_tokens={client_tokens} ttft_p50_ms={percentile(ttft, 0.5):.1f} "
          f"ttft_p99_ms={percentile(ttft, 0.99):.1f} hop_p50_ms={percentile(hops, 0.5):.1f} "
          f"hop_p99_ms={percentile(hops, 0.99):.1f}", flush=True)  # fmt: skip
    bare_tok_s, ours_tok_s = statistics.median(bare), statistics.median(orchestrated)
    print(f"vllm_e2e: bare_tok_s={bare_tok_s:.0f} orchestrated_tok_s={ours_tok_s:.0f} "
          f"orchestrator_us_per_token={statistics.median(extra):.1f} ttft_p50_ms={percentile(ttft, 0.5):.1f} "
          f"overhead_ratio={statistics.median(ratios):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
