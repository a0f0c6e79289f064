"""The conformance kit passes on the diffusers runtime (the tiny pipeline: every example's replica shares its
weights), with its workers fine and with them raising in every control RPC; it fails no request the kit gives it
(``may_fail=False``: a ``Failed`` end fails the kit)."""

from __future__ import annotations

import pytest

from omni_fsm import StageKind
from omni_runtime.runtimes.diffusers import kit_factory
from omni_runtime.testing import check_runtime

pytestmark = pytest.mark.covers("ORCH-INV-101", "ORCH-INV-202", "ORCH-INV-209")


def test_the_kit_passes_on_the_diffusers_runtime():
    check_runtime(kit_factory, max_examples=6, kinds={StageKind.DIFFUSION}, derandomize=True, may_fail=False)
