"""Driving one diffusers replica by hand: its reports recorded and judged as the engine takes them (the conformance
kit's ``RawStreamChecker``), each request described by what the stock pipeline call would be given."""

from __future__ import annotations

from typing import Any

import attrs

from omni_fsm import ControlMethod, StageKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import Sampling, StageInput
from omni_runtime.runtimes.diffusers import (
    WORDS,
    Denoiser,
    DiffusersOptions,
    DiffusersRuntime,
    RequestDefaults,
    diffusers_factory,
)
from omni_runtime.testing._checker import RawStreamChecker


@attrs.frozen
class Ask:
    """One image request: what the stock call gets (``size``: height and width)."""

    prompt: str
    negative: str | None = None
    guidance: float = 7.5
    steps: int = 3
    seed: int = 0
    size: int = 16

    def stage_input(self) -> StageInput:
        """Return the request as the diffusion stage's input."""
        mm: dict[str, Any] = {"guidance_scale": self.guidance, "steps": self.steps, "size": (self.size, self.size)}
        if self.negative is not None:
            mm["negative_prompt"] = self.negative
        return StageInput(text=self.prompt, multimodal=mm, sampling=Sampling(seed=self.seed))


def stage(max_running: int = 4, steps: int = 3) -> StageSpec:
    """Return a diffusion stage's description."""
    return StageSpec("image", StageKind.DIFFUSION, final=True, max_running=max_running, steps=steps)


class Driven:
    """One replica made by the runtime's factory (or on ``denoiser``, with the factory's defaults), bound to a
    recorder that also judges its stream."""

    def __init__(self, spec: StageSpec | None = None, rpc_fails: bool = False,
                 options: DiffusersOptions | None = None, denoiser: Denoiser | None = None) -> None:  # fmt: skip
        self.spec = spec or stage()
        self.rpc_fails = rpc_fails
        if denoiser is None:
            self.runtime: DiffusersRuntime = diffusers_factory(options)(self.spec, 0, 0, rpc_fails)
        else:
            defaults = RequestDefaults(7.5, self.spec.steps, *denoiser.native_size, WORDS, 0)
            self.runtime = DiffusersRuntime(self.spec, denoiser, defaults, None, rpc_fails)
        self.checker = RawStreamChecker(spec=self.spec)
        self.reports: list[rp.Report] = []
        self.runtime.bind(self._sink)

    def _sink(self, report: rp.Report) -> None:
        self.reports.append(report)
        self.checker(report)

    def add(self, req_id: int, request: Ask | StageInput) -> None:
        self.checker.added(req_id)
        self.runtime.add_request(req_id, request.stage_input() if isinstance(request, Ask) else request)

    def abort(self, abort_id: int, *req_ids: int) -> None:
        self.checker.aborting(abort_id, list(req_ids))
        self.runtime.abort_requests(abort_id, req_ids)

    def control(self, call_id: int, method: ControlMethod, *tags: str, level: int = 1) -> None:
        self.checker.rpc(call_id, self.rpc_fails, aborts_all="abort" in tags)
        self.runtime.control(call_id, method, level, frozenset(tags))

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            self.runtime.step()

    def run(self, limit: int = 200) -> None:
        """Step until the replica is idle (at most ``limit`` steps)."""
        for _ in range(limit):
            if not self.runtime.step():
                return
        raise AssertionError(f"still busy after {limit} steps")

    def of(self, req_id: int) -> list[rp.Report]:
        """Return the reports about request ``req_id``, in order."""
        return [r for r in self.reports if isinstance(r, rp.RequestReport | rp.AbortResult) and r.req_id == req_id]

    def images(self) -> dict[int, Any]:
        """Return each finished request's image."""
        return {r.req_id: r.payload["image"] for r in self.reports if isinstance(r, rp.Finished)}

    def stock_difference(self, rid: int, stock_image: Any) -> float:
        """Return the max-abs difference between ``rid``'s finished image and the stock pipeline's for what the stage
        read (prompt, negative prompt, guidance, steps, seed: the ``Finished`` payload); ``StopIteration``: no
        image."""
        made = next(r.payload for r in self.reports if isinstance(r, rp.Finished) and r.req_id == rid)
        reference = stock_image(made["prompt"], made["negative_prompt"], made["guidance_scale"], made["steps"],
                                made["seed"])  # fmt: skip
        return float(abs(made["image"] - reference).max())

    def judged_clean(self) -> list[str]:
        """Return the stream's violations once idle (every request ended, every RPC and abort answered): none
        expected."""
        return [str(v) for v in self.checker.at_end()]


#: the stock pipeline's images are matched within this (max-abs on images in [0, 1])
TOLERANCE = 1e-4
#: four requests that differ in prompt, negative prompt, guidance, steps, seed and size
MIXED = [Ask("red cat", "dark", 5.0, 3, 11), Ask("blue sea under the moon", None, 7.5, 4, 12),
         Ask("sun", None, 1.0, 2, 13), Ask("old house", "bright sky", 3.0, 3, 14, size=24)]  # fmt: skip
