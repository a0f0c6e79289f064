"""Input and output adapters: the only place where stage data is converted (AR-INV-002).

The orchestrator never looks inside a payload: it hands a request's prompt, its previous
stage's accumulated result and its companions' results to the next stage's *input adapter*,
and each output to its stage kind's *output adapter* (accumulate for the next stage, render
for the client).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from omni_fsm import StageKind
from omni_runtime.core.prompts import Prompt, StageInput

#: (the client's prompt, the previous stage's result, its companions' results, the previous stage's text) -> input
InputAdapter = Callable[[Prompt, Any, tuple[Any, ...], str | None], StageInput]


def prompt_input(prompt: Prompt, upstream: Any, companions: tuple[Any, ...], text: str | None = None) -> StageInput:
    """Return stage 0's input: the client's prompt (token ids or text)."""
    return StageInput(prompt.ids, None, prompt.max_tokens, prompt.text, None, prompt.streaming)


def ar_to_ar(prompt: Prompt, upstream: Any, companions: tuple[Any, ...], text: str | None = None) -> StageInput:
    """Return an AR stage's input from the previous AR stage's output: its text where it made text (the stage
    tokenizes it with its own tokenizer), else its generated token ids."""
    if text is not None:
        return StageInput((), None, prompt.max_tokens, text)
    return StageInput(tuple(upstream or ()), None, prompt.max_tokens)


def ar_tokens_to_ar(prompt: Prompt, upstream: Any, companions: tuple[Any, ...],
                    text: str | None = None) -> StageInput:  # fmt: skip
    """Return an AR stage's input from the previous AR stage's sampled token ids only (never its text or tensors):
    the chunk stream its result carries (``chunks``: ``(token ids or None, eof)`` per chunk, in order, what the
    stage streamed to the next; ``ValueError`` unless the last one ends it), else its result's ``token_ids`` (a
    stage result mapping), else the result itself (a tuple of ids)."""
    chunks = upstream.get("chunks") if isinstance(upstream, Mapping) else None
    if chunks is not None:
        if not chunks or not chunks[-1][1]:
            raise ValueError("the previous stage's chunk stream did not end (no eof chunk)")
        return StageInput(tuple(t for data, _ in chunks if data for t in data), None, prompt.max_tokens)
    ids = upstream.get("token_ids") if isinstance(upstream, Mapping) else upstream
    return StageInput(tuple(ids or ()), None, prompt.max_tokens)


def ar_hidden_to_embeds(prompt: Prompt, upstream: Any, companions: tuple[Any, ...],
                        text: str | None = None) -> StageInput:  # fmt: skip
    """Return an AR stage's input conditioned on the previous AR stage's hidden states: its result's
    ``hidden_states`` ([tokens, hidden], the payload that stage built) as prompt embeddings
    (``multimodal["prompt_embeds"]``); ``ValueError`` when it sent none (a token-only stage)."""
    hidden = upstream.get("hidden_states") if isinstance(upstream, Mapping) else None
    if hidden is None:
        raise ValueError("the previous stage sent no hidden states: its payload policy is token-only")
    return StageInput((), {"prompt_embeds": hidden}, prompt.max_tokens)


def ar_to_diffusion(prompt: Prompt, upstream: Any, companions: tuple[Any, ...],
                    text: str | None = None) -> StageInput:  # fmt: skip
    """Return a diffusion stage's conditioning: prior tokens, CFG companions' tokens, image size, and the client's
    sampling parameters (its seed: the same seed, the same image)."""
    negative = tuple(tuple(c or ()) for c in companions)
    mm = {"prior": tuple(upstream or ()), "negative": negative, "size": (prompt.height, prompt.width)}
    return StageInput((), mm, None, None, prompt.sampling)


def companion_input(prompt: Prompt) -> Prompt:
    """Return a CFG companion's prompt: the parent's negative prompt; none: the unconditional prompt, empty text
    (what the stage's tokenizer makes of no text: for a model that starts prompts with ``<s>``, that token alone)."""
    negative = prompt.negative
    if isinstance(negative, tuple):
        return Prompt(negative, prompt.max_tokens, prompt.height, prompt.width, sampling=prompt.sampling)
    text = negative if negative is not None else ""
    return Prompt(None, prompt.max_tokens, prompt.height, prompt.width, text=text, sampling=prompt.sampling)


#: input adapter name (a pipeline file's ``adapter``) -> the function building a stage's input
INPUT_ADAPTERS: dict[str, InputAdapter] = {"prompt": prompt_input, "ar2ar": ar_to_ar, "ar2diffusion": ar_to_diffusion,
                                           "ar_tokens2ar": ar_tokens_to_ar,
                                           "ar_hidden2embeds": ar_hidden_to_embeds}  # fmt: skip
#: input adapter -> (the kind of stage whose output it reads, ``None``: the client's prompt; kinds it feeds)
ADAPTER_KINDS: dict[str, tuple[StageKind | None, frozenset[StageKind]]] = {
    "prompt": (None, frozenset(StageKind)),
    "ar2ar": (StageKind.AR, frozenset({StageKind.AR})),
    "ar2diffusion": (StageKind.AR, frozenset({StageKind.DIFFUSION})),
    "ar_tokens2ar": (StageKind.AR, frozenset({StageKind.AR})),
    "ar_hidden2embeds": (StageKind.AR, frozenset({StageKind.AR})),
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
