"""Runs one real vLLM engine in this process and prints what it generated as JSON (one engine per process:
vLLM's shutdown tears down process-wide state). ``python -m tests.runtimes.vllm.engine_probe MODE MODEL_DIR``.

- ``llm``: ``vllm.LLM.generate`` on ``PROMPTS`` (token ids; greedy, then seeded sampling), on ``TEXTS`` (text in,
  text out), on one text with a stop string (the fourth word of its greedy text) and one seeded ``n=3`` request.
- ``runtime``: the same requests through the orchestrator on ``VllmSchedulerRuntime(engine=CoreEngine(...))``.
- ``abort``: one request aborted after its third token: ``{"streamed": [...], "prefix": [...], "reason": ...}``.
- ``control``: sleep refused, pause and resume; a pause in abort mode ends the request in flight (``abort``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import tests.runtimes.real_engines  # noqa: F401  (the engine environment)

#: prompts as token ids of the tiny model (1 is BOS)
PROMPTS = [[1, 10, 11, 12], [1, 500, 7, 8, 9, 40], [1, 974, 975]]
#: prompts as text (the tiny tokenizer's words)
TEXTS = ["w5 w6 w7", "a b c d", "w900 q"]
MAX_TOKENS = 8
#: seeded sampling: temperature, top-p, the seed of prompt i is SEED + i
TEMPERATURE, TOP_P, SEED = 1.0, 0.9, 1234


def llm(model: str) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    engine = LLM(model=model, dtype="float32", max_model_len=128, enforce_eager=True, max_num_seqs=4, seed=0,
                 block_size=32)  # fmt: skip

    def run(prompts: list[Any], params: list[SamplingParams]) -> list[Any]:
        return [o.outputs for o in engine.generate(prompts, params, use_tqdm=False)]

    ids = [TokensPrompt(prompt_token_ids=p) for p in PROMPTS]
    greedy = run(ids, [SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)] * len(PROMPTS))
    seeded = run(ids, [SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE, top_p=TOP_P, seed=SEED + i)
                       for i in range(len(PROMPTS))])  # fmt: skip
    texts = run(TEXTS, [SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)] * len(TEXTS))
    stop = texts[0][0].text.split()[3]
    stopped = run(TEXTS[:1], [SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, stop=[stop])])
    samples = run(ids[:1], [SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE, seed=SEED, n=3)])
    return {"greedy": [[list(o[0].token_ids), o[0].finish_reason] for o in greedy],
            "seeded": [list(o[0].token_ids) for o in seeded],
            "texts": [[o[0].text, list(o[0].token_ids), o[0].finish_reason] for o in texts],
            "stopped": [stop, stopped[0][0].text, stopped[0][0].finish_reason, stopped[0][0].stop_reason],
            "samples": sorted(list(c.token_ids) for c in samples[0])}  # fmt: skip


def _runtime(model: str):  # type: ignore[no-untyped-def]
    from omni_fsm import StageKind
    from omni_runtime import Engine, simple_pipeline
    from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime
    from omni_runtime.runtimes.vllm._engine import CoreEngine

    pipeline = simple_pipeline([StageKind.AR], [True], max_running=4)
    options = SchedulerOptions(max_num_seqs=4, block_size=32, max_model_len=128, max_num_batched_tokens=128,
                               num_blocks=64)  # fmt: skip
    runtime = VllmSchedulerRuntime(pipeline.stages[0], options, engine=CoreEngine(model, options),
                                   plans=lambda spec, rid, inp: RequestPlan(max_tokens=inp.max_tokens or MAX_TOKENS))
    return Engine(pipeline, [[runtime]])


def _ends(engine: Any, prompts: list[Any], n: int = 1) -> list[Any]:
    """Submit every prompt at once (one batch, as ``LLM.generate`` does); return each one's messages."""
    rids = [engine.submit(p, n=n) for p in prompts]
    return [list(engine.outputs(rid)) for rid in rids]


def runtime(model: str) -> dict:
    from omni_runtime import Prompt, Sampling

    engine = _runtime(model)
    greedy_s = Sampling(temperature=0.0)
    greedy = _ends(engine, [Prompt(tuple(p), MAX_TOKENS, sampling=greedy_s) for p in PROMPTS])
    seeded = _ends(engine, [Prompt(tuple(p), MAX_TOKENS, sampling=Sampling(temperature=TEMPERATURE, top_p=TOP_P,
                                                                          seed=SEED + i))
                            for i, p in enumerate(PROMPTS)])  # fmt: skip
    texts = _ends(engine, [Prompt(None, MAX_TOKENS, text=t, sampling=greedy_s) for t in TEXTS])
    stop = texts[0][-1].text.split()[3]
    stopped = _ends(engine, [Prompt(None, MAX_TOKENS, text=TEXTS[0], sampling=Sampling(temperature=0.0,
                                                                                     stop=(stop,)))])[0]  # fmt: skip
    samples = _ends(engine, [Prompt(tuple(PROMPTS[0]), MAX_TOKENS, sampling=Sampling(temperature=TEMPERATURE,
                                                                                     seed=SEED))], n=3)[0]  # fmt: skip
    engine.shutdown()
    streamed = "".join(m.text or "" for m in texts[0][:-1])  # the partial messages' new text, in order
    return {"greedy": [[list(ms[-1].data), ms[-1].reason] for ms in greedy],
            "seeded": [list(ms[-1].data) for ms in seeded],
            "texts": [[ms[-1].text, list(ms[-1].data), ms[-1].reason] for ms in texts],
            "stopped": [stop, stopped[-1].text, stopped[-1].reason, stopped[-1].stop_reason],
            "samples": sorted(list(m.data) for m in samples if m.stage_final and m.sample >= 0),
            "streamed_text": streamed}  # fmt: skip


def abort(model: str) -> dict:
    from omni_runtime import Prompt, Sampling

    engine = _runtime(model)
    rid = engine.submit(Prompt(tuple(PROMPTS[0]), max_tokens=64, sampling=Sampling(temperature=0.0)))
    streamed: list[int] = []
    for message in engine.outputs(rid):
        if message.finished:
            terminal = message
            break
        streamed += list(message.data or ())
        if len(streamed) >= 3:
            engine.abort(rid)
    engine.shutdown()
    return {"streamed": streamed, "prefix": list(terminal.data), "reason": terminal.reason}


def control(model: str) -> dict:
    """Sleep is refused before it reaches the engine; pause holds the request (no token) until resume."""
    from omni_fsm import ControlMethod
    from omni_runtime import Prompt
    from omni_runtime.errors import RpcError

    engine = _runtime(model)
    try:
        engine.control(ControlMethod.SLEEP)
        slept = "no error"
    except RpcError as exc:
        slept = str(exc)
    engine.control(ControlMethod.PAUSE_SCHEDULER)
    rid = engine.submit(Prompt(tuple(PROMPTS[0]), max_tokens=4))
    for _ in range(5):
        engine.host.pump()
    held = len(engine.host.mailboxes[rid])
    engine.control(ControlMethod.RESUME_SCHEDULER)
    end = list(engine.outputs(rid))[-1]
    running = engine.submit(Prompt(tuple(PROMPTS[1]), max_tokens=64))
    streamed = 0
    for message in engine.outputs(running):  # a pause in abort mode while it runs: it ends, aborted, with its prefix
        if message.finished:
            aborted = message
            break
        streamed += len(message.data or ())
        if streamed >= 2 and not engine.host.rpc_answers:
            engine.control(ControlMethod.PAUSE_SCHEDULER, tags=frozenset({"abort"}))
    engine.control(ControlMethod.RESUME_SCHEDULER)
    engine.shutdown()
    return {"sleep": slept, "messages_while_paused": held, "after_resume": [end.reason, len(end.data)],
            "pause_abort": [aborted.outcome.value, aborted.reason, streamed, len(aborted.data or ())]}  # fmt: skip


if __name__ == "__main__":
    mode, model = sys.argv[1], sys.argv[2]
    print("RESULT " + json.dumps({"llm": llm, "runtime": runtime, "abort": abort, "control": control}[mode](model)))
