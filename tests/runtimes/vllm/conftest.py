"""The tiny model, built once for every vLLM test of the session (locally, with random weights: no hub)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from omni_runtime.runtimes.vllm.tiny import build_tiny_llama  # vLLM's package: imported once a test needs it

    return str(build_tiny_llama(tmp_path_factory.mktemp("tiny-llama")))
