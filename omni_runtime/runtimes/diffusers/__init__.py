"""The diffusers runtime: diffusion stages on a real diffusers text-to-image pipeline (the only package that imports
diffusers; torch and transformers with it).

``DiffusersRuntime`` runs its own denoising loop over a ``StableDiffusionPipeline``'s components, so requests join
and leave the batch between denoising steps; each image equals the stock pipeline's call for that request alone
(``docs/diffusion.md``: the rules a stage input is read by, the figures measured). The pipeline is a local
directory written by ``save_pretrained`` (``DiffusersOptions.model``) or, by default, the tiny random-weight one
``tiny.py`` builds by code: nothing is downloaded.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import torch
from diffusers import StableDiffusionPipeline

from omni_fsm import StageKind
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.protocol import RuntimeFactory, StageRuntime
from omni_runtime.errors import ConfigError
from omni_runtime.runtimes.diffusers._denoise import Denoiser, Sample
from omni_runtime.runtimes.diffusers._request import ImageRequest, RequestDefaults, image_request, words_of
from omni_runtime.runtimes.diffusers.runtime import BATCHING, STEP, DiffusersRuntime
from omni_runtime.runtimes.diffusers.tiny import WORDS, build_tiny_components


@attrs.frozen
class DiffusersOptions:
    """How a diffusers stage is built. ``model``: a local pipeline directory (``None``: the tiny pipeline, its
    weights from ``seed``); ``device``: ``None`` picks CUDA when present; ``guidance_scale``: a request's default;
    ``max_batch``: samples denoised together at most (``None``: the stage's ``max_running``); ``words``: the
    vocabulary an AR stage's token ids are read in; ``seed`` is also what requests without a seed draw theirs from;
    ``batching``: ``step`` (requests join the running batch between denoising steps) or ``request`` (a batch runs to
    its end before the waiting requests start: the request-level baseline)."""

    model: str | None = None
    seed: int = 0
    device: str | None = None
    guidance_scale: float = 7.5
    max_batch: int | None = None
    words: tuple[str, ...] = WORDS
    batching: str = attrs.field(default=STEP, validator=attrs.validators.in_(BATCHING))


def torch_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads (``None``: leave them) and return how many it uses: a program that runs this
    runtime sets them here, without importing torch itself (only this package imports it)."""
    if threads is not None:
        torch.set_num_threads(threads)
    return int(torch.get_num_threads())


@attrs.frozen
class DemoKit:
    """What a text-to-image program takes from this package besides its runtimes (``omni_runtime.apps.text2image``)."""

    words: tuple[str, ...]  #: the tiny tokenizer's vocabulary: prompts made of them are read word for word
    torch_threads: Any  #: ``torch_threads(n)``
    record: Any  #: ``report.RequestRecord``
    png_bytes: Any  #: ``report.png_bytes``
    render_report: Any  #: ``report.render_report``


def demo_kit() -> DemoKit:
    """Return the parts of this package a text-to-image demo uses."""
    from omni_runtime.runtimes.diffusers import report

    return DemoKit(tuple(WORDS), torch_threads, report.RequestRecord, report.png_bytes, report.render_report)


def default_device() -> str:
    """Return ``cuda`` when a CUDA device is present, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_pipeline(model: str | None = None, seed: int = 0) -> Any:
    """Return the ``StableDiffusionPipeline`` in the local directory ``model`` (offline), or the tiny one built
    from ``seed``; no safety checker, no progress bar."""
    if model is None:
        pipe = StableDiffusionPipeline(**build_tiny_components(seed), safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)  # fmt: skip
    else:
        pipe = StableDiffusionPipeline.from_pretrained(model, local_files_only=True, safety_checker=None,
                                                       requires_safety_checker=False)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe


def make_denoiser(model: str | None = None, seed: int = 0, device: str = "cpu") -> Denoiser:
    """Return a new denoiser over ``build_pipeline(model, seed)`` on ``device``; a level-2 sleep discards its weights
    and the wake-up rebuilds them the same way (the model directory read again, or the tiny build from ``seed``: the
    same weights to the bit)."""
    return Denoiser(build_pipeline(model, seed).to(device), device, functools.partial(build_pipeline, model, seed))


@functools.lru_cache(maxsize=4)
def shared_denoiser(model: str | None, seed: int, device: str) -> Denoiser:
    """Return ``make_denoiser(model, seed, device)``, built once per process (replicas driven by one thread share
    its weights: a step never interleaves with another)."""
    return make_denoiser(model, seed, device)


def diffusers_factory(options: DiffusersOptions | None = None) -> RuntimeFactory[DiffusersRuntime]:
    """Return the runtime factory of diffusers replicas built with ``options``; it raises ``ConfigError`` for a
    stage that is not a diffusion stage."""
    opts = options or DiffusersOptions()

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> DiffusersRuntime:
        if spec.kind is not StageKind.DIFFUSION:
            raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: the diffusers runtime runs "
                              f"diffusion stages only")  # fmt: skip
        denoiser = shared_denoiser(opts.model, opts.seed, opts.device or default_device())
        height, width = denoiser.native_size
        defaults = RequestDefaults(opts.guidance_scale, spec.steps, height, width, opts.words, opts.seed)
        return DiffusersRuntime(spec, denoiser, defaults, opts.max_batch, rpc_fails, opts.batching)

    return factory


def kit_factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> DiffusersRuntime:
    """Return a replica on the tiny pipeline (the conformance kit's factory: ``--omni-runtime
    omni_runtime.runtimes.diffusers:kit_factory``)."""
    return diffusers_factory()(spec, stage, replica, rpc_fails)


def diffusers_runtimes(pipeline: Pipeline, options: DiffusersOptions | None = None,
                       ar_runtime: str = "sim") -> list[list[StageRuntime]]:  # fmt: skip
    """Return every stage's replicas, ``result[stage][replica]``: diffusion stages on diffusers (``options``), AR
    stages on the runtime named ``ar_runtime`` in ``omni_runtime.registry`` (default: the simulator; ``vllm``:
    a real vLLM engine per AR replica, each in a process of its own, on the tiny Llama)."""
    from omni_runtime import registry

    factory = diffusers_factory(options)
    kinds = {spec.kind for spec in pipeline.stages}
    if ar_runtime == "vllm":  # vLLM runs AR stages only: its replicas are made stage by stage
        ar_factory: RuntimeFactory[StageRuntime] = registry.factory("vllm")
        return [[(factory if spec.kind is StageKind.DIFFUSION else ar_factory)(spec, stage, replica, False)
                 for replica in range(spec.replicas)] for stage, spec in enumerate(pipeline.stages)]  # fmt: skip
    others: list[list[StageRuntime]] = registry.runtimes(pipeline, ar_runtime) if StageKind.AR in kinds else []
    return [[factory(spec, stage, replica, False) for replica in range(spec.replicas)]
            if spec.kind is StageKind.DIFFUSION else others[stage] for stage, spec in enumerate(pipeline.stages)]


__all__ = [
    "WORDS",
    "Denoiser",
    "DiffusersOptions",
    "DiffusersRuntime",
    "ImageRequest",
    "RequestDefaults",
    "Sample",
    "build_pipeline",
    "build_tiny_components",
    "default_device",
    "diffusers_factory",
    "diffusers_runtimes",
    "image_request",
    "kit_factory",
    "make_denoiser",
    "shared_denoiser",
    "torch_threads",
    "words_of",
]  # fmt: skip
