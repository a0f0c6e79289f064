"""Real engines in the tests: a missing one skips locally and fails under ``CI=true``; caches stay in a temp dir."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.unavailable import unavailable

_ROOT = Path(__file__).parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

_CACHE = Path(tempfile.mkdtemp(prefix="omni-fsm-engines-"))
#: what vLLM on these machines needs: no hub, no telemetry, a small KV cache, in-process engines, caches here
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1", "HF_HOME": str(_CACHE / "hf"), "VLLM_CACHE_ROOT": str(_CACHE / "vllm"),
    "TORCHINDUCTOR_CACHE_DIR": str(_CACHE / "inductor"), "VLLM_LOGGING_LEVEL": "ERROR",
}  # fmt: skip
for key, value in ENGINE_ENV.items():
    os.environ.setdefault(key, value)


def require(module: str, install: str) -> None:
    """Skip the calling test module when ``module`` is missing, except under ``CI=true``, where that fails."""
    if importlib.util.find_spec(module) is not None:
        return
    unavailable(f"{module} is not installed ({install}; `make test` installs it)", module_level=True)


class RecordsReports:
    """Mixin for a runtime class: it also keeps, in ``reports``, every report it hands to its sink (on the side that
    bound it, after whatever transport the runtime crosses)."""

    reports: list[Any]

    def bind(self, sink: Any) -> None:
        self.reports = []

        def record(report: Any) -> None:
            self.reports.append(report)
            sink(report)

        super().bind(record)  # type: ignore[misc]
