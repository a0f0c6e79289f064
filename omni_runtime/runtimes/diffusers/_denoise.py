"""The denoising loop, one step at a time, over a ``StableDiffusionPipeline``'s components.

The stock pipeline runs one call's samples from the first step to the last together. Here every sample carries
its own state (latents, its own scheduler: a ``copy.deepcopy`` of a template that ran ``set_timesteps``, or the
template itself for a ``DDIMScheduler``, whose ``step`` keeps no state; its generator, its prompt embeddings), so
samples join and leave between steps, and one ``step`` makes one batched UNet call for every sample given, each row
at its own timestep (a ``(B,)`` timestep tensor). Everything per sample is done as the stock pipeline does it for a
call with that sample alone: the same initial noise from its generator, the same guidance arithmetic, its
scheduler's ``step``, the same VAE decode and post-processing. Shared are the UNet's rows (they agree with a
batch-1 call within float rounding), the text encoder's rows of the requests started together (``start_many``:
one call over every prompt and negative prompt, each tokenized as ``encode_prompt`` does, so each row agrees with
its batch-1 encoding within float rounding; a request started alone goes through ``encode_prompt`` itself, to the
bit), and the DDIM ``step`` of the samples at the same timestep of the same schedule with ``eta`` 0 (elementwise
arithmetic with the same scalar coefficients for every row: the same bits as one ``step`` per sample).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import DDIMScheduler
from diffusers.loaders import TextualInversionLoaderMixin
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

    def __init__(self, pipe: Any, device: str, rebuild: Callable[[], Any] | None = None) -> None:
        self.pipe, self.device, self.rebuild = pipe, torch.device(device), rebuild
        if pipe.unet.config.time_cond_proj_dim is not None:
            raise ValueError("a UNet conditioned on the guidance scale (time_cond_proj_dim) is not supported")
        self._templates: dict[int, Any] = {}  #: steps -> the pipeline's scheduler after set_timesteps(steps)
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()  #: the replicas running on these weights
        #: those of them asleep, each with the level it asked for
        self._asleep: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.weights = "loaded"  #: ``loaded``, ``offloaded`` (on the host: sleep level 1, on CUDA) or ``discarded``

    @property
    def native_size(self) -> tuple[int, int]:
        """Return the (height, width) of the pipeline's images by default (the stock pipeline's default too)."""
        side = int(self.pipe.unet.config.sample_size) * int(self.pipe.vae_scale_factor)
        return side, side

    @torch.no_grad()
    def start_many(self, requests: Sequence[ImageRequest]) -> list[Sample | Exception]:
        """Return each request's sample before its first step (as ``start``), or the exception that stopped it; the
        prompts and negative prompts of two or more requests are encoded in one text-encoder call (if that call
        raises, each request is encoded alone, so a request the pipeline cannot start fails alone)."""
        encoded: list[Any] | None = None
        if len(requests) > 1:
            try:
                encoded = self._encode_together(requests)
            except Exception:
                encoded = None
        results: list[Sample | Exception] = []
        for i, request in enumerate(requests):
            try:
                results.append(self.start(request, None if encoded is None else encoded[i]))
            except Exception as exc:
                results.append(exc)
        return results

    @torch.no_grad()
    def start(self, request: ImageRequest, embeds: Any = None) -> Sample:
        """Return the request's sample before its first step: prompt embeddings (``embeds`` when given: the
        unconditional row then the conditional one under CFG, else the conditional one; else ``encode_prompt`` of
        the request alone), scheduler, initial noise."""
        pipe = self.pipe
        cfg = request.guidance_scale > 1  # the stock pipeline's do_classifier_free_guidance
        if embeds is None:
            positive, negative = pipe.encode_prompt(request.prompt, self.device, 1, cfg, request.negative_prompt)
            embeds = torch.cat([negative, positive]) if cfg else positive
        template = self._template(request.steps)
        scheduler = template if self._stateless(template) else copy.deepcopy(template)
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
        together: dict[tuple[int, int], list[tuple[Sample, Any]]] = {}  # (schedule, timestep) -> (sample, pred)
        for sample in samples:
            pred = noise[row:row + sample.rows]
            row += sample.rows
            if sample.cfg:
                uncond, cond = pred.chunk(2)
                pred = uncond + sample.request.guidance_scale * (cond - uncond)
            t = sample.scheduler.timesteps[sample.index]
            if self._stateless(sample.scheduler) and sample.extra.get("eta", 0.0) == 0:
                together.setdefault((id(sample.scheduler), int(t)), []).append((sample, pred))
                continue
            sample.latents = sample.scheduler.step(pred, t, sample.latents, **sample.extra, return_dict=False)[0]
            sample.index += 1
        for group in together.values():  # one DDIM step per timestep of a schedule: elementwise, the same bits
            scheduler = group[0][0].scheduler
            t = scheduler.timesteps[group[0][0].index]
            latents = torch.cat([sample.latents for sample, _ in group])
            preds = torch.cat([pred for _, pred in group])
            stepped = scheduler.step(preds, t, latents, eta=0.0, return_dict=False)[0]
            for i, (sample, _) in enumerate(group):
                sample.latents = stepped[i:i + 1]
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
        """Count ``user`` (a replica) among those running on these weights (until it leaves or is collected); an
        awake replica needs them: they are restored if every other one slept them away."""
        self._users.add(user)
        self._restore()

    def leave(self, user: Any) -> None:
        """Forget ``user`` (shut down); its sleep no longer counts (the weights come back if a user is awake)."""
        self._asleep.pop(user, None)
        self._users.discard(user)
        if not self._all_asleep():
            self._restore()

    def sleep(self, user: Any, level: int = 1) -> None:
        """Mark ``user`` asleep at ``level``; once every user sleeps, the weights are freed at the lowest level they
        asked for: level 1 moves the weights of an accelerator to the host (on the CPU there is nowhere to move them:
        they stay), level 2 discards them (every parameter and buffer of the UNet, VAE and text encoder on the meta
        device: no storage) and ``wake`` rebuilds them. Raise ``ValueError`` (nothing changed) for a level other than
        1 or 2, or level 2 on a denoiser built without ``rebuild``."""
        if level not in (1, 2):
            raise ValueError(f"sleep level {level}: the levels are 1 (offload the weights) and 2 (discard them)")
        if level == 2 and self.rebuild is None:
            raise ValueError("sleep level 2: this pipeline cannot be rebuilt (no rebuild given): not discarded")
        self._asleep[user] = level
        if not self._all_asleep():
            return
        if min(self._asleep.values()) >= 2:
            if self.weights != "discarded":
                for module in self._modules():
                    module.to("meta")  # the tensors' storage is released; configs and module structure stay
                self.weights = "discarded"
        elif self.device.type != "cpu" and self.weights == "loaded":
            self.pipe.to("cpu")
            self.weights = "offloaded"

    def wake(self, user: Any) -> None:
        """Mark ``user`` awake; the weights come back if they were freed (to the accelerator from the host; rebuilt
        by ``rebuild`` if discarded: the same weights to the bit, as ``build_pipeline`` makes them)."""
        if user in self._asleep:
            del self._asleep[user]
            self._restore()

    def parameter_bytes(self) -> int:
        """Return the bytes of parameter storage the UNet, VAE and text encoder hold (parameters on the meta device
        hold none), wherever it lies (on CUDA after a level-1 sleep it is on the host)."""
        return sum(p.numel() * p.element_size() for module in self._modules() for p in module.parameters()
                   if not p.is_meta)  # fmt: skip

    def _modules(self) -> list[Any]:
        return [self.pipe.unet, self.pipe.vae, self.pipe.text_encoder]

    def _all_asleep(self) -> bool:
        return set(self._users) <= set(self._asleep.keys())

    def _restore(self) -> None:
        """Bring the weights back where they run, if they were freed."""
        if self.weights == "offloaded":
            self.pipe.to(self.device)
        elif self.weights == "discarded":
            assert self.rebuild is not None
            with torch.random.fork_rng(devices=[]):  # the tiny build seeds torch: the caller's RNG is left alone
                fresh = self.rebuild()
            for name in ("unet", "vae", "text_encoder"):
                setattr(self.pipe, name, getattr(fresh, name).to(self.device))
        self.weights = "loaded"

    def _encode_together(self, requests: Sequence[ImageRequest]) -> list[Any]:
        """Return each request's prompt embeddings (as ``start`` takes them) from one text-encoder call over every
        distinct prompt and negative prompt (the empty one where a request under CFG has none), each tokenized and
        encoded as ``encode_prompt`` does (padded to the tokenizer's ``model_max_length``, truncated)."""
        pipe = self.pipe
        texts: dict[str, int] = {}  # each distinct text -> its row
        wanted = []
        for request in requests:
            cfg = request.guidance_scale > 1
            negative = "" if request.negative_prompt is None else request.negative_prompt
            pair = [texts.setdefault(t, len(texts)) for t in ([negative, request.prompt] if cfg else [request.prompt])]
            wanted.append(pair)
        prompts = list(texts)
        if isinstance(pipe, TextualInversionLoaderMixin):
            prompts = pipe.maybe_convert_prompt(prompts, pipe.tokenizer)
        inputs = pipe.tokenizer(prompts, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                                truncation=True, return_tensors="pt")  # fmt: skip
        config = pipe.text_encoder.config
        mask = inputs.attention_mask.to(self.device) if getattr(config, "use_attention_mask", False) else None
        rows = pipe.text_encoder(inputs.input_ids.to(self.device), attention_mask=mask)[0]
        rows = rows.to(dtype=pipe.text_encoder.dtype, device=self.device)
        return [torch.cat([rows[i:i + 1] for i in pair]) for pair in wanted]

    @staticmethod
    def _stateless(scheduler: Any) -> bool:
        """Return whether ``scheduler``'s ``step`` and ``scale_model_input`` keep no state and its ``step`` is
        elementwise (a ``DDIMScheduler`` without thresholding): samples may share it and step together."""
        return type(scheduler) is DDIMScheduler and not scheduler.config.thresholding

    def _template(self, steps: int) -> Any:
        template = self._templates.get(steps)
        if template is None:
            template = copy.deepcopy(self.pipe.scheduler)
            template.set_timesteps(steps, device=self.device)
            self._templates[steps] = template
        return template

