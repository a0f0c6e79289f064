"""The driver of streaming-input sessions through the synchronous ``Engine``, shared by the simulator's and vLLM's
streaming tests (``tests/runtime/test_streaming_input.py``, ``tests/runtimes/vllm/test_streaming_input_vllm.py``):
every step judged by ``omni_fsm.invariants.Monitor`` (and written to a trace, if asked), each request's messages
collected as they come, every wait bounded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import Monitor
from omni_fsm.trace import TraceWriter
from omni_runtime import Engine, Pipeline, Prompt


class StreamingSession:
    """A sync engine over ``runtimes`` (``runtimes[stage][replica]``), judged by a monitor; ``pumps`` bounds every
    wait (a session that hangs fails its test instead)."""

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[Any]], pumps: int,
                 trace: Path | None = None) -> None:  # fmt: skip
        self.pipeline, self.pumps = pipeline, pumps
        self.monitor = Monitor(pipeline.kinds, pipeline.final, pipeline.slots)
        self.history: list[tuple[ev.Event | None, list[ob.Observation]]] = []
        self.writer = None
        if trace is not None:
            self.writer = TraceWriter(trace)
            self.writer.header(pipeline.kinds, pipeline.final, pipeline.slots)
        self.engine = Engine(pipeline, runtimes, on_step=self._step, max_silent_rounds=pumps)
        self.seen: dict[int, list[Any]] = {}

    def _step(self, event: ev.Event | None, outputs: list[ob.Observation]) -> None:
        self.history.append((event, list(outputs)))
        self.monitor.step(event, outputs)
        if self.writer is not None:
            self.writer.step(event, outputs)

    def submit(self, prompt: Prompt, n: int = 1) -> int:
        """Submit ``prompt``; its messages are collected into ``seen[rid]``."""
        rid = self.engine.submit(prompt, n)
        self.seen[rid] = []
        return rid

    def collect(self) -> None:
        """Move every message waiting in a mailbox into ``seen``."""
        for rid, messages in self.seen.items():
            box = self.engine.host.mailboxes.get(rid)
            while box:
                messages.append(box.popleft())

    def pump_until(self, done: Callable[[], bool], what: str, rid: int = 0) -> None:
        """Pump until ``done()``; ``AssertionError`` naming ``what`` (and ``rid``'s events) after ``pumps`` pumps."""
        for _ in range(self.pumps):
            self.collect()
            if done():
                return
            self.engine.host.pump()
        self.collect()
        if not done():
            raise AssertionError(f"no {what} after {self.pumps} pumps: {self.events(rid)}")

    def events(self, rid: int = 0) -> list[tuple[str, int]]:
        """Return the lifecycle events of ``rid`` (its submit, its runtimes' reports) in order, as (name, stage),
        a run of outputs as one."""
        out: list[tuple[str, int]] = []
        for event, _ in self.history:
            if not isinstance(event, ev.RequestEvent) or event.rid != rid:
                continue
            item = (type(event).__name__, getattr(event, "stage", -1))
            if not (item[0] == "StageOutput" and out and out[-1] == item):
                out.append(item)
        return out

    def parks(self, rid: int = 0) -> int:
        """Return how many times ``rid`` waited for its next input part."""
        return sum(1 for name, _ in self.events(rid) if name == "AwaitStreamingReq")

    def parked(self, count: int, rid: int = 0) -> None:
        """Pump until the session parked ``count`` times in all (it waits for input)."""
        self.pump_until(lambda: self.parks(rid) >= count, f"park #{count} of request {rid}", rid)
        assert self.parks(rid) == count

    def until_ended(self, rid: int = 0) -> list[Any]:
        """Pump until ``rid``'s terminal came; return its messages."""
        self.pump_until(lambda: any(m.finished for m in self.seen[rid]), f"terminal of request {rid}", rid)
        return self.seen[rid]

    def verdict(self) -> list[tuple[str, str, int | None]]:
        """Return every violation the monitor found, the end-of-history rules (``finish``) included."""
        self.monitor.finish()
        return [(v.invariant, v.check, v.rid) for v in self.monitor.violations]


def turn(stage: int = 0, park: bool = True) -> list[tuple[str, int]]:
    """The events of one turn (scheduled, outputs) and its wait for input."""
    return [("Scheduled", stage), ("StageOutput", stage), *([("AwaitStreamingReq", stage)] if park else [])]


def resume(stage: int = 0) -> list[tuple[str, int]]:
    """The events of a turn after the session took its next input part."""
    return [("InputReady", stage), *turn(stage)]


def omni_fsm_check(trace: Path) -> str:
    """Run ``omni-fsm check`` on ``trace``; return its one-line report (it must exit 0)."""
    check = subprocess.run([sys.executable, "-m", "omni_fsm.cli", "check", str(trace)], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    return check.stdout.strip()
