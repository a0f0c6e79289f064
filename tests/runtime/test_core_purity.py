"""The orchestrator's core is sans-IO: importing the package or its core loads no asyncio."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_and_its_core_loads_no_asyncio():
    code = ("import sys, omni_runtime, omni_runtime.core.orchestrator, omni_runtime.engines.engine; "
            "print(sorted(m for m in ('asyncio', 'socket', 'torch', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_asyncio_driver_is_still_reachable_from_the_package_root():
    from omni_runtime import AsyncEngine
    from omni_runtime.engines.async_engine import AsyncEngine as direct

    assert AsyncEngine is direct
