"""The synchronous API for embedding: submit, iterate outputs, abort, control RPCs, shutdown.

It drives the runtimes in-line (the polling loop without asyncio): every call that waits pumps
the runtimes until its answer arrives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from omni_fsm import SPEC, ControlMethod, Spec
from omni_runtime import protocol as rp
from omni_runtime.adapters import Prompt
from omni_runtime.commands import ClientMessage
from omni_runtime.errors import OmniRuntimeError, RpcError
from omni_runtime.host import Host, Listener
from omni_runtime.orchestrator import StepHook
from omni_runtime.pipeline import Pipeline, require_pipeline


class Engine:
    """A synchronous engine around ``Host``; ``runtimes=None`` uses the simulator."""

    def __init__(self, pipeline: Pipeline, runtimes: Sequence[Sequence[rp.StageRuntime]] | None = None, *,
                 seed: int = 0, spec: Spec = SPEC, on_step: StepHook | None = None,
                 max_idle_rounds: int = 1000) -> None:  # fmt: skip
        pipeline = require_pipeline(pipeline, "Engine")
        if runtimes is None:
            from omni_runtime.sim import sim_runtimes

            runtimes = sim_runtimes(pipeline, seed)
        self.host = Host(pipeline, runtimes, spec=spec, on_step=on_step)
        self.max_idle_rounds = max_idle_rounds
        self._listener_errors_seen = 0

    @property
    def orchestrator(self):  # type: ignore[no-untyped-def]
        """Return the sans-IO orchestrator."""
        return self.host.orchestrator

    def submit(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0,
               listener: Listener | None = None) -> int:  # fmt: skip
        """Submit a request; return its id. ``listener`` gets each message as it comes (else ``outputs``)."""
        return self.host.submit(prompt or Prompt(), n, companions, listener)

    def outputs(self, rid: int) -> Iterator[ClientMessage]:
        """Yield the request's messages in order, the terminal last (pumping the runtimes as needed)."""
        box = self.host.mailboxes.get(rid)
        if box is None:
            raise OmniRuntimeError(f"request {rid} has no mailbox (unknown, or consumed)")
        try:
            while True:
                self._pump_until(lambda: bool(box))
                message = box.popleft()
                yield message
                if message.finished:
                    return
        finally:
            if not (box and box[-1].finished):
                self.host.cancel(rid)  # the consumer stopped early: abort its request
            self.host.mailboxes.pop(rid, None)

    def generate(self, prompt: Prompt | None = None, n: int = 1, companions: int = 0) -> list[ClientMessage]:
        """Submit and return every message of the request, the terminal last."""
        return list(self.outputs(self.submit(prompt, n, companions)))

    def abort(self, rid: int) -> bool:
        """Abort ``rid``; return whether the abort took effect (``False``: the physical abort failed)."""
        call = self.host.abort(rid)
        self._pump_until(lambda: call in self.host.abort_answers)
        return self.host.abort_answers.pop(call).ok

    def control(self, method: ControlMethod, level: int = 1, tags: frozenset[str] = frozenset()) -> None:
        """Run a control RPC on every live replica; raise ``RpcError`` with the worker's error."""
        call = self.host.control(method, level, tags)
        self._pump_until(lambda: call in self.host.rpc_answers)
        answer = self.host.rpc_answers.pop(call)
        if not answer.ok:
            raise RpcError(method.value, answer.error or "unknown error")

    def abort_nowait(self, rid: int) -> int:
        """Ask to abort ``rid`` without pumping (safe from a listener); return the call id (answer not kept)."""
        return self.host.abort_nowait(rid)

    def run_until_idle(self) -> None:
        """Pump until no runtime has work and no report is buffered."""
        idle = 0
        while idle < 2:
            idle = 0 if self._pump() else idle + 1

    def shutdown(self) -> None:
        """Every open request gets its terminal; the orchestrator stops, then the runtimes."""
        self.host.shutdown()

    def _pump_until(self, done: object) -> None:
        idle = 0
        while not done():  # type: ignore[operator]
            if self._pump():
                idle = 0
                continue
            idle += 1
            if idle > self.max_idle_rounds or self.host.runtimes_stopped:
                raise OmniRuntimeError("no progress: the runtimes are idle and the answer never came")

    def _pump(self) -> bool:
        """One polling round; a listener that raised in it is raised here (its request was aborted)."""
        moved = self.host.pump()
        errors = self.host.listener_errors
        if len(errors) > self._listener_errors_seen:
            rid, exc = errors[self._listener_errors_seen]
            self._listener_errors_seen += 1
            raise OmniRuntimeError(f"the listener of request {rid} raised {exc!r}; the request is aborted") from exc
        return moved

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
