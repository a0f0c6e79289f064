"""A simulated diffusion stage replica: denoising steps, then the whole sample."""

from __future__ import annotations

import zlib

from omni_fsm import StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim._base import SimReplica, SimRequest


class SimDiffusion(SimReplica):
    """Runs ``steps`` denoising steps per request; the finish carries the sample. An abort keeps nothing."""

    def work(self) -> None:
        for req in self.schedule(self.spec.max_running - self.running()):
            self.report(req, rp.StatusChanged, rp.Status.SCHEDULED)
            self.move(req, "running")
        for req in self.holders():
            if req.phase == "running":
                self._denoise(req)

    def _denoise(self, req: SimRequest) -> None:
        if req.fail:
            self.report(req, rp.Failed, "injected stage failure")
            self.end(req)
            return
        if not req.no_output:
            self.report(req, rp.Output, 1)
            req.generated += 1
        if req.no_output or req.generated >= self.spec.steps:
            mm = req.stage_input.multimodal or {}
            image = None
            if not req.no_output:
                digest = zlib.crc32(repr(sorted(mm.items())).encode())
                image = {"image": f"{digest:08x}", "size": mm.get("size"), "cfg": len(mm.get("negative", ()))}
            self.report(req, rp.Finished, StopKind.STOP, image)
            self.end(req)
