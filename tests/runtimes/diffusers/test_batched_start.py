"""Requests admitted at the same step share one text-encoder call (``Denoiser.start_many``), and samples at the same
timestep of a DDIM schedule share one scheduler ``step``: each image still equals its stock batch-1 call within
1e-4, the shared DDIM step gives the same bits as one step per sample, and a request started alone is encoded by
the pipeline's own ``encode_prompt``, to the bit."""

from __future__ import annotations

import numpy as np
import torch

from omni_runtime.runtimes.diffusers._denoise import Denoiser
from omni_runtime.runtimes.diffusers._request import ImageRequest
from tests.runtimes.diffusers.drive import MIXED, TOLERANCE, Ask, Driven, stage

TOGETHER = [*MIXED, Ask("a dog", None, 7.5, 3, 21), Ask("a tree", "", 7.5, 3, 22), Ask("red cat", None, 2.0, 3, 23)]


def _run(asks: list[Ask]) -> dict[int, np.ndarray]:
    driven = Driven(stage(max_running=len(asks)))
    for req_id, ask in enumerate(asks):
        driven.add(req_id, ask)
    driven.run()
    assert driven.judged_clean() == []
    return driven.images()


def test_requests_admitted_together_each_equal_their_stock_batch_1_result(stock_image):
    images = _run(TOGETHER)
    assert sorted(images) == list(range(len(TOGETHER)))
    for req_id, ask in enumerate(TOGETHER):
        reference = stock_image(ask.prompt, ask.negative, ask.guidance, ask.steps, ask.seed, ask.size)
        assert float(np.abs(images[req_id] - reference).max()) <= TOLERANCE, req_id


def test_the_shared_ddim_step_is_bit_identical_to_one_step_per_sample(monkeypatch):
    together = _run(TOGETHER)
    monkeypatch.setattr(Denoiser, "_stateless", staticmethod(lambda scheduler: False))  # a deepcopy, a step each
    apart = _run(TOGETHER)
    assert all(np.array_equal(together[i], apart[i]) for i in together)


def test_a_request_started_alone_is_encoded_by_encode_prompt_to_the_bit():
    denoiser = Driven().runtime.denoiser
    ask = Ask("green tree on a mountain", "dark", 6.0, 3, 2024)
    (sample,) = denoiser.start_many([ask_request(ask)])
    assert not isinstance(sample, Exception)
    with torch.no_grad():
        positive, negative = denoiser.pipe.encode_prompt(ask.prompt, denoiser.device, 1, True, ask.negative)
    assert torch.equal(sample.embeds, torch.cat([negative, positive]))


def test_embeddings_encoded_together_agree_with_each_request_alone():
    denoiser = Driven().runtime.denoiser
    requests = [ask_request(ask) for ask in TOGETHER]
    together = denoiser.start_many(requests)
    for request, sample in zip(requests, together, strict=True):
        assert not isinstance(sample, Exception)
        (alone,) = denoiser.start_many([request])
        assert not isinstance(alone, Exception)
        assert sample.embeds.shape == alone.embeds.shape
        assert float((sample.embeds - alone.embeds).abs().max()) <= 1e-5


def ask_request(ask: Ask) -> ImageRequest:
    """Return ``ask`` as the runtime's ``ImageRequest``."""
    return ImageRequest(ask.prompt, ask.negative, ask.guidance, ask.steps, ask.seed, ask.size, ask.size)
