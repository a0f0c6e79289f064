"""How the diffusers replica reports a request's life (judged as the engine takes it): scheduled, one output per
denoising step, the finish with the image; a bad input fails its request alone; ``max_running`` caps the batch;
control RPCs hold, abort or drain the samples and are answered (a worker's error propagated)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_fsm import ControlMethod, StageKind, StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.errors import ConfigError
from omni_runtime.runtimes.diffusers import WORDS, Denoiser, build_pipeline, diffusers_factory, make_denoiser
from tests.runtimes.diffusers.drive import Ask, Driven, stage


def _kinds(reports):
    return [type(r).__name__ for r in reports]


def test_a_request_is_scheduled_then_reports_each_step_then_finishes_with_its_image():
    driven = Driven()
    driven.add(4, Ask("red cat", steps=3))
    driven.run()
    reports = driven.of(4)
    assert reports[0] == rp.StatusChanged(4, 0, rp.Status.SCHEDULED)
    assert reports[1:4] == [rp.Output(4, seq, 1) for seq in (1, 2, 3)]
    finished = reports[4]
    assert isinstance(finished, rp.Finished) and finished.seq == 4 and finished.stop is StopKind.STOP
    assert finished.payload["size"] == (16, 16) and finished.payload["steps"] == 3
    assert finished.payload["image"].shape == (16, 16, 3)
    assert driven.judged_clean() == []


def test_the_stage_steps_are_the_default_and_the_request_may_ask_for_others():
    driven = Driven(stage(steps=2))
    driven.add(1, StageInput(text="red cat", multimodal={"size": (16, 16)}))
    driven.add(2, StageInput(text="red cat", multimodal={"size": (16, 16), "steps": 4}))
    driven.run()
    assert [len([r for r in driven.of(i) if isinstance(r, rp.Output)]) for i in (1, 2)] == [2, 4]


def test_a_bad_input_fails_that_request_alone(stock_image):
    driven = Driven()
    driven.add(1, Ask("red cat", size=12))  # not a multiple of 8: the stock pipeline refuses it too
    driven.add(2, StageInput(text="red cat", multimodal={"guidance_scale": "high"}))
    driven.add(3, Ask("blue sea", seed=3))
    driven.run()
    assert _kinds(driven.of(1)) == ["Failed"] and "size must be (height, width)" in driven.of(1)[0].error
    assert _kinds(driven.of(2)) == ["Failed"] and "guidance_scale" in driven.of(2)[0].error
    assert np.abs(driven.images()[3] - stock_image("blue sea", seed=3)).max() <= 1e-4
    assert driven.judged_clean() == []


def test_the_prior_tokens_and_the_cfg_companion_output_are_read_as_words(stock_image):
    driven = Driven()
    prior, companion = (1, 4 + len(WORDS)), (5,)  # ids past the vocabulary wrap around
    mm = {"prior": prior, "negative": (companion,), "size": (16, 16)}
    driven.add(1, StageInput(multimodal=mm))
    driven.run()
    finished = driven.of(1)[-1]
    assert (finished.payload["prompt"], finished.payload["negative_prompt"]) == ("red cat", "dog")
    seed = finished.payload["seed"]  # none given: drawn from the request id
    assert np.abs(finished.payload["image"] - stock_image("red cat", "dog", seed=seed)).max() <= 1e-4


def test_max_running_caps_the_samples_denoised_together():
    driven = Driven(stage(max_running=2, steps=2))
    for req_id in range(4):
        driven.add(req_id, StageInput(text="red cat", multimodal={"size": (16, 16)}))
    driven.step()
    scheduled = [r.req_id for r in driven.reports if isinstance(r, rp.StatusChanged)]
    assert scheduled == [0, 1]
    driven.run()
    assert sorted(driven.images()) == [0, 1, 2, 3]
    assert driven.runtime.unet_calls == 4  # two batches of two, two steps each
    assert driven.judged_clean() == []


def test_pause_holds_the_samples_and_resume_finishes_them_unchanged():
    plain = Driven()
    plain.add(1, Ask("red cat", steps=3, seed=8))
    plain.run()
    driven = Driven()
    driven.add(1, Ask("red cat", steps=3, seed=8))
    driven.step()
    driven.control(10, ControlMethod.PAUSE_SCHEDULER)
    driven.add(2, Ask("blue sea", steps=2))
    driven.step(3)
    assert driven.runtime.unet_calls == 1  # nothing ran while paused, nothing was admitted
    assert _kinds(driven.of(2)) == []
    driven.control(11, ControlMethod.RESUME_SCHEDULER)
    driven.run()
    answers = [r for r in driven.reports if isinstance(r, rp.RpcResult)]
    assert answers == [rp.RpcResult(10, True), rp.RpcResult(11, True)]
    # request 2 joined its batch after the resume: the same image within float rounding of batched rows
    assert np.abs(driven.images()[1] - plain.images()[1]).max() <= 1e-4
    assert driven.judged_clean() == []


def test_sleep_holds_the_samples_until_wake_up(stock_image):
    driven = Driven()
    denoiser = driven.runtime.denoiser
    awake = denoiser.parameter_bytes()
    driven.add(1, Ask("red cat", steps=2))
    driven.control(10, ControlMethod.SLEEP)  # level 1: on the CPU nothing to offload to, the weights stay
    driven.step(3)
    assert driven.runtime.unet_calls == 0
    assert denoiser.parameter_bytes() == awake
    driven.control(11, ControlMethod.WAKE_UP)
    driven.run()
    assert driven.stock_difference(1, stock_image) <= 1e-4  # finished, and its image the stock pipeline's
    assert driven.judged_clean() == []


def test_sleep_level_2_frees_the_weights_once_every_replica_sharing_them_sleeps_and_wake_up_restores_them(capsys):
    denoiser = make_denoiser()  # its own weights: no other test's replica shares them
    first, second = Driven(denoiser=denoiser), Driven(denoiser=denoiser)
    ask = Ask("red cat", "dark", 5.0, steps=3, seed=8)
    first.add(1, ask)
    first.run()
    before = first.images()[1]
    awake = denoiser.parameter_bytes()
    reference = build_pipeline()  # what the weights were built as

    first.add(2, ask)
    first.step()  # one of its three steps done: held while asleep
    first.control(10, ControlMethod.SLEEP, level=2)
    assert denoiser.parameter_bytes() == awake  # the second replica is awake: nothing freed
    second.control(20, ControlMethod.SLEEP, level=2)
    asleep = denoiser.parameter_bytes()
    assert asleep < awake / 10
    assert all(p.is_meta for p in denoiser.pipe.unet.parameters())
    first.step(3)
    second.step(3)
    assert first.runtime.unet_calls == 4  # the first request's three steps and one of the second's, nothing since

    first.control(11, ControlMethod.WAKE_UP)  # one replica awake: it needs the weights back
    woken = denoiser.parameter_bytes()
    assert woken == awake
    for name in ("unet", "vae", "text_encoder"):
        restored, built = getattr(denoiser.pipe, name).state_dict(), getattr(reference, name).state_dict()
        assert restored.keys() == built.keys()
        assert all(torch.equal(restored[k], built[k]) for k in built), name
    second.control(21, ControlMethod.WAKE_UP)
    first.add(3, ask)
    first.run()
    second.run()
    images = first.images()
    assert np.array_equal(images[2], before)  # denoised across the sleep: the same bits
    assert np.array_equal(images[3], before)  # started after the wake-up: the same bits
    assert first.judged_clean() == [] and second.judged_clean() == []
    with capsys.disabled():
        print(f"\nparameter bytes: awake {awake}, asleep (level 2) {asleep}, after wake-up {woken}")


def test_a_sleep_level_the_runtime_does_not_offer_is_refused_and_changes_nothing(stock_image):
    denoiser = make_denoiser()
    driven = Driven(denoiser=denoiser)
    awake = denoiser.parameter_bytes()
    with pytest.raises(ValueError, match="sleep level 3"):
        denoiser.sleep(driven.runtime, 3)
    bare = Denoiser(build_pipeline(), "cpu")  # no rebuild: level 2 would lose the weights for good
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        bare.sleep(driven.runtime, 2)
    assert denoiser.parameter_bytes() == awake and bare.parameter_bytes() == awake
    driven.add(1, Ask("red cat", steps=1))
    driven.run()
    assert driven.stock_difference(1, stock_image) <= 1e-4  # finished, and its image the stock pipeline's


def test_pause_in_abort_mode_ends_every_request_in_flight_as_aborted():
    driven = Driven()
    driven.add(1, Ask("red cat", steps=3))
    driven.step()
    driven.add(2, Ask("blue sea", steps=3))  # waiting, not started yet
    driven.control(10, ControlMethod.PAUSE_SCHEDULER, "abort")
    assert _kinds(driven.of(1))[-1] == "Aborted" and _kinds(driven.of(2)) == ["Aborted"]
    driven.add(3, Ask("sun", steps=2))  # added while paused: waits for the resume
    driven.step(2)
    assert driven.of(3) == []
    driven.control(11, ControlMethod.RESUME_SCHEDULER)
    driven.run()
    assert sorted(driven.images()) == [3]
    assert driven.judged_clean() == []


def test_pause_in_wait_mode_is_answered_once_the_running_samples_finish():
    driven = Driven(stage(max_running=1))
    driven.add(1, Ask("red cat", steps=3))
    driven.step()
    driven.add(2, Ask("blue sea", steps=2))
    driven.control(10, ControlMethod.PAUSE_SCHEDULER, "wait")
    driven.step(5)
    answer = next(i for i, r in enumerate(driven.reports) if isinstance(r, rp.RpcResult))
    finish = next(i for i, r in enumerate(driven.reports) if isinstance(r, rp.Finished))
    assert finish < answer and driven.reports[answer] == rp.RpcResult(10, True)
    assert driven.of(2) == []  # not admitted: the replica is paused now
    driven.control(11, ControlMethod.RESUME_SCHEDULER)
    driven.run()
    assert sorted(driven.images()) == [1, 2]
    assert driven.judged_clean() == []


@pytest.mark.parametrize("method", list(ControlMethod), ids=lambda m: m.value)
def test_a_worker_error_in_a_control_rpc_is_the_answer_and_changes_nothing(method, stock_image):
    driven = Driven(rpc_fails=True)
    driven.add(1, Ask("red cat", steps=2))
    driven.control(10, method, *(("abort",) if method is ControlMethod.PAUSE_SCHEDULER else ()))
    driven.run()
    answer = next(r for r in driven.reports if isinstance(r, rp.RpcResult))
    assert not answer.ok and f"{method.value} raised in a worker" in answer.error
    assert driven.stock_difference(1, stock_image) <= 1e-4  # finished, and its image the stock pipeline's
    assert driven.judged_clean() == []


def test_an_abort_of_a_request_that_ended_is_answered_ok_and_nothing_follows():
    driven = Driven()
    driven.add(1, Ask("red cat", steps=1))
    driven.run()
    driven.abort(500, 1)
    driven.run()
    assert _kinds(driven.of(1)) == ["StatusChanged", "Output", "Finished", "AbortResult"]
    assert driven.of(1)[-1].ok
    assert driven.judged_clean() == []


def test_nothing_is_reported_after_shutdown():
    driven = Driven()
    driven.add(1, Ask("red cat", steps=3))
    driven.step()
    count = len(driven.reports)
    driven.runtime.shutdown()
    driven.runtime.shutdown()
    assert driven.runtime.step() is False
    driven.runtime.abort_requests(500, [1])
    assert len(driven.reports) == count


def test_the_factory_refuses_an_ar_stage():
    with pytest.raises(ConfigError, match="the diffusers runtime runs diffusion stages only"):
        diffusers_factory()(StageSpec("text", StageKind.AR, final=True), 0, 0, False)
