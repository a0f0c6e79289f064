"""Runs one real vLLM engine in this process and prints what it generated as JSON (one engine per process:
vLLM's shutdown tears down process-wide state). ``python -m tests.runtimes.vllm.engine_probe MODE MODEL_DIR``.

- ``llm``: ``vllm.LLM.generate`` (greedy, 8 tokens) on ``PROMPTS``: ``{"tokens": [[...]], "reasons": [...]}``.
- ``runtime``: the same prompts through the orchestrator on ``VllmSchedulerRuntime(engine=CoreEngine(...))``.
- ``abort``: one request aborted after its third token: ``{"streamed": [...], "prefix": [...], "reason": ...}``.
- ``control``: sleep refused, pause and resume: ``{"sleep": error, "messages_while_paused": n, "after_resume": ...}``.
"""

from __future__ import annotations

import json
import sys

import tests.runtimes.conftest  # noqa: F401  (the engine environment)

#: prompts as token ids of the tiny model (1 is BOS)
PROMPTS = [[1, 10, 11, 12], [1, 500, 7, 8, 9, 40], [1, 974, 975]]
MAX_TOKENS = 8


def llm(model: str) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    engine = LLM(model=model, dtype="float32", max_model_len=128, enforce_eager=True, max_num_seqs=4, seed=0,
                 block_size=32, skip_tokenizer_init=True)  # fmt: skip
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, detokenize=False)
    outs = engine.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], params)
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs],
            "reasons": [o.outputs[0].finish_reason for o in outs]}


def _runtime(model: str):  # type: ignore[no-untyped-def]
    from omni_fsm import StageKind
    from omni_runtime import Engine, simple_pipeline
    from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime
    from omni_runtime.runtimes.vllm._engine import CoreEngine

    pipeline = simple_pipeline([StageKind.AR], [True], max_running=4)
    options = SchedulerOptions(max_num_seqs=4, block_size=32, max_model_len=128, max_num_batched_tokens=128,
                               num_blocks=64)  # fmt: skip
    runtime = VllmSchedulerRuntime(pipeline.stages[0], options, engine=CoreEngine(model, options),
                                   plans=lambda spec, rid, inp: RequestPlan(max_tokens=MAX_TOKENS))  # fmt: skip
    return Engine(pipeline, [[runtime]])


def runtime(model: str) -> dict:
    from omni_runtime import Prompt

    engine = _runtime(model)
    rids = [engine.submit(Prompt(tuple(p), max_tokens=MAX_TOKENS)) for p in PROMPTS]
    ends = [list(engine.outputs(rid))[-1] for rid in rids]
    engine.shutdown()
    return {"tokens": [list(m.data) for m in ends], "reasons": [m.reason for m in ends]}


def abort(model: str) -> dict:
    from omni_runtime import Prompt

    engine = _runtime(model)
    rid = engine.submit(Prompt(tuple(PROMPTS[0]), max_tokens=64))
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
    engine.shutdown()
    return {"sleep": slept, "messages_while_paused": held, "after_resume": [end.reason, len(end.data)]}


if __name__ == "__main__":
    mode, model = sys.argv[1], sys.argv[2]
    print("RESULT " + json.dumps({"llm": llm, "runtime": runtime, "abort": abort, "control": control}[mode](model)))
