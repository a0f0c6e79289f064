"""The tiny random-weight Llama the tests, demo and benchmarks use, built locally (no model hub).

``write_tiny_llama_config`` writes what vLLM's ``ModelConfig`` reads (``config.json``): enough for the
scheduler-level runtime, which runs no model. Nothing here imports vLLM, torch or transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the tiny model's shape: hidden 64, 2 layers, vocabulary 1,000 (ids 0-3: unk, bos, eos, pad)
TINY_LLAMA: dict[str, object] = {
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
