"""The simulator's tokenizer: token id ``i`` is the word ``t<i>``; any other word is an id drawn from its bytes."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

VOCAB = 32000  #: ids the simulated model samples from


class SimTokenizer:
    """Word-level and lossless on its own output: ``encode(decode(ids)) == ids`` (no special tokens)."""

    __slots__ = ()

    def encode(self, text: str) -> list[int]:
        """Return one id per whitespace-separated word (``t17`` is 17; other words hash into the vocabulary)."""
        return [_id(word) for word in text.split()]

    def decode(self, token_ids: Sequence[int]) -> str:
        """Return the words of ``token_ids``, separated by spaces."""
        return " ".join(f"t{i}" for i in token_ids)


def _id(word: str) -> int:
    if word[:1] == "t" and word[1:].isdigit() and int(word[1:]) < VOCAB:
        return int(word[1:])
    return zlib.crc32(word.encode()) % VOCAB
