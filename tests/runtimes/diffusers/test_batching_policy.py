"""Step-level batching (the default) admits a waiting request at the next step boundary while slots are free;
request-level batching (``DiffusersOptions(batching="request")``, the benchmark's baseline) starts the waiting
requests, up to ``max_running``, only once the running batch has finished."""

from __future__ import annotations

import pytest

from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.diffusers import DiffusersOptions
from tests.runtimes.diffusers.drive import Ask, Driven, stage


def _scheduled(driven: Driven) -> list[int]:
    return [r.req_id for r in driven.reports if isinstance(r, rp.StatusChanged)]


def test_step_level_batching_admits_a_request_at_the_next_step():
    driven = Driven(stage(max_running=4))
    driven.add(1, Ask("red cat", steps=3))
    driven.step()
    driven.add(2, Ask("blue sea", steps=3, seed=2))
    driven.step()
    assert _scheduled(driven) == [1, 2]
    driven.run()
    assert sorted(driven.images()) == [1, 2]
    assert driven.judged_clean() == []


def test_request_level_batching_starts_waiting_requests_only_when_the_batch_has_finished():
    driven = Driven(stage(max_running=2), options=DiffusersOptions(batching="request"))
    driven.add(1, Ask("red cat", steps=3))
    driven.step()
    for req_id in (2, 3, 4):
        driven.add(req_id, Ask("blue sea", steps=2, seed=req_id))
    driven.step(2)  # request 1 takes its last step: it finishes, nothing joined it
    assert _scheduled(driven) == [1] and sorted(driven.images()) == [1]
    driven.step()  # the next batch: the two first waiting ones, up to max_running
    assert _scheduled(driven) == [1, 2, 3]
    driven.run()
    assert _scheduled(driven) == [1, 2, 3, 4] and sorted(driven.images()) == [1, 2, 3, 4]
    assert driven.runtime.unet_calls == 3 + 2 + 2
    assert driven.judged_clean() == []


def test_a_batching_policy_the_runtime_does_not_know_is_refused():
    with pytest.raises(ValueError, match="batching"):
        DiffusersOptions(batching="continuous")
