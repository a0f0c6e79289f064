"""The benchmark's floor passes exactly the messages the real core passes for the same instant requests;
the benchmark stops with the reason when vLLM-Omni cannot be driven; its memory figures hold
requests in flight and tell the consumer's share apart.

``bench/_floor.py`` is what ``bench/orchestrator.py`` compares the core with; the comparison is
fair only if the floor makes the same events, observations and commands per request.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections import Counter, deque
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from omni_fsm import Outcome
from omni_runtime import AsyncEngine, Orchestrator, Prompt
from omni_runtime.core import commands as cmd
from omni_runtime.runtimes.sim import instant_runtimes

BENCH = Path(__file__).resolve().parents[2] / "bench" / "orchestrator.py"
REQUESTS = 20


def load_bench() -> ModuleType:
    """Load ``bench/orchestrator.py`` (it puts ``bench/`` on the path, so its ``_floor`` is importable after)."""
    spec = importlib.util.spec_from_file_location("orchestrator_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def core_messages(bench: ModuleType) -> Counter[str]:
    """Count the core's events, observations and commands in the bench's own core run of ``REQUESTS`` requests."""
    seen: Counter[str] = Counter()

    def hook(event, observations):  # type: ignore[no-untyped-def]
        seen[type(event).__name__] += 1
        seen.update(type(o).__name__ for o in observations)

    orch = Orchestrator(bench.PIPELINE, on_step=hook)
    submit, report = orch.submit, orch.report

    def counted(commands: list[cmd.Command]) -> list[cmd.Command]:
        for c in commands:
            seen[type(c).__name__] += 1
            if isinstance(c, cmd.Deliver):
                assert isinstance(c.message, cmd.ClientMessage)
            if isinstance(c, cmd.Dispatch):
                assert c.stage_input is not None
        return commands

    def counted_submit(prompt: Any) -> tuple[int, list[cmd.Command]]:
        rid, out = submit(prompt)
        return rid, counted(out)

    orch.submit = counted_submit  # type: ignore[method-assign]  # the bench binds both when its run starts
    orch.report = lambda stage, replica, r: counted(report(stage, replica, r))  # type: ignore[method-assign]
    _, hops, lost, duplicated = bench.core_run(REQUESTS, 0.0, orch)
    assert (hops, lost, duplicated) == (3 * REQUESTS, 0, 0)
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
    bench = load_bench()
    core, floor = core_messages(bench), floor_messages(sys.modules["_floor"], monkeypatch)
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
    done = subprocess.run([sys.executable, str(BENCH), "--vllm-omni", sys.executable], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "vllm_omni_loop.py failed" in done.stderr and "cannot import vLLM-Omni" in done.stderr, done.stderr
    assert "orchestrator:" not in done.stdout


def test_held_requests_stay_in_flight_until_aborted_or_shut_down() -> None:
    """``InstantReplica(hold=True)``, the memory figure's runtime: scheduled, one output, then no finish."""
    bench = load_bench()
    messages: list[cmd.ClientMessage] = []

    async def main() -> tuple[list[int], bool]:
        engine = AsyncEngine(bench.PIPELINE, instant_runtimes(bench.PIPELINE, hold=True))
        await engine.start()
        rids = [engine.submit(Prompt(), listener=messages.append) for _ in range(3)]
        routes = engine.host.orchestrator.routes
        while any(route.result is None for route in routes.values()):
            await asyncio.sleep(0)
        for _ in range(10):
            await asyncio.sleep(0)
        stages = [routes[rid].stage for rid in rids]
        aborted = await engine.abort(rids[0])
        await engine.shutdown()
        return stages, aborted

    stages, aborted = asyncio.run(main())
    assert stages == [0, 0, 0] and aborted
    assert [(m.finished, m.outcome) for m in messages] == [(True, Outcome.ABORTED)] * 3


def test_the_driver_memory_figure_tells_the_consumers_mailboxes_apart() -> None:
    bench = load_bench()
    held, mailboxes, runtimes = bench.driver_bytes_per_inflight(300)
    assert held > 0 and runtimes > 0
    assert mailboxes == pytest.approx(sys.getsizeof(deque()), rel=0.1)  # a mailbox per request: a deque
