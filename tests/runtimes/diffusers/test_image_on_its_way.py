"""A finished sample's image is decoded without waiting for the device while other samples run: its ``Finished``
comes at the first step boundary at which the image reached the host (at once on the CPU; held back here by a
``Decoding`` that is not ready), its slot is free meanwhile, an abort in between ends it with no image, a pause in
wait mode waits for it, and a replica with nothing else to run waits for the images instead of spinning."""

from __future__ import annotations

import numpy as np

from omni_fsm import ControlMethod
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.diffusers._denoise import Decoding
from tests.runtimes.diffusers.drive import Ask, Driven, stage


def _slow_device(monkeypatch, polls: int) -> None:
    """Make each image reach the host only at its ``polls``-th readiness check."""
    seen: dict[int, int] = {}

    def ready(self: Decoding) -> bool:
        seen[id(self)] = seen.get(id(self), 0) + 1
        return seen[id(self)] >= polls

    monkeypatch.setattr(Decoding, "ready", ready)


def test_the_finish_waits_for_the_image_and_the_slot_is_free_meanwhile(monkeypatch):
    plain = Driven()
    plain.add(1, Ask("red cat", steps=2))
    plain.run()
    _slow_device(monkeypatch, polls=3)
    driven = Driven(stage(max_running=2))
    driven.add(1, Ask("red cat", steps=2))
    driven.add(2, Ask("blue sea", steps=5, seed=2))
    driven.step(2)  # request 1's two steps: its image on its way, request 2 still running
    assert [type(r) for r in driven.of(1)] == [rp.StatusChanged, rp.Output, rp.Output]
    driven.add(3, Ask("old house", steps=2, seed=3))
    driven.step()  # not there yet; request 3 took the free slot
    assert rp.Finished not in [type(r) for r in driven.of(1)]
    assert [type(r) for r in driven.of(3)] == [rp.StatusChanged, rp.Output]
    driven.run()
    assert np.array_equal(driven.images()[1], plain.images()[1])
    assert sorted(driven.images()) == [1, 2, 3]
    assert driven.judged_clean() == []


def test_an_idle_replica_waits_for_the_images_instead_of_spinning(monkeypatch):
    _slow_device(monkeypatch, polls=1000)
    driven = Driven()
    driven.add(1, Ask("red cat", steps=2))
    driven.step(2)  # its last step: nothing else runs, so the image is waited for in that step
    assert [type(r) for r in driven.of(1)][-1] is rp.Finished
    assert driven.runtime.busy() is False


def test_an_abort_while_the_image_is_on_its_way_ends_the_request_without_it(monkeypatch):
    _slow_device(monkeypatch, polls=3)
    driven = Driven()
    driven.add(1, Ask("red cat", steps=2))
    driven.add(2, Ask("blue sea", steps=5, seed=2))
    driven.step(2)
    driven.abort(500, 1)
    driven.run()
    assert [type(r) for r in driven.of(1)] == [rp.StatusChanged, rp.Output, rp.Output, rp.AbortResult]
    assert sorted(driven.images()) == [2]
    assert driven.judged_clean() == []


def test_a_pause_in_wait_mode_is_answered_once_the_image_is_delivered(monkeypatch):
    _slow_device(monkeypatch, polls=3)
    driven = Driven()
    driven.add(1, Ask("red cat", steps=2))
    driven.add(2, Ask("blue sea", steps=5, seed=2))
    driven.step(2)
    driven.control(10, ControlMethod.PAUSE_SCHEDULER, "wait")
    driven.step()
    assert rp.RpcResult(10, True) not in driven.reports
    driven.run()
    finished = [i for i, r in enumerate(driven.reports) if isinstance(r, rp.Finished)]
    assert len(finished) == 2 and driven.reports.index(rp.RpcResult(10, True)) > max(finished)
    assert driven.judged_clean() == []
