"""Text at a stage's edges: the tokenizer a stage brings, and incremental detokenization with stop strings.

A stage owns its tokenizer (two stages may use different ones), so text is turned into token ids
where the stage takes a request (``stage_tokens``) and token ids into text where the stage makes
them (``IncrementalText``). Stop strings are found on that text as vLLM's frontend finds them: in
the text decoded so far, each time new tokens arrive; the text stops just before the stop string.
Pure: no tokenizer library is imported here; a stage passes any object with ``encode`` and ``decode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from omni_runtime.adapters import StageInput


@runtime_checkable
class Tokenizer(Protocol):
    """What a stage's tokenizer offers: text to token ids and back (``decode`` drops special tokens)."""

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (with the special tokens the model's prompts start with)."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Return the text of ``token_ids``."""


def stage_tokens(stage_input: StageInput, tokenizer: Tokenizer | None) -> tuple[int, ...]:
    """Return the token ids a stage runs ``stage_input`` on: its ids, else its text tokenized by the stage.

    Raises ``ValueError`` for text given to a stage that has no tokenizer.
    """
    if stage_input.text is None or stage_input.token_ids:
        return stage_input.token_ids
    if tokenizer is None:
        raise ValueError("this stage has no tokenizer: give it token ids, not text")
    return tuple(tokenizer.encode(stage_input.text))


class IncrementalText:
    """One request's output text as its tokens arrive, and the first stop string that appears in it.

    ``add(token_ids)`` returns the new text (never past a stop string); ``stop_reason`` is the stop string
    found (``None`` while none is). The whole output is decoded each time, as vLLM's slow path does: a word
    piece that only makes sense with the next token is never emitted half-done.
    """

    __slots__ = ("_ids", "_longest", "_stops", "_tokenizer", "stop_reason", "text")

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._stops = tuple(s for s in stop if s)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._ids: list[int] = []
        self.text = ""  #: the text emitted so far
        self.stop_reason: str | None = None

    def add(self, token_ids: Sequence[int]) -> str:
        """Return the text the new ``token_ids`` add (empty once a stop string was found)."""
        if self.stop_reason is not None:
            return ""
        self._ids += token_ids
        full = self._tokenizer.decode(self._ids)
        if self._stops:
            start = max(0, len(self.text) - self._longest + 1)  # a stop string may straddle the old text's end
            hits = [(at, s) for s in self._stops if (at := full.find(s, start)) >= 0]
            if hits:
                at, self.stop_reason = min(hits)
                full = full[:at]
        if not full.startswith(self.text):  # a decoder that rewrites earlier text: emit only what extends it
            return ""
        delta = full[len(self.text):]
        self.text = full
        return delta
