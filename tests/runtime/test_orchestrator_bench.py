"""The benchmark's floor passes exactly the messages the real core passes for the same instant requests;
the benchmark stops with the reason when vLLM-Omni cannot be driven.

``bench/_floor.py`` is what ``bench/orchestrator.py`` compares the core with; the comparison is
fair only if the floor makes the same events, observations and commands per request.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from omni_fsm import StageKind
from omni_runtime import Orchestrator, Prompt, simple_pipeline
from omni_runtime import commands as cmd
from omni_runtime import protocol as rp

FLOOR = Path(__file__).resolve().parents[2] / "bench" / "_floor.py"
REQUESTS = 20


def load_floor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_floor", FLOOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def core_messages() -> Counter[str]:
    """Count the core's events, observations and commands over ``REQUESTS`` instant 3-stage requests."""
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR, StageKind.DIFFUSION])
    seen: Counter[str] = Counter()

    def hook(event, observations):  # type: ignore[no-untyped-def]
        seen[type(event).__name__] += 1
        seen.update(type(o).__name__ for o in observations)

    orch = Orchestrator(pipeline, on_step=hook)
    for _ in range(REQUESTS):
        rid, todo = orch.submit(Prompt())
        while todo:
            c = todo.pop()
            seen[type(c).__name__] += 1
            if isinstance(c, cmd.Deliver):
                assert isinstance(c.message, cmd.ClientMessage)
            if isinstance(c, cmd.Dispatch):
                assert c.stage_input is not None
                payload = None if c.stage == 2 else (7,)
                reports = (rp.StatusChanged(rid, 0, rp.Status.SCHEDULED), rp.Output(rid, 1, 1, payload),
                           rp.Finished(rid, 2))  # fmt: skip
                for r in reports:
                    todo += orch.report(c.stage, c.replica, r)
    return seen


def floor_messages(floor: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    made: Counter[str] = Counter()
    init = floor._Msg.__init__

    def counting(self, *args):  # type: ignore[no-untyped-def]
        made[type(self).__name__] += 1
        init(self, *args)

    monkeypatch.setattr(floor._Msg, "__init__", counting)
    seconds, hops = floor.floor_run(REQUESTS)
    assert hops == 3 * REQUESTS and seconds > 0
    return made


def test_the_floor_passes_the_messages_the_core_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    core, floor = core_messages(), floor_messages(load_floor(), monkeypatch)
    renamed = {"StageOutput": "Output", "StageFinished": "Finished"}  # the core's event names, the floor's
    core = Counter({renamed.get(name, name): count for name, count in core.items()})
    assert sum(floor.values()) > 0
    for name, count in floor.items():
        if name in ("StageInput", "ClientMessage"):  # carried by the commands (the core's are attrs values)
            continue
        assert core[name] == count, (name, core[name], count)
    assert sum(core.values()) == sum(v for k, v in floor.items() if k not in ("StageInput", "ClientMessage"))
    # the core's commands carry one stage input per dispatch, one client message per delivery: so do the floor's
    carried = (floor["StageInput"], floor["ClientMessage"])
    assert carried == (core["Dispatch"], core["Deliver"]) == (3 * REQUESTS, REQUESTS)


def test_the_bench_says_why_when_vllm_omni_cannot_be_driven() -> None:
    """``--vllm-omni`` with a Python that lacks vLLM-Omni stops at once with the reason, printing no figures."""
    bench = FLOOR.with_name("orchestrator.py")
    done = subprocess.run([sys.executable, str(bench), "--vllm-omni", sys.executable], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "vllm_omni_loop.py failed" in done.stderr and "cannot import vLLM-Omni" in done.stderr, done.stderr
    assert "orchestrator:" not in done.stdout
