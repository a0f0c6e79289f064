"""The denoising loop, one step at a time, over a ``StableDiffusionPipeline``'s components.

The stock pipeline runs one call's samples from the first step to the last together. Here every sample carries
its own state (latents, its own scheduler: a ``copy.deepcopy`` of a template that ran ``set_timesteps``, its
generator, its prompt embeddings), so samples join and leave between steps, and one ``step`` makes one batched
UNet call for every sample given, each row at its own timestep (a ``(B,)`` timestep tensor). Everything per
sample is done as the stock pipeline does it for a call with that sample alone: the same ``encode_prompt``, the
same initial noise from its generator, the same guidance arithmetic, its scheduler's ``step``, the same VAE decode
and post-processing; only the UNet's rows are shared (they agree with a batch-1 call within float rounding).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from diffusers.utils.torch_utils import randn_tensor

from omni_runtime.runtimes.diffusers._request import ImageRequest


class Sample:
    """One request's image being denoised: its latents after ``index`` of its scheduler's steps."""

    __slots__ = ("cfg", "embeds", "extra", "generator", "index", "latents", "request", "scheduler")

    def __init__(self, request: ImageRequest, scheduler: Any, latents: Any, embeds: Any, cfg: bool,
                 generator: Any, extra: dict[str, Any]) -> None:  # fmt: skip
        self.request, self.scheduler, self.latents, self.embeds = request, scheduler, latents, embeds
        self.cfg, self.generator, self.extra = cfg, generator, extra
        self.index = 0

    @property
    def done(self) -> bool:
        """Return whether every step of its schedule ran."""
        return self.index >= len(self.scheduler.timesteps)

    @property
    def shape(self) -> tuple[int, ...]:
        """Return its latents' shape (samples of one shape share a UNet call)."""
        return tuple(self.latents.shape)

    @property
    def rows(self) -> int:
        """Return its rows in a UNet call: unconditional and conditional under CFG, else the conditional one."""
        return 2 if self.cfg else 1


class Denoiser:
    """A pipeline's components on ``device``, driven step by step (see the module's docstring)."""

    def __init__(self, pipe: Any, device: str) -> None:
        self.pipe, self.device = pipe, torch.device(device)
        if pipe.unet.config.time_cond_proj_dim is not None:
            raise ValueError("a UNet conditioned on the guidance scale (time_cond_proj_dim) is not supported")
        self._templates: dict[int, Any] = {}  #: steps -> the pipeline's scheduler after set_timesteps(steps)
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()  #: the replicas running on these weights
        self._asleep: weakref.WeakSet[Any] = weakref.WeakSet()  #: those of them asleep

    @property
    def native_size(self) -> tuple[int, int]:
        """Return the (height, width) of the pipeline's images by default (the stock pipeline's default too)."""
        side = int(self.pipe.unet.config.sample_size) * int(self.pipe.vae_scale_factor)
        return side, side

    @torch.no_grad()
    def start(self, request: ImageRequest) -> Sample:
        """Return the request's sample before its first step: prompt embeddings, scheduler, initial noise."""
        pipe = self.pipe
        cfg = request.guidance_scale > 1  # the stock pipeline's do_classifier_free_guidance
        positive, negative = pipe.encode_prompt(request.prompt, self.device, 1, cfg, request.negative_prompt)
        embeds = torch.cat([negative, positive]) if cfg else positive
        scheduler = copy.deepcopy(self._template(request.steps))
        generator = torch.Generator("cpu").manual_seed(request.seed)  # on any device: the same image for a seed
        factor = pipe.vae_scale_factor
        shape = (1, pipe.unet.config.in_channels, request.height // factor, request.width // factor)
        latents = randn_tensor(shape, generator=generator, device=self.device, dtype=embeds.dtype)
        latents = latents * scheduler.init_noise_sigma
        return Sample(request, scheduler, latents, embeds, cfg, generator,
                      pipe.prepare_extra_step_kwargs(generator, 0.0))  # fmt: skip

    @torch.no_grad()
    def step(self, samples: Sequence[Sample]) -> None:
        """Run one denoising step of every sample in ``samples`` (the same latent shape) with one UNet call."""
        inputs, timesteps = [], []
        for sample in samples:
            t = sample.scheduler.timesteps[sample.index]
            x = torch.cat([sample.latents] * 2) if sample.cfg else sample.latents
            inputs.append(sample.scheduler.scale_model_input(x, t))
            timesteps.append(t.reshape(1).expand(sample.rows))
        embeds = torch.cat([s.embeds for s in samples])
        noise = self.pipe.unet(torch.cat(inputs), torch.cat(timesteps).to(self.device),
                               encoder_hidden_states=embeds, return_dict=False)[0]  # fmt: skip
        row = 0
        for sample in samples:
            pred = noise[row:row + sample.rows]
            row += sample.rows
            if sample.cfg:
                uncond, cond = pred.chunk(2)
                pred = uncond + sample.request.guidance_scale * (cond - uncond)
            t = sample.scheduler.timesteps[sample.index]
            sample.latents = sample.scheduler.step(pred, t, sample.latents, **sample.extra, return_dict=False)[0]
            sample.index += 1

    @torch.no_grad()
    def decode(self, samples: Sequence[Sample]) -> list[Any]:
        """Return the images of ``samples`` (the same latent shape; one VAE call), as the stock pipeline's
        ``output_type="np"``: float32 arrays (height, width, 3) in [0, 1]."""
        pipe = self.pipe
        latents = torch.cat([s.latents for s in samples])
        images = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
        arrays = pipe.image_processor.postprocess(images, output_type="np", do_denormalize=[True] * len(samples))
        return list(arrays)

    def join(self, user: Any) -> None:
        """Count ``user`` (a replica) among those running on these weights (until it leaves or is collected)."""
        self._users.add(user)

    def leave(self, user: Any) -> None:
        """Forget ``user`` (shut down); its sleep no longer counts."""
        self.wake(user)
        self._users.discard(user)

    def sleep(self, user: Any) -> None:
        """Mark ``user`` asleep; once every user sleeps, the weights of an accelerator move to the host."""
        self._asleep.add(user)
        if self.device.type != "cpu" and set(self._users) <= set(self._asleep):
            self.pipe.to("cpu")

    def wake(self, user: Any) -> None:
        """Mark ``user`` awake; the weights move back to the accelerator if they were on the host."""
        if user in self._asleep:
            self._asleep.discard(user)
            if self.device.type != "cpu":
                self.pipe.to(self.device)

    def _template(self, steps: int) -> Any:
        template = self._templates.get(steps)
        if template is None:
            template = copy.deepcopy(self.pipe.scheduler)
            template.set_timesteps(steps, device=self.device)
            self._templates[steps] = template
        return template

