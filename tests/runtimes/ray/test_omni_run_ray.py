"""``omni-run --runtime ray``: with no cluster set, a local one-node Ray that has the custom resources the example
pipeline's placements ask for; the checked workload runs with each replica in an actor and its trace checks clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.runtimes.real_engines import require

require("ray", "pip install 'ray==2.60.0' (the ray extra)")

from omni_fsm.cli import main as omni_fsm  # noqa: E402
from omni_runtime.core.pipeline import example_pipeline, load_pipeline  # noqa: E402
from omni_runtime.hosting.ray import custom_resources  # noqa: E402

OMNI_RUN = [sys.executable, "-m", "omni_runtime.apps.cli"]  #: ``omni-run``, whatever console scripts are installed


def test_the_example_pipelines_placements_need_custom_resources() -> None:
    pipeline = load_pipeline(example_pipeline("ray_pipeline"))
    needs = custom_resources(pipeline)
    assert needs and all(amount > 0 for amount in needs.values())  # else a plain local Ray would place it anyway


def test_omni_run_on_ray_starts_a_local_ray_with_the_placements_resources(tmp_path: Path) -> None:
    trace = tmp_path / "ray.trace.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([*OMNI_RUN, "--runtime", "ray", "--requests", "8", "--concurrency", "4", "--trace",
                           str(trace), "--no-progress"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "invariants: all" in done.stdout and "checks hold" in done.stdout
    assert omni_fsm(["check", str(trace)]) == 0
