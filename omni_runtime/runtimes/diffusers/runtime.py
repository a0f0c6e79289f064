"""One replica of a diffusion stage on a real diffusers pipeline: the ``StageRuntime`` (lifecycle and reports).

A request's life here: ``add_request`` reads its stage input (``_request``; a bad one is reported ``Failed`` at the
next step, alone); it waits for a slot (``max_batch`` samples run at once, default the stage's ``max_running``);
admitted at a step, it is reported ``SCHEDULED`` and joins the batch; each step runs one denoising step of every
running sample (``_denoise``) and reports ``Output(1)`` for each; after its last step its image is decoded and
reported in ``Finished``. An abort removes the request between two steps (calls never interleave with a step):
nothing of it is reported after its ``AbortResult``, and a resubmitted request starts again from its seed. An
error while starting or stepping a sample fails the requests it touched, never the replica.

Control RPCs are answered at the next step, with the worker's exception as the error: ``pause_scheduler`` holds
every sample where it stands (``keep``, the default), ends each request in flight as ``Aborted`` (``abort``), or
stops admitting and is answered once the running samples finished (``wait``); ``resume_scheduler`` lets them go
on. ``sleep`` holds them too and, once every replica sharing the weights sleeps, frees them as vLLM's sleep levels
do: level 1 moves them to the host (on CUDA; on the CPU there is nowhere to move them: the samples are held only),
level 2 discards them (no parameter storage left); ``wake_up`` brings them back (level 2: rebuilt from where the
pipeline was built from, the same weights to the bit). A level other than 1 or 2 is the RPC's error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omni_fsm import ControlMethod, StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.runtimes.diffusers._denoise import Decoding, Denoiser, Sample
from omni_runtime.runtimes.diffusers._request import ImageRequest, RequestDefaults, image_request

STEP, REQUEST = "step", "request"
#: how waiting requests join: at any step boundary while slots are free (``step``, the default), or only when the
#: running batch has finished, every waiting request up to ``max_batch`` at once (``request``: request-level batching,
#: vLLM-Omni's ``RequestScheduler`` with no added wait; the benchmark's baseline)
BATCHING = (STEP, REQUEST)


class _WorkerError(RuntimeError):
    """A control RPC raised in a worker (the conformance kit's ``rpc_fails``)."""


class _Live:
    """A request this replica holds: what it asked, its sample once admitted, its next report's ``seq``."""

    __slots__ = ("decoding", "error", "req_id", "request", "sample", "seq")

    def __init__(self, req_id: int) -> None:
        self.req_id, self.seq = req_id, 0
        self.request: ImageRequest | None = None
        self.error: str | None = None  #: why its input is refused (reported ``Failed`` at the next step)
        self.sample: Sample | None = None
        self.decoding = False  #: every step taken, its image on its way to the host (reported once there)


class DiffusersRuntime:
    """One replica of a diffusion stage (see the module's docstring); ``denoiser``: the pipeline it runs on (a
    replica's own, or shared by replicas that never step at the same time); ``rpc_fails``: its workers raise in
    every control RPC."""

    def __init__(self, spec: StageSpec, denoiser: Denoiser, defaults: RequestDefaults, max_batch: int | None = None,
                 rpc_fails: bool = False, batching: str = STEP) -> None:  # fmt: skip
        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, not {batching!r}")
        self.spec, self.denoiser, self.defaults, self.rpc_fails = spec, denoiser, defaults, rpc_fails
        self.max_batch = max_batch or spec.max_running
        self.batching = batching
        self.live: dict[int, _Live] = {}  #: every request held, in arrival order
        self.held: set[ControlMethod] = set()  #: PAUSE_SCHEDULER and SLEEP in effect
        self.draining: list[int] = []  #: pause(wait) calls answered once nothing runs
        self.closed = False
        self.steps = 0
        self.unet_calls = 0  #: batched UNet calls made (a figure for the benchmark and tests)
        self._sink: rp.ReportSink | None = None
        self._rpcs: list[tuple[int, str | None]] = []  #: (call id, error) to answer at the next step
        self._decoding: list[tuple[Decoding, list[_Live]]] = []  #: images on their way to the host, and whose
        denoiser.join(self)

    # -- the protocol ---------------------------------------------------------------------------

    def bind(self, sink: rp.ReportSink) -> None:
        self._sink = sink

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        if self.closed:
            return
        live = self.live[req_id] = _Live(req_id)
        try:
            live.request = image_request(req_id, stage_input, self.defaults)
        except Exception as exc:  # whatever the input holds, the request fails alone (add_request never raises)
            live.error = f"bad diffusion input: {exc}"

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        if self.closed:
            return
        for req_id in req_ids:
            self.live.pop(req_id, None)  # gone whatever it was doing: no partial image, nothing more reported
            self._emit(rp.AbortResult(abort_id, req_id, True))

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        if self.closed:
            return
        try:
            mode = rp.pause_mode(tags) if method is ControlMethod.PAUSE_SCHEDULER else "keep"
            if self.rpc_fails:
                raise _WorkerError(f"{method.value} raised in a worker")
            if self._apply(method, mode, call_id, level):
                return  # a pause in wait mode: answered once the running samples finished
        except Exception as exc:  # the worker's error is the answer; nothing changed
            self._rpcs.append((call_id, f"{type(exc).__name__}: {exc}"))
            return
        self._rpcs.append((call_id, None))

    def step(self) -> bool:
        if self.closed:
            return False
        self.steps += 1
        for call_id, error in self._rpcs:
            self._emit(rp.RpcResult(call_id, error is None, error))
        self._rpcs.clear()
        for live in [lv for lv in self.live.values() if lv.error is not None]:
            self._end(live, rp.Failed, live.error)
        if not self.held and not self.draining:
            self._admit()
        if not self.held:
            self._deliver()
            self._denoise()
            if self._decoding and not self._running():  # nothing left to overlap with: wait for the images
                self._deliver(wait=True)
        if self.draining and not self._running() and not self._decoding:
            self.held.add(ControlMethod.PAUSE_SCHEDULER)
            for call_id in self.draining:
                self._emit(rp.RpcResult(call_id, True))
            self.draining.clear()
        return self.busy()

    def busy(self) -> bool:
        """Return whether work is left: requests held (paused ones too), RPCs to answer."""
        return not self.closed and bool(self.live or self._rpcs or self.draining or self._decoding)

    def shutdown(self) -> None:
        if not self.closed:
            self.denoiser.leave(self)
        self.closed = True  # nothing is reported from here on
        self.live.clear()
        self._rpcs.clear()
        self._decoding.clear()
        self.draining.clear()

    # -- inside ---------------------------------------------------------------------------------

    def _apply(self, method: ControlMethod, mode: str, call_id: int, level: int) -> bool:
        """Apply a control RPC; return whether its answer waits (a pause in wait mode while samples run)."""
        if method is ControlMethod.PAUSE_SCHEDULER:
            if mode == "abort":
                for live in list(self.live.values()):
                    self._end(live, rp.Aborted)
            elif mode == "wait" and (self._running() or self._decoding):
                self.draining.append(call_id)
                return True
            self.held.add(method)
        elif method is ControlMethod.RESUME_SCHEDULER:
            self.held.discard(ControlMethod.PAUSE_SCHEDULER)
            for waiting in self.draining:  # a resume ends the wait: the pause it answers is over
                self._rpcs.append((waiting, None))
            self.draining.clear()
        elif method is ControlMethod.SLEEP:
            self.denoiser.sleep(self, level)
            self.held.add(method)
        else:
            self.denoiser.wake(self)
            self.held.discard(ControlMethod.SLEEP)
        return False

    def _running(self) -> list[_Live]:
        return [live for live in self.live.values() if live.sample is not None and not live.decoding]

    def _admit(self) -> None:
        running = len(self._running())
        if running and self.batching == REQUEST:  # a request-level batch runs to its end before the next starts
            return
        free = self.max_batch - running
        admitted = [lv for lv in self.live.values() if lv.sample is None][:max(free, 0)]
        if not admitted:
            return
        requests = [live.request for live in admitted if live.request is not None]
        assert len(requests) == len(admitted)
        # the prompts of the requests admitted together are encoded in one text-encoder call
        for live, started in zip(admitted, self.denoiser.start_many(requests), strict=True):
            if isinstance(started, Exception):  # a request the pipeline cannot start fails alone
                self._end(live, rp.Failed, f"{type(started).__name__}: {started}")
                continue
            live.sample = started
            self._report(live, rp.StatusChanged, rp.Status.SCHEDULED)

    def _denoise(self) -> None:
        groups: dict[tuple[int, ...], list[_Live]] = {}  # one UNet call per latent shape (usually one in all)
        for live in self._running():
            assert live.sample is not None
            groups.setdefault(live.sample.shape, []).append(live)
        for owners in groups.values():
            try:
                self.denoiser.step([live.sample for live in owners if live.sample is not None], self)
                self.unet_calls += 1
            except Exception as exc:  # one batched call: each request in it fails, the replica serves on
                for live in owners:
                    self._end(live, rp.Failed, f"denoising failed: {type(exc).__name__}: {exc}")
                continue
            for live in owners:
                self._report(live, rp.Output, 1)
            done = [live for live in owners if live.sample is not None and live.sample.done]
            if done:
                self._finish(done)

    def _finish(self, done: list[_Live]) -> None:
        samples = [live.sample for live in done if live.sample is not None]
        try:
            decoding = self.denoiser.decode_start(samples)
        except Exception as exc:
            for live in done:
                self._end(live, rp.Failed, f"decoding failed: {type(exc).__name__}: {exc}")
            return
        for live in done:
            live.decoding = True  # out of the batch; its slot is free
        self._decoding.append((decoding, done))
        self._deliver()  # on the CPU the images are there already

    def _deliver(self, wait: bool = False) -> None:
        """Report ``Finished`` with its image for each request whose image reached the host (``wait``: all of them,
        waiting for the device; else the others at a later step), unless it ended meanwhile (aborted)."""
        waiting = []
        for decoding, lives in self._decoding:
            if not wait and not decoding.ready():
                waiting.append((decoding, lives))
                continue
            try:
                images = decoding.images()
            except Exception as exc:
                for live in lives:
                    if self.live.get(live.req_id) is live:
                        self._end(live, rp.Failed, f"decoding failed: {type(exc).__name__}: {exc}")
                continue
            for live, image in zip(lives, images, strict=True):
                if self.live.get(live.req_id) is live:
                    self._end(live, rp.Finished, StopKind.STOP, self._payload(live, image))
        self._decoding = waiting

    @staticmethod
    def _payload(live: _Live, image: Any) -> dict[str, Any]:
        request = live.request
        assert request is not None
        return {"image": image, "size": (request.height, request.width), "seed": request.seed, "steps": request.steps,
                "guidance_scale": request.guidance_scale, "prompt": request.prompt,
                "negative_prompt": request.negative_prompt}  # fmt: skip

    def _report(self, live: _Live, make: Any, *args: Any) -> None:
        self._emit(make(live.req_id, live.seq, *args))
        live.seq += 1

    def _end(self, live: _Live, make: Any, *args: Any) -> None:
        self._report(live, make, *args)
        del self.live[live.req_id]

    def _emit(self, report: rp.Report) -> None:
        assert self._sink is not None, "bind() first"
        self._sink(report)
