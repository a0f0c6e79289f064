"""The kit's pytest plugin shows the failing steps: when a runtime breaks its protocol, the report gives Hypothesis'
step sequence that broke it (each rule the state machine ran, in order), not the violation's one line alone,
whatever the Hypothesis profile of the run says (a quiet profile included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
QUIET = """from hypothesis import Verbosity, settings

settings.register_profile("quiet", verbosity=Verbosity.quiet)
settings.load_profile("quiet")
"""


def _run_plugin(directory: Path, factory: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "omni_runtime.testing", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(directory), f"--omni-runtime={factory}", str(directory)],
                          capture_output=True, text=True, env=env, cwd=directory, timeout=240)  # fmt: skip


@pytest.mark.parametrize("profile", ["default", "quiet"])
def test_a_failure_shows_hypothesis_failing_steps_after_the_violation(tmp_path: Path, profile: str) -> None:
    if profile == "quiet":
        (tmp_path / "conftest.py").write_text(QUIET, encoding="utf-8")
    done = _run_plugin(tmp_path, "faulty_runtimes:SwallowedRpcError")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    violation = out.index("runtime faulty_runtimes:SwallowedRpcError breaks its protocol: ORCH-INV-205")
    steps = re.findall(r"^state\.(\w+)\(", out[violation:], re.M)
    assert steps[0] == "start" and steps[-1] == "teardown", out
    assert "control" in steps, out  # the call the runtime answered wrongly is among them
    assert out.index("Failing test case: <state machine>") > violation
    assert "state = RuntimeConformance[SwallowedRpcError]()" in out
    assert "examples derandomized" in out.split("state.teardown()")[-1]  # how to draw them again comes last
