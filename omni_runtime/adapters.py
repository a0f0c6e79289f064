"""Input and output adapters: the only place where stage data is converted (AR-INV-002).

The orchestrator never looks inside a payload: it hands a request's prompt, its previous
stage's accumulated result and its companions' results to the next stage's *input adapter*,
and each output to its stage kind's *output adapter* (accumulate for the next stage, render
for the client).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from omni_fsm import StageKind
from omni_fsm.frozen import direct_inits


def _token_ids(prompt: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise TypeError(f"Prompt.token_ids must be a tuple of ints, not {value!r}")


def _at_least_one(prompt: Any, attribute: Any, value: Any) -> None:
    if value is None and attribute.name == "max_tokens":
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Prompt.{attribute.name} must be an int >= 1, not {value!r}")


@attrs.frozen
class Prompt:
    """What a client submits: prompt token ids and the generation parameters the stages read.

    Checked when made: ``token_ids`` a tuple of ints, ``max_tokens`` ``None`` or an int >= 1,
    ``height`` and ``width`` ints >= 1 (``TypeError`` / ``ValueError`` naming the field).
    """

    token_ids: tuple[int, ...] = attrs.field(default=(1, 2, 3), validator=_token_ids)
    #: AR stages: cap on generated tokens (``None``: the stage's)
    max_tokens: int | None = attrs.field(default=None, validator=_at_least_one)
    height: int = attrs.field(default=64, validator=_at_least_one)
    width: int = attrs.field(default=64, validator=_at_least_one)


@attrs.frozen
class StageInput:
    """What a stage runtime receives: token ids and an optional multimodal payload."""

    token_ids: tuple[int, ...] = ()
    multimodal: Mapping[str, Any] | None = None
    max_tokens: int | None = None


direct_inits(StageInput)

InputAdapter = Callable[[Prompt, Any, tuple[Any, ...]], StageInput]


def prompt_input(prompt: Prompt, upstream: Any, companions: tuple[Any, ...]) -> StageInput:
    """Return stage 0's input: the client's prompt tokens."""
    return StageInput(prompt.token_ids, None, prompt.max_tokens)


def ar_to_ar(prompt: Prompt, upstream: Any, companions: tuple[Any, ...]) -> StageInput:
    """Return an AR stage's input from the previous AR stage's generated tokens."""
    return StageInput(tuple(upstream or ()), None, prompt.max_tokens)


def ar_to_diffusion(prompt: Prompt, upstream: Any, companions: tuple[Any, ...]) -> StageInput:
    """Return a diffusion stage's conditioning: prior tokens, CFG companions' tokens, image size."""
    negative = tuple(tuple(c or ()) for c in companions)
    mm = {"prior": tuple(upstream or ()), "negative": negative, "size": (prompt.height, prompt.width)}
    return StageInput((), mm, None)


def companion_input(prompt: Prompt) -> Prompt:
    """Return a CFG companion's prompt: the unconditional (empty) prompt."""
    return Prompt((), prompt.max_tokens, prompt.height, prompt.width)


#: input adapter name (a pipeline file's ``adapter``) -> the function building a stage's input
INPUT_ADAPTERS: dict[str, InputAdapter] = {"prompt": prompt_input, "ar2ar": ar_to_ar, "ar2diffusion": ar_to_diffusion}
#: input adapter -> (the kind of stage whose output it reads, ``None``: the client's prompt; kinds it feeds)
ADAPTER_KINDS: dict[str, tuple[StageKind | None, frozenset[StageKind]]] = {
    "prompt": (None, frozenset(StageKind)),
    "ar2ar": (StageKind.AR, frozenset({StageKind.AR})),
    "ar2diffusion": (StageKind.AR, frozenset({StageKind.DIFFUSION})),
}


class OutputAdapter:
    """How one stage kind's outputs accumulate and what the client sees of them."""

    __slots__ = ()

    def accumulate(self, acc: Any, payload: Any) -> Any:
        """Return the accumulated result after one output."""
        return acc

    def finish(self, acc: Any, payload: Any) -> Any:
        """Return the stage's result given the payload its finish carried (if any)."""
        return acc if payload is None else payload

    def delta(self, payload: Any) -> Any:
        """Return the client's view of one partial output."""
        return payload

    def result(self, acc: Any) -> Any:
        """Return the client's view of the accumulated result (a terminal, an abort prefix)."""
        return acc


class TokenOutput(OutputAdapter):
    """AR: outputs are token-id tuples; the result is their concatenation."""

    __slots__ = ()

    def accumulate(self, acc: Any, payload: Any) -> Any:
        if payload is None:  # an output that carries no token ids
            return acc
        return payload if acc is None else acc + payload

    def result(self, acc: Any) -> Any:
        return () if acc is None else acc


class ImageOutput(OutputAdapter):
    """Diffusion: denoising steps carry nothing; the finish carries the whole sample."""

    __slots__ = ()

    def delta(self, payload: Any) -> Any:
        return None


#: stage kind -> how its outputs accumulate and what the client sees of them
OUTPUT_ADAPTERS: dict[StageKind, OutputAdapter] = {StageKind.AR: TokenOutput(), StageKind.DIFFUSION: ImageOutput()}
