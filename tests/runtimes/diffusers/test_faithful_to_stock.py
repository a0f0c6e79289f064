"""Each image the runtime makes equals the stock ``StableDiffusionPipeline`` call for that request alone (the same
prompt, negative prompt, guidance, steps and generator), within 1e-4 max-abs on the images; a seeded sample run
alone is the same to the bit every run; batching, arrival order and an abort with resubmission change nothing; an
abort at any step boundary leaves no output of the aborted sample and the rest of its batch as it would have been."""

from __future__ import annotations

import numpy as np
import pytest

from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.diffusers import default_device
from tests.runtimes.diffusers.drive import MIXED, TOLERANCE, Ask, Driven, stage


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    return float(np.abs(a - b).max())


@pytest.mark.parametrize("ask", MIXED, ids=["cfg-negative", "cfg-unconditional", "no-cfg", "24px"])
def test_a_request_alone_equals_the_stock_call(ask, stock_image):
    driven = Driven()
    driven.add(1, ask)
    driven.run()
    image = driven.images()[1]
    assert image.shape == (ask.size, ask.size, 3)
    reference = stock_image(ask.prompt, ask.negative, ask.guidance, ask.steps, ask.seed, ask.size)
    assert _max_abs(image, reference) <= TOLERANCE
    assert driven.judged_clean() == []


def test_a_seeded_sample_alone_is_bit_identical_across_runs():
    ask = Ask("green tree on a mountain", "dark", 6.0, 3, 2024)
    runs = []
    for _ in range(2):
        driven = Driven()
        driven.add(7, ask)
        driven.run()
        runs.append(driven.images()[7])
    assert np.array_equal(runs[0], runs[1])


def test_another_seed_gives_another_image(stock_image):
    driven = Driven()
    driven.add(1, Ask("red cat", seed=1))
    driven.add(2, Ask("red cat", seed=2))
    driven.run()
    images = driven.images()
    assert _max_abs(images[1], images[2]) > 0.1  # the comparisons above are not between near-constant images
    assert _max_abs(images[1], stock_image("red cat", seed=1)) <= TOLERANCE


def test_staggered_arrivals_in_one_batch_each_equal_their_stock_batch_1_result(stock_image):
    driven = Driven(stage(max_running=4))
    for req_id, ask in enumerate(MIXED):  # one arrives per step: each joins the samples already running
        driven.add(req_id, ask)
        driven.step()
    driven.run()
    images = driven.images()
    assert sorted(images) == [0, 1, 2, 3]
    for req_id, ask in enumerate(MIXED):
        reference = stock_image(ask.prompt, ask.negative, ask.guidance, ask.steps, ask.seed, ask.size)
        assert _max_abs(images[req_id], reference) <= TOLERANCE, req_id
    sample_steps = sum(ask.steps for ask in MIXED)
    # one UNet call per step for the 16px samples, one more for the 24px one: fewer calls than sample-steps
    assert driven.runtime.unet_calls <= sample_steps - 3
    assert driven.judged_clean() == []


def test_an_aborted_then_resubmitted_sample_reproduces_its_uninterrupted_result():
    ask, other = Ask("small bird over the river", "dark", 4.0, 4, 99), Ask("large dog", seed=5)
    alone = Driven()
    alone.add(1, ask)
    alone.run()
    uninterrupted = alone.images()[1]

    driven = Driven()
    driven.add(1, ask)
    driven.add(2, other)
    driven.step(2)  # two of its four steps done
    driven.abort(500, 1)
    assert driven.of(1)[-1] == rp.AbortResult(500, 1, True)
    driven.step()
    driven.add(3, ask)  # resubmitted: starts again from its seed
    driven.run()
    assert [type(r) for r in driven.of(1)] == [rp.StatusChanged, rp.Output, rp.Output, rp.AbortResult]
    assert sorted(driven.images()) == [2, 3]  # the aborted sample made no image; the other and the resubmission did
    assert _max_abs(driven.images()[3], uninterrupted) <= TOLERANCE
    assert driven.judged_clean() == []


TRIO = [Ask("red cat", "dark", 5.0, 3, 21), Ask("blue sea under the moon", None, 7.5, 3, 22),
        Ask("sun", None, 1.0, 3, 23)]  # fmt: skip
ABORTED = 1  #: the middle one of the three


@pytest.fixture(scope="module")
def trio_uninterrupted():
    """Return the three samples' images when they run together to the end (the batch without the abort)."""
    driven = Driven()
    for req_id, ask in enumerate(TRIO):
        driven.add(req_id, ask)
    driven.run()
    return driven.images()


@pytest.mark.parametrize("boundary", range(TRIO[0].steps + 1))
def test_an_abort_at_any_step_boundary_leaves_no_output_and_the_rest_of_the_batch_unchanged(
        boundary, trio_uninterrupted):  # fmt: skip
    driven = Driven()
    for req_id, ask in enumerate(TRIO):
        driven.add(req_id, ask)
    driven.step(boundary)  # ``boundary`` steps done (0: before the first; the last: all three finished)
    driven.abort(500, ABORTED)
    driven.add(9, TRIO[ABORTED])  # its retry, at once: it starts again from its seed beside the two others
    driven.run()
    kinds = [type(r) for r in driven.of(ABORTED)]
    images = driven.images()
    if boundary < TRIO[ABORTED].steps:  # aborted in flight: its steps until then, then the answer, nothing else
        assert kinds == ([rp.StatusChanged] if boundary else []) + [rp.Output] * boundary + [rp.AbortResult]
        assert ABORTED not in images
    else:  # it finished in the step before the abort: the abort is answered, nothing follows it
        assert kinds == [rp.StatusChanged, *[rp.Output] * boundary, rp.Finished, rp.AbortResult]
        assert np.array_equal(images[ABORTED], trio_uninterrupted[ABORTED])
    assert driven.of(ABORTED)[-1] == rp.AbortResult(500, ABORTED, True)
    for req_id in (0, 2):
        assert _max_abs(images[req_id], trio_uninterrupted[req_id]) <= TOLERANCE, req_id
        if default_device() == "cpu":  # measured on the CPU (1 thread): the same bits at every boundary
            assert np.array_equal(images[req_id], trio_uninterrupted[req_id]), req_id
    # the retry ran beside other samples than the first time: within float rounding (measured: 6e-7 at most)
    assert _max_abs(images[9], trio_uninterrupted[ABORTED]) <= TOLERANCE
    assert driven.judged_clean() == []
