"""What a client submits and what a stage is given: ``Prompt`` (with its ``Sampling``) and ``StageInput``.

Checked when made: a bad field raises ``TypeError`` / ``ValueError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


def _token_ids(owner: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is None and owner == "Prompt":
            return
        if not isinstance(value, tuple):
            raise TypeError(f"{owner}.{attribute.name} must be a tuple of ints, not {value!r} "
                            "(a list of ints is taken too)")  # fmt: skip
        bad = next(((i, t) for i, t in enumerate(value) if isinstance(t, bool) or not isinstance(t, int) or t < 0),
                   None)  # fmt: skip
        if bad is not None:
            index, item = bad
            if isinstance(item, int) and not isinstance(item, bool):  # a token id is never negative (as vLLM's)
                raise ValueError(f"{owner}.{attribute.name} must be token ids, ints >= 0, not {value!r:.80}: "
                                 f"item {index} is {item}")  # fmt: skip
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
