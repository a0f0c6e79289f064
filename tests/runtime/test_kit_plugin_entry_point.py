"""The conformance kit is a registered pytest plugin (entry point ``pytest11``): ``--omni-runtime`` works without
``-p``, ``-p omni_runtime.testing`` as documented still works, and a run without ``--omni-runtime`` is unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

SIM = "--omni-runtime=omni_runtime.testing:sim_factory"


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest in ``cwd``, outside the checkout, with plugins autoloaded as a user's run has them."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
                                                             "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)  # fmt: skip


def test_the_kit_is_registered_under_its_module_name() -> None:
    """Its hooks module is the plugin; its name is the kit's, so ``-p omni_runtime.testing`` finds it loaded."""
    kits = [ep for ep in entry_points(group="pytest11") if ep.value == "omni_runtime.pytest_hooks"]
    assert [ep.name for ep in kits] == ["omni_runtime.testing"], "reinstall the package: pip install -e ."


def test_omni_runtime_option_works_without_dash_p(tmp_path: Path) -> None:
    done = _pytest(tmp_path, SIM)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout


def test_dash_p_as_documented_still_works(tmp_path: Path) -> None:
    # the entry point's name is the module's, so `-p` finds the plugin registered instead of registering it twice
    done = _pytest(tmp_path, "-p", "omni_runtime.testing", SIM)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout


def test_a_run_without_the_option_collects_only_its_own_tests(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    pass\n", encoding="utf-8")
    done = _pytest(tmp_path, "--collect-only")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_mine.py::test_mine" in done.stdout and "omni-runtime" not in done.stdout, done.stdout


def test_the_plugin_can_be_switched_off(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-p", "no:omni_runtime.testing", SIM)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR and "unrecognized arguments" in done.stderr, done.stderr


def test_the_registered_plugin_loads_where_hypothesis_is_not_installed():
    """Every pytest run loads the plugin: its hooks import no Hypothesis (the ``dev`` extra) until ``--omni-runtime``
    asks for the kit, so pytest starts for a project that installed omni-fsm alone."""
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "import omni_runtime.pytest_hooks as hooks\n"
            "assert callable(hooks.pytest_addoption) and 'omni_runtime.testing.kit' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
