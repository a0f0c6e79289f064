"""What one image request asks of the diffusion stage: its stage input read into prompt, negative prompt, guidance,
steps, seed and size (plain Python: no torch here).

The rules, in the order they apply (``docs/diffusion.md``):

- prompt: ``StageInput.text`` when given; else the upstream AR stage's tokens (``multimodal["prior"]``, else
  ``StageInput.token_ids``) read as words of the stage's vocabulary, token ``i`` as ``words[i % len(words)]``.
- negative prompt (the CFG companion's output): ``multimodal["negative_prompt"]`` (text), else the one companion
  result in ``multimodal["negative"]`` read as words; none: the unconditional (empty) prompt, as the stock pipeline.
- guidance scale: ``multimodal["guidance_scale"]``, else the stage's default; CFG is on above 1, as the stock
  pipeline (each sample then takes two UNet rows: unconditional and conditional).
- steps: ``multimodal["steps"]``, else the stage's ``steps``.
- seed: ``StageInput.sampling.seed``; none: one drawn from the request id (the same request id, the same image).
- size: ``multimodal["size"]`` as (height, width) in pixels, multiples of 8 as the stock pipeline wants; none: the
  model's native size.

A value that breaks a rule raises ``ValueError`` naming the key: the runtime fails that request alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from omni_runtime.core.prompts import StageInput

#: the largest image side and step count a request may ask for (a guard against a request that would stall the stage)
MAX_SIDE = 2048
MAX_STEPS = 1000


@attrs.frozen
class ImageRequest:
    """One image request, as the stock pipeline call it must equal:
    ``pipe(prompt, negative_prompt=..., guidance_scale=..., num_inference_steps=steps, height=..., width=...,
    generator=torch.Generator().manual_seed(seed))``."""

    prompt: str
    negative_prompt: str | None
    guidance_scale: float
    steps: int
    seed: int
    height: int
    width: int


@attrs.frozen
class RequestDefaults:
    """What the stage uses where a request does not say: guidance scale, steps, image size; the vocabulary token
    ids are read in; the seed requests without one draw from."""

    guidance_scale: float
    steps: int
    height: int
    width: int
    words: tuple[str, ...]
    seed: int = 0


def words_of(token_ids: Sequence[int], words: Sequence[str]) -> str:
    """Return the text of an AR stage's ``token_ids`` in the stage's vocabulary: token ``i`` is ``words[i % len]``."""
    ids = _ids(token_ids, "prior")
    return " ".join(words[i % len(words)] for i in ids)


def image_request(req_id: int, stage_input: StageInput, defaults: RequestDefaults) -> ImageRequest:
    """Return what ``stage_input`` asks for; raise ``ValueError`` naming the key that is wrong."""
    mm: Mapping[str, Any] = stage_input.multimodal or {}
    if not isinstance(mm, Mapping):
        raise ValueError(f"multimodal must be a mapping, not {type(mm).__name__}")
    if stage_input.text is not None:
        prompt = stage_input.text
    else:
        prompt = words_of(mm.get("prior", stage_input.token_ids), defaults.words)
    height, width = _size(mm.get("size", (defaults.height, defaults.width)))
    return ImageRequest(prompt, _negative(mm, defaults.words), _guidance(mm.get("guidance_scale",
                        defaults.guidance_scale)), _steps(mm.get("steps", defaults.steps)),
                        _seed(req_id, stage_input, defaults.seed), height, width)  # fmt: skip


def _ids(value: Any, key: str) -> tuple[int, ...]:
    if not isinstance(value, tuple | list) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                                   for i in value):  # fmt: skip
        raise ValueError(f"{key} must be a sequence of token ids (ints >= 0), not {value!r}")
    return tuple(value)


def _negative(mm: Mapping[str, Any], words: Sequence[str]) -> str | None:
    text = mm.get("negative_prompt")
    companions = mm.get("negative", ())
    if not isinstance(companions, tuple | list):
        raise ValueError(f"negative must be the CFG companions' token ids, not {companions!r}")
    if text is not None:
        if not isinstance(text, str):
            raise ValueError(f"negative_prompt must be text, not {text!r}")
        if companions:
            raise ValueError("a negative prompt comes as negative_prompt or as a CFG companion's output, not both")
        return text
    if len(companions) > 1:
        raise ValueError(f"one CFG companion at most (its output is the negative prompt), not {len(companions)}")
    return words_of(companions[0], words) if companions else None


def _guidance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"guidance_scale must be a finite number >= 0, not {value!r}")
    return float(value)


def _steps(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STEPS:
        raise ValueError(f"steps must be an int in [1, {MAX_STEPS}], not {value!r}")
    return value


def _seed(req_id: int, stage_input: StageInput, default: int) -> int:
    sampling = stage_input.sampling
    if sampling is not None and sampling.seed is not None:
        return sampling.seed % 2**63  # torch's manual_seed takes [-2**63, 2**64): one residue for every int
    return (default * 1_000_003 + req_id) % 2**63


def _size(value: Any) -> tuple[int, int]:
    ok = isinstance(value, tuple | list) and len(value) == 2
    ok = ok and all(not isinstance(v, bool) and isinstance(v, int) and 8 <= v <= MAX_SIDE and v % 8 == 0
                    for v in value)  # fmt: skip
    if not ok:
        raise ValueError(f"size must be (height, width), multiples of 8 in [8, {MAX_SIDE}], not {value!r}")
    return int(value[0]), int(value[1])
