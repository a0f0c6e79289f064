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


def _token_ids(owner: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is None and owner == "Prompt":
            return
        if not isinstance(value, tuple):
            raise TypeError(f"{owner}.{attribute.name} must be a tuple of ints, not {value!r} "
                            "(a list of ints is taken too)")  # fmt: skip
        bad = next(((i, t) for i, t in enumerate(value) if isinstance(t, bool) or not isinstance(t, int)), None)
        if bad is not None:
            index, item = bad
            raise TypeError(f"{owner}.{attribute.name} must be a tuple of ints, not {value!r}: "
                            f"item {index} is {item!r}, a {type(item).__name__}")  # fmt: skip

    return check


def _as_tuple(value: Any) -> Any:
    """Return ``value`` as a tuple if it is a list (token ids come as either), else unchanged (for the validator)."""
    return tuple(value) if isinstance(value, list) else value


def _at_least_one(prompt: Any, attribute: Any, value: Any) -> None:
    if value is None and attribute.name == "max_tokens":
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Prompt.{attribute.name} must be an int >= 1, not {value!r}")


def _number(low: float, high: float | None, low_open: bool = False) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"Sampling.{attribute.name} must be a number, not {value!r}")
        if value < low or (low_open and value == low) or (high is not None and value > high):
            bound = f"in ({low}, {high}]" if low_open else f"at least {low}" if high is None else f"in [{low}, {high}]"
            raise ValueError(f"Sampling.{attribute.name} must be {bound}, not {value!r}")

    return check


def _optional_int(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"Sampling.{attribute.name} must be an int or None, not {value!r}")


def _strings(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(s, str) and s for s in value):
        raise TypeError(f"Sampling.{attribute.name} must be a tuple of non-empty strings, not {value!r}")


def _flag(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"Sampling.{attribute.name} must be True or False, not {value!r}")


@attrs.frozen
class Sampling:
    """How an AR stage samples a request: vLLM's ``SamplingParams`` fields that a pipeline sets.

    Defaults are vLLM's. ``seed`` makes sampling reproducible; sample ``i`` of an ``n>1`` request uses
    ``seed + i``. ``stop`` strings are found on the detokenized text (the text ends before the string,
    the finish reason is ``stop`` and ``stop_reason`` the string); ``detokenize=False`` gives token ids only.
    Checked when made (``TypeError`` / ``ValueError`` naming the field).
    """

    temperature: float = attrs.field(default=1.0, validator=_number(0.0, None))
    top_p: float = attrs.field(default=1.0, validator=_number(0.0, 1.0, low_open=True))
    top_k: int = attrs.field(default=0, validator=_optional_int)  #: 0: every token
    seed: int | None = attrs.field(default=None, validator=_optional_int)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple, validator=_strings)
    stop_token_ids: tuple[int, ...] = attrs.field(default=(), converter=_as_tuple, validator=_token_ids("Sampling"))
    ignore_eos: bool = attrs.field(default=False, validator=_flag)
    detokenize: bool = attrs.field(default=True, validator=_flag)

    def for_sample(self, index: int) -> Sampling:
        """Return the parameters of sample ``index`` of an ``n>1`` request (``seed + index``, if seeded)."""
        return self if self.seed is None else attrs.evolve(self, seed=self.seed + index)


#: the fields a pipeline file's ``[stages.sampling]`` may set, and their types
SAMPLING_FIELDS: dict[str, type] = {a.name: a.type for a in attrs.fields(Sampling)}  # type: ignore[misc]


@attrs.frozen
class Prompt:
    """What a client submits: the prompt (token ids or text) and the parameters the stages read.

    ``token_ids`` or ``text`` (text is tokenized by the stage that takes it, with its own tokenizer;
    ``Prompt()`` is a three-token prompt, for tests). ``negative`` is the CFG companions' prompt (text
    or token ids; none: an empty prompt). Checked when made: ``TypeError`` / ``ValueError`` naming the field.
    """

    token_ids: tuple[int, ...] | None = attrs.field(default=None, converter=_as_tuple, validator=_token_ids("Prompt"))
    #: AR stages: cap on generated tokens (``None``: the stage's)
    max_tokens: int | None = attrs.field(default=None, validator=_at_least_one)
    height: int = attrs.field(default=64, validator=_at_least_one)
    width: int = attrs.field(default=64, validator=_at_least_one)
    text: str | None = attrs.field(default=None, kw_only=True)
    sampling: Sampling = attrs.field(factory=Sampling, kw_only=True)
    negative: str | tuple[int, ...] | None = attrs.field(default=None, converter=_as_tuple, kw_only=True)
    #: a streaming-input session: stage 0 waits for more input (``Engine.feed``) after each turn
    streaming: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.text is not None and not isinstance(self.text, str):
            raise TypeError(f"Prompt.text must be a str, not {self.text!r}")
        if self.text is not None and self.token_ids is not None:
            raise ValueError("a Prompt has token_ids or text, not both")
        if self.text is None and self.token_ids is None:
            object.__setattr__(self, "token_ids", (1, 2, 3))
        if not isinstance(self.sampling, Sampling):
            raise TypeError(f"Prompt.sampling must be a Sampling, not {self.sampling!r}")
        if self.negative is not None and not isinstance(self.negative, str):
            _token_ids("Prompt")(self, attrs.fields(Prompt).negative, self.negative)

    @property
    def ids(self) -> tuple[int, ...]:
        """Return the prompt's token ids (empty for a text prompt: its stage tokenizes it)."""
        return self.token_ids or ()


@attrs.frozen
class StageInput:
    """What a stage runtime receives: token ids or text (tokenized by the stage), a multimodal payload,
    the sampling parameters for this stage (``None``: the engine's defaults)."""

    token_ids: tuple[int, ...] = ()
    multimodal: Mapping[str, Any] | None = None
    max_tokens: int | None = None
    text: str | None = None
    sampling: Sampling | None = None
    #: a streaming-input session: more input follows through the runtime's ``feed_input``
    streaming: bool = False

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
