"""The tiny random-weight Llama the tests, demo and benchmarks use, built locally (no model hub).

``write_tiny_llama_config`` writes what vLLM's ``ModelConfig`` reads (``config.json``): enough for the
scheduler-level runtime, which runs no model. ``build_tiny_llama`` writes the whole model: that config,
random weights (seeded: the same bytes every time) and an offline word-level tokenizer whose
vocabulary is ``w0 ... w969``, ``a ... z`` and the four specials. torch and transformers are imported
only by ``build_tiny_llama``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the tiny model's shape: hidden 64, 2 layers, vocabulary 1,000 (ids 0-3: unk, bos, eos, pad)
TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
    "head_dim": 32, "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
    "tie_word_embeddings": False, "torch_dtype": "float32", "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "rope_theta": 10000.0,
}  # fmt: skip
EOS_TOKEN_ID = 2


def write_tiny_llama_config(directory: str | Path) -> Path:
    """Write the tiny Llama's ``config.json`` into ``directory`` (made if missing); return the directory."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    target = path / "config.json"
    text = json.dumps(TINY_LLAMA, indent=1, sort_keys=True)
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return path


#: the tokenizer's vocabulary: the specials (ids 0-3), then ``w0``..``w969``, then ``a``..``z``
SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")
WORDS = tuple(f"w{i}" for i in range(1000 - len(SPECIALS) - 26)) + tuple(chr(ord("a") + i) for i in range(26))


_TINY_IDS = {token: i for i, token in enumerate(SPECIALS + WORDS)}


class TinyWords:
    """The tiny model's tokenizer in plain Python (the same vocabulary and rules as its ``tokenizer.json``): what the
    scheduler-level runtime, which loads no model, detokenizes with. ``encode`` starts with ``<s>`` as the model's
    does; ``decode`` drops the specials and joins words with spaces."""

    __slots__ = ()

    def encode(self, text: str) -> list[int]:
        return [1, *(_TINY_IDS.get(word, 0) for word in text.split())]

    def decode(self, token_ids: Sequence[int]) -> str:
        words = SPECIALS + WORDS
        return " ".join(words[i] for i in token_ids if len(SPECIALS) <= i < len(words))


class FileTokenizer:
    """A model directory's ``tokenizer.json`` (Hugging Face ``tokenizers``), as a stage's ``Tokenizer``."""

    __slots__ = ("_tok",)

    def __init__(self, model_dir: str | Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(token_ids), skip_special_tokens=True))


def build_tiny_llama(directory: str | Path, seed: int = 0) -> Path:
    """Write the tiny Llama (config, seeded random weights, offline tokenizer) into ``directory``; return it.

    Idempotent: a directory that already holds the model (``model.safetensors`` and ``tokenizer.json``) is
    left as it is.
    """
    path = write_tiny_llama_config(directory)
    if (path / "model.safetensors").exists() and (path / "tokenizer.json").exists():
        return path
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",  # type: ignore[no-untyped-call]
                                   eos_token="</s>", pad_token="<pad>")  # fmt: skip
    fast.model_max_length = int(TINY_LLAMA["max_position_embeddings"])
    config = {k: v for k, v in TINY_LLAMA.items() if k not in ("architectures", "model_type")}
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config))  # type: ignore[no-untyped-call]
    model.save_pretrained(str(path))
    fast.save_pretrained(str(path))
    write_tiny_llama_config(path)  # save_pretrained rewrote it: the one checked-in shape wins
    return path
