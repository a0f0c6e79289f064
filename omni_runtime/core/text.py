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

from omni_runtime.core.prompts import StageInput


@runtime_checkable
class Tokenizer(Protocol):
    """What a stage's tokenizer offers: text to token ids and back (``decode`` drops special tokens)."""

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (with the special tokens the model's prompts start with)."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Return the text of ``token_ids``."""


def stage_tokens(stage_input: StageInput, tokenizer: Tokenizer | None, continuation: bool = False) -> tuple[int, ...]:
    """Return the token ids a stage runs ``stage_input`` on: its ids, else its text tokenized by the stage.

    ``continuation``: the text continues a prompt (a later part of a streamed input), so the special tokens a
    prompt starts with (what the tokenizer puts before any text) are left out. Raises ``ValueError`` for text
    given to a stage that has no tokenizer.
    """
    if stage_input.text is None or stage_input.token_ids:
        return stage_input.token_ids
    if tokenizer is None:
        raise ValueError("this stage has no tokenizer: give it token ids, not text")
    ids = tuple(tokenizer.encode(stage_input.text))
    if continuation:
        start = tuple(tokenizer.encode(""))
        if start and ids[: len(start)] == start:
            ids = ids[len(start):]
    return ids


class IncrementalText:
    """One request's output text as its tokens arrive, and the first stop string that appears in it.

    ``add(token_ids)`` returns the new text (never past a stop string); ``stop_reason`` is the stop string
    found (``None`` while none is). The output is decoded after the last few prompt tokens and the text they
    make is cut off, as vLLM's detokenizer does, so the output reads as the prompt's continuation (a word-level
    tokenizer puts a space before its first word); the whole output is decoded each time, so a word piece that
    only makes sense with the next token is never emitted half-done.
    """

    __slots__ = ("_context", "_ids", "_longest", "_stops", "_tokenizer", "stop_reason", "text")

    #: prompt tokens decoded before the output (vLLM's initial incremental detokenization offset)
    CONTEXT = 5

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = (), prompt: Sequence[int] = ()) -> None:
        self._tokenizer = tokenizer
        self._stops = tuple(s for s in stop if s)
        self._longest = max((len(s) for s in self._stops), default=0)
        tail = list(prompt[-self.CONTEXT:])
        self._context = len(tokenizer.decode(tail)) if tail else 0
        self._ids: list[int] = tail
        self.text = ""  #: the text emitted so far
        self.stop_reason: str | None = None

    def add(self, token_ids: Sequence[int], final: bool = False) -> str:
        """Return the text the new ``token_ids`` add (empty once a stop string was found).

        Until the output is ``final`` (its last tokens), text that may still turn out to be the start of a stop
        string (the last ``len(longest stop) - 1`` characters) and a character still incomplete (a trailing
        U+FFFD) are held back, as vLLM's detokenizer holds them: the text never has to be taken back.
        """
        if self.stop_reason is not None:
            return ""
        self._ids += token_ids
        full = self._tokenizer.decode(self._ids)[self._context:]
        if self._stops:
            start = max(0, len(self.text) - self._longest + 1)  # a stop string may straddle the emitted text's end
            hits = [(at, s) for s in self._stops if (at := full.find(s, start)) >= 0]
            if hits:
                at, self.stop_reason = min(hits)
                full, final = full[:at], True
        if not final:
            end = len(full.rstrip("\ufffd"))
            full = full[: max(len(self.text), end - self._longest + 1) if self._longest else end]
        if not full.startswith(self.text):  # a decoder that rewrites earlier text: emit only what extends it
            return ""
        delta = full[len(self.text):]
        self.text = full
        return delta
