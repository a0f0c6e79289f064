"""The running batch as device tensors (``_batch``): one vectorized DDIM step for samples at different timesteps of
different schedules gives each the same bits as its own scheduler's ``step``, whoever joins and leaves; and the UNet
call's row buckets for CUDA graphs (``_graphs``), with the graphs checked on CUDA only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_fsm import ControlMethod
from omni_runtime.runtimes.diffusers import Denoiser, default_device, make_denoiser
from omni_runtime.runtimes.diffusers._graphs import bucket
from tests.runtimes.diffusers.drive import Ask, Driven, stage

#: different step counts, CFG and not, joining at different steps and one aborted mid-way
STAGGERED = [Ask("red cat", "dark", 5.0, 4, 31), Ask("sun", None, 1.0, 2, 32), Ask("old house", None, 7.5, 3, 33),
             Ask("blue sea under the moon", "bright sky", 3.0, 5, 34), Ask("large dog", None, 7.5, 3, 35)]  # fmt: skip


def _staggered() -> dict[int, np.ndarray]:
    driven = Driven(stage(max_running=4))
    for req_id, ask in enumerate(STAGGERED):
        driven.add(req_id, ask)
        driven.step()
        if req_id == 2:
            driven.abort(900, 0)  # leaves the batch with three steps of four done
    driven.run()
    assert driven.judged_clean() == []
    return driven.images()


def test_the_vectorized_ddim_step_gives_each_sample_its_own_schedulers_bits(monkeypatch):
    shared = _staggered()
    monkeypatch.setattr(Denoiser, "_stateless", staticmethod(lambda scheduler: False))  # a deepcopy, a step each
    apart = _staggered()
    assert sorted(shared) == sorted(apart) == [1, 2, 3, 4]
    assert all(np.array_equal(shared[i], apart[i]) for i in shared)


@pytest.mark.parametrize(("rows", "padded"), [(1, 1), (2, 2), (3, 4), (8, 8), (9, 16), (17, 24), (32, 32),
                                              (33, 48), (128, 128), (129, 144)])  # fmt: skip
def test_a_unet_call_is_padded_to_its_row_bucket(rows, padded):
    assert bucket(rows) == padded


cuda_only = pytest.mark.skipif(default_device() != "cuda", reason="CUDA graphs: on a CUDA device only")


@cuda_only
def test_a_graph_replay_gives_the_eager_calls_bits_and_a_padded_one_within_float_rounding():
    from omni_runtime.runtimes.diffusers._graphs import CallGraphs

    denoiser = Driven().runtime.denoiser
    unet = denoiser.pipe.unet
    for rows in (2, 6):  # 2 fills its bucket; 6 is padded to 8
        generator = torch.Generator(device="cuda").manual_seed(rows)
        latents = torch.randn(rows, 4, 8, 8, device="cuda", generator=generator)
        timesteps = torch.randint(0, 1000, (rows,), device="cuda", generator=generator)
        embeds = torch.randn(rows, 77, 32, device="cuda", generator=generator)
        with torch.no_grad():
            eager = unet(latents, timesteps, encoder_hidden_states=embeds, return_dict=False)[0]
            graphs = CallGraphs(lambda x, t, e: unet(x, t, encoder_hidden_states=e, return_dict=False)[0])
            inputs = [latents, timesteps, embeds]
            graph = graphs._capture(graphs._key(inputs), inputs)
            replayed = graph(latents, timesteps, embeds).clone()
        if rows == bucket(rows):
            assert torch.equal(replayed, eager)
        else:
            assert float((replayed - eager).abs().max()) <= 1e-5


@cuda_only
def test_the_graphs_are_dropped_when_the_weights_move_and_the_image_stays_the_same():
    ask = Ask("green tree on a mountain", "dark", 6.0, 3, 2024)
    plain = Driven()
    plain.add(1, ask)
    plain.run()
    denoiser = make_denoiser(device="cuda")  # its own weights: no other replica keeps them awake
    driven = Driven(denoiser=denoiser)
    assert denoiser.prepare(16, 16, 2) > 0  # launch-bound at 16x16: graphs kept
    driven.add(1, ask)
    driven.step()
    driven.control(10, ControlMethod.SLEEP)  # level 1 on CUDA: the weights go to the host, the graphs with them
    assert denoiser.weights == "offloaded" and denoiser._graphs is not None and len(denoiser._graphs) == 0
    driven.step()
    driven.control(11, ControlMethod.WAKE_UP)
    driven.run()
    assert np.array_equal(driven.images()[1], plain.images()[1])
    assert driven.judged_clean() == []
