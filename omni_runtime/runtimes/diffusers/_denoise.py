"""The denoising loop, one step at a time, over a ``StableDiffusionPipeline``'s components.

The stock pipeline runs one call's samples from the first step to the last together. Here every sample carries
its own state (its scheduler: a ``copy.deepcopy`` of a template that ran ``set_timesteps``, or the template itself
for a ``DDIMScheduler``, whose ``step`` keeps no state; its step index, generator and prompt embeddings), so samples
join and leave between steps. The samples a replica steps together are rows of one running batch per latent shape
(``_batch.RunningBatch``: latents, embeddings, guidance scales and schedule positions as device tensors, grown and
shrunk between steps), and one ``step`` is the stock pipeline's step on that batch: one UNet call (replayed from a
CUDA graph where the call is launch-bound: ``_graphs``), the guidance arithmetic on all rows, and one DDIM step for
every sample on a shared schedule (each row's coefficients gathered from a device table: the scheduler's own
scalars, the same bits as its ``step``); a sample whose scheduler keeps state steps alone. No host sync per step:
the host keeps each sample's step index, the device everything else.

Everything per sample is what the stock pipeline does for a call with that sample alone: the same initial noise
from its generator, the same guidance arithmetic, its scheduler's arithmetic, the same VAE decode and
post-processing. Shared are the UNet's rows (they agree with a batch-1 call within float rounding), and the text
encoder's rows of the requests started together (``start_many``: one call over every prompt and negative prompt,
each tokenized as ``encode_prompt`` does, so each row agrees with its batch-1 encoding within float rounding; a
request started alone goes through ``encode_prompt`` itself, to the bit).
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

from omni_runtime.runtimes.diffusers._batch import RunningBatch, Schedules, to_device
from omni_runtime.runtimes.diffusers._graphs import CallGraphs
from omni_runtime.runtimes.diffusers._request import ImageRequest


class Sample:
    """One request's image being denoised: its latents after ``index`` of its scheduler's steps (its own tensor
    until it joins a running batch, a row of the batch's from then on: ``batch``)."""

    __slots__ = ("batch", "cfg", "embeds", "extra", "generator", "index", "latents", "offset", "request", "scheduler",
                 "shape", "steps")  # fmt: skip

    def __init__(self, request: ImageRequest, scheduler: Any, latents: Any, embeds: Any, cfg: bool,
                 generator: Any, extra: dict[str, Any], offset: int | None = None) -> None:  # fmt: skip
        self.request, self.scheduler, self.latents, self.embeds = request, scheduler, latents, embeds
        self.cfg, self.generator, self.extra = cfg, generator, extra
        self.offset = offset  #: its schedule's first row in the shared DDIM table; ``None``: it steps alone
        self.index = 0
        self.steps = len(scheduler.timesteps)
        self.shape: tuple[int, ...] = tuple(latents.shape)  #: its latents' shape (samples of one shape share a call)
        self.batch: RunningBatch | None = None

    @property
    def done(self) -> bool:
        """Return whether every step of its schedule ran."""
        return self.index >= self.steps

    @property
    def rows(self) -> int:
        """Return its rows in a UNet call: unconditional and conditional under CFG, else the conditional one."""
        return 2 if self.cfg else 1


class Decoding:
    """Images on their way to the host (``Denoiser.decode_start``): ``ready()`` without waiting, ``images()`` the
    float32 arrays (height, width, 3), as ``VaeImageProcessor.pt_to_numpy`` makes them."""

    __slots__ = ("_done", "_host")

    def __init__(self, images: Any) -> None:
        self._done: Any = None
        if images.device.type == "cuda":  # copied into pinned memory behind the device's work, with an event after
            self._host = torch.empty(images.shape, dtype=images.dtype, pin_memory=True)
            self._host.copy_(images, non_blocking=True)
            self._done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._done.record()
        else:
            self._host = images

    def ready(self) -> bool:
        """Return whether the images are on the host."""
        return self._done is None or bool(self._done.query())

    def images(self) -> list[Any]:
        """Return the images (waiting for the device if they are not there yet)."""
        if self._done is not None:
            self._done.synchronize()
        return list(self._host.permute(0, 2, 3, 1).float().numpy())


class Denoiser:
    """A pipeline's components on ``device``, driven step by step (see the module's docstring); ``cuda_graphs``:
    replay the UNet and VAE decoder calls from CUDA graphs on CUDA where they are launch-bound (``_graphs``)."""

    def __init__(self, pipe: Any, device: str, rebuild: Callable[[], Any] | None = None,
                 cuda_graphs: bool = True) -> None:  # fmt: skip
        self.pipe, self.device, self.rebuild = pipe, torch.device(device), rebuild
        if pipe.unet.config.time_cond_proj_dim is not None:
            raise ValueError("a UNet conditioned on the guidance scale (time_cond_proj_dim) is not supported")
        self._templates: dict[int, Any] = {}  #: steps -> the pipeline's scheduler after set_timesteps(steps)
        self._offsets: dict[int, int] = {}  #: steps -> its shared DDIM schedule's first row in ``_schedules``
        self._schedules = Schedules(self.device)
        self._batches: dict[tuple[int, tuple[int, ...]], RunningBatch] = {}  #: (owner id, shape) -> its batch
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self._graphs: CallGraphs | None = None  #: the UNet's calls
        self._vae_graphs: CallGraphs | None = None  #: the VAE decoder's calls
        self._forget_graphs()
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
        raises, each request is encoded alone, so a request the pipeline cannot start fails alone), and their
        initial noise goes to the device in one copy."""
        encoded: list[Any] | None = None
        if len(requests) > 1:
            try:
                encoded = self._encode(requests, together=True)
            except Exception:
                encoded = None
        results: list[Sample | Exception] = []
        for i, request in enumerate(requests):
            try:
                results.append(self._begin(request, None if encoded is None else encoded[i]))
            except Exception as exc:
                results.append(exc)
        self._place_noise([sample for sample in results if isinstance(sample, Sample)])
        return results

    @torch.no_grad()
    def start(self, request: ImageRequest, embeds: Any = None) -> Sample:
        """Return the request's sample before its first step: prompt embeddings (``embeds`` when given: the
        unconditional row then the conditional one under CFG, else the conditional one; else ``encode_prompt`` of
        the request alone, text by text as ``encode_prompt`` does: the same bits), scheduler, initial noise."""
        sample = self._begin(request, embeds)
        self._place_noise([sample])
        return sample

    @torch.no_grad()
    def prepare(self, height: int, width: int, max_batch: int) -> int:
        """Capture the UNet's CUDA graphs for up to ``max_batch`` samples under CFG of ``height`` x ``width`` images
        (``_graphs``: the launch-bound buckets), as a server does before it serves; return the graphs kept (0 off
        CUDA or with graphs off)."""
        if self._graphs is None or self._vae_graphs is None:
            return 0
        factor, config = self.pipe.vae_scale_factor, self.pipe.unet.config
        dtype = self.pipe.text_encoder.dtype
        latents = torch.zeros(1, config.in_channels, height // factor, width // factor, device=self.device, dtype=dtype)
        embeds = torch.zeros(1, self.pipe.tokenizer.model_max_length, config.cross_attention_dim, device=self.device,
                             dtype=dtype)  # fmt: skip
        timesteps = torch.zeros(1, dtype=torch.long, device=self.device)
        kept = self._graphs.prepare([latents, timesteps, embeds], 2 * max_batch)
        return kept + self._vae_graphs.prepare([latents], max_batch)

    def _begin(self, request: ImageRequest, embeds: Any) -> Sample:
        """Return the request's sample with its initial noise drawn on the CPU (``_place_noise`` moves it)."""
        pipe = self.pipe
        cfg = request.guidance_scale > 1  # the stock pipeline's do_classifier_free_guidance
        if embeds is None:
            embeds = self._encode([request], together=False)[0]
        template = self._template(request.steps)
        shared = self._stateless(template)
        scheduler = template if shared else copy.deepcopy(template)
        generator = torch.Generator("cpu").manual_seed(request.seed)  # on any device: the same image for a seed
        factor = pipe.vae_scale_factor
        shape = (1, pipe.unet.config.in_channels, request.height // factor, request.width // factor)
        # randn_tensor draws on the CPU for a CPU generator, then moves the noise: the same numbers
        noise = randn_tensor(shape, generator=generator, device=torch.device("cpu"), dtype=embeds.dtype)
        extra = {} if shared else pipe.prepare_extra_step_kwargs(generator, 0.0)  # a shared DDIM step takes eta 0
        offset = None
        if shared:
            offset = self._offsets.get(request.steps)
            if offset is None:
                offset = self._offsets[request.steps] = self._schedules.add(template)
        return Sample(request, scheduler, noise, embeds, cfg, generator, extra, offset)

    def _place_noise(self, samples: Sequence[Sample]) -> None:
        """Move the samples' initial noise to the device, one copy per shape and schedule, scaled by the scheduler's
        ``init_noise_sigma`` as the stock pipeline scales its batch."""
        groups: dict[tuple[Any, ...], list[Sample]] = {}
        for sample in samples:
            groups.setdefault((sample.shape, sample.steps), []).append(sample)
        for group in groups.values():
            noise = to_device(torch.cat([sample.latents for sample in group]), self.device)
            noise = noise * group[0].scheduler.init_noise_sigma
            for i, sample in enumerate(group):
                sample.latents = noise[i:i + 1]

    @torch.no_grad()
    def step(self, samples: Sequence[Sample], owner: Any = None) -> None:
        """Run one denoising step of every sample in ``samples`` (the same latent shape) with one UNet call; the
        samples stay rows of ``owner``'s running batch of that shape (they join and leave it between steps)."""
        if not samples:
            return
        key = (id(owner), samples[0].shape)
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = RunningBatch(self.device, self._schedules)
        batch.align(samples)
        latents, timesteps = batch.unet_inputs() if batch.shared else batch.unet_inputs_each()
        pred = batch.guide(self._unet(latents, timesteps, batch.embeds))
        if batch.shared:
            batch.step_shared(pred)
        else:
            batch.step_each(pred)
        for sample in samples:
            sample.index += 1

    def _unet(self, latents: Any, timesteps: Any, embeds: Any) -> Any:
        """Return the UNet's noise prediction for its rows (replayed from a CUDA graph where one is kept)."""
        if self._graphs is not None:
            return self._graphs(latents, timesteps, embeds)
        return self._unet_call(latents, timesteps, embeds)

    def _unet_call(self, latents: Any, timesteps: Any, embeds: Any) -> Any:
        return self.pipe.unet(latents, timesteps, encoder_hidden_states=embeds, return_dict=False)[0]

    def _vae_call(self, latents: Any) -> Any:
        return self.pipe.vae.decode(latents, return_dict=False)[0]

    @torch.no_grad()
    def decode(self, samples: Sequence[Sample]) -> list[Any]:
        """Return the images of ``samples`` (the same latent shape; one VAE call), as the stock pipeline's
        ``output_type="np"``: float32 arrays (height, width, 3) in [0, 1]."""
        return self.decode_start(samples).images()

    @torch.no_grad()
    def decode_start(self, samples: Sequence[Sample]) -> Decoding:
        """Start decoding the images of ``samples`` (as ``decode``) without waiting for the device."""
        pipe = self.pipe
        latents = self._latents_of(samples) / pipe.vae.config.scaling_factor  # the stock expression, to the bit
        images = self._vae_graphs(latents) if self._vae_graphs is not None else self._vae_call(latents)
        # the stock postprocess denormalizes image by image (do_denormalize all True), elementwise: the same bits
        return Decoding(pipe.image_processor.denormalize(images))

    def _latents_of(self, samples: Sequence[Sample]) -> Any:
        batch = samples[0].batch
        if batch is not None and all(s.batch is batch for s in samples):
            return batch.latents_of(samples)
        return torch.cat([s.latents if s.batch is None else s.batch.latents_of([s]) for s in samples])

    def join(self, user: Any) -> None:
        """Count ``user`` (a replica) among those running on these weights (until it leaves or is collected); an
        awake replica needs them: they are restored if every other one slept them away."""
        self._users.add(user)
        self._restore()

    def leave(self, user: Any) -> None:
        """Forget ``user`` (shut down); its sleep no longer counts (the weights come back if a user is awake)."""
        self._asleep.pop(user, None)
        self._users.discard(user)
        for key in [key for key in self._batches if key[0] == id(user)]:
            del self._batches[key]
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
                self._forget_graphs()
        elif self.device.type != "cpu" and self.weights == "loaded":
            self.pipe.to("cpu")
            self.weights = "offloaded"
            self._forget_graphs()

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
        self._forget_graphs()

    def _forget_graphs(self) -> None:
        """Start the CUDA graphs afresh (dropping any kept: they read the weights where they were when captured,
        which a move frees)."""
        if self.cuda_graphs:
            self._graphs, self._vae_graphs = CallGraphs(self._unet_call), CallGraphs(self._vae_call)

    def _encode(self, requests: Sequence[ImageRequest], together: bool) -> list[Any]:
        """Return each request's prompt embeddings (as ``start`` takes them: the unconditional row, the empty prompt's
        where a request under CFG has no negative prompt, then the conditional one), each text tokenized and encoded
        as ``encode_prompt`` does (padded to the tokenizer's ``model_max_length``, truncated); ``together``: one
        text-encoder call over every distinct text, else one call per text, as ``encode_prompt`` makes them (the same
        bits). Nothing waits for the device."""
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
        calls = [prompts] if together else [[prompt] for prompt in prompts]
        outputs = [self._text_rows(call) for call in calls]
        rows = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        flat = to_device(torch.tensor([i for pair in wanted for i in pair], dtype=torch.long), self.device)
        picked = rows.index_select(0, flat)  # every request's rows, in order, in one gather
        starts = [0]
        for pair in wanted:
            starts.append(starts[-1] + len(pair))
        return [picked[starts[i]:starts[i + 1]] for i in range(len(wanted))]

    def _text_rows(self, prompts: list[str]) -> Any:
        """Return the text encoder's last hidden states of ``prompts`` (one call), as ``encode_prompt`` has them."""
        pipe = self.pipe
        inputs = pipe.tokenizer(prompts, padding="max_length", max_length=pipe.tokenizer.model_max_length,
                                truncation=True, return_tensors="pt")  # fmt: skip
        config = pipe.text_encoder.config
        mask = to_device(inputs.attention_mask, self.device) if getattr(config, "use_attention_mask", False) else None
        rows = pipe.text_encoder(to_device(inputs.input_ids, self.device), attention_mask=mask)[0]
        return rows.to(dtype=pipe.text_encoder.dtype, device=self.device)

    @staticmethod
    def _stateless(scheduler: Any) -> bool:
        """Return whether ``scheduler``'s ``step`` and ``scale_model_input`` keep no state and its ``step`` is the
        arithmetic ``RunningBatch.step_shared`` does (a ``DDIMScheduler`` predicting epsilon, without thresholding or
        clipping): samples may share it and step together."""
        config = scheduler.config
        return (type(scheduler) is DDIMScheduler and config.prediction_type == "epsilon" and not config.thresholding
                and not config.clip_sample)  # fmt: skip

    def _template(self, steps: int) -> Any:
        template = self._templates.get(steps)
        if template is None:
            template = copy.deepcopy(self.pipe.scheduler)
            template.set_timesteps(steps, device=self.device)
            self._templates[steps] = template
        return template

