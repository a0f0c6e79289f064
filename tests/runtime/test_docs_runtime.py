"""docs/runtime.md's complete runtime works as written: the conformance kit passes it, ``omni-run --runtime
mod:factory`` runs the checked workload on it and ``omni-fsm check`` judges the trace clean; and the same runtime
without its ``SCHEDULED`` report fails the kit, naming the rule."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from omni_fsm import StageKind
from omni_runtime.testing import ConformanceError, check_runtime

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "runtime.md"
BIN = Path(sys.executable).parent
OMNI_RUN = [sys.executable, "-m", "omni_runtime.apps.cli"]  #: ``omni-run``, whatever console scripts are installed
#: the doc's Python blocks, each by its first line
BLOCKS = {code.splitlines()[0]: code for code in re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.S)}
RUNTIME = BLOCKS["# echo_runtime.py"]
SCHEDULED = "            self.report(req, rp.StatusChanged, rp.Status.SCHEDULED)  # before its first Output\n"


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, code: str):  # type: ignore[no-untyped-def]
    """Write ``code`` as module ``name`` in ``tmp_path`` and import it."""
    (tmp_path / f"{name}.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_the_docs_runtime_passes_the_conformance_kit(tmp_path, monkeypatch):
    echo = _module(tmp_path, monkeypatch, "echo_runtime", RUNTIME)
    check_runtime(echo.factory, kinds=(StageKind.AR,), derandomize=True)


def test_the_docs_runtime_without_scheduled_fails_the_kit_naming_the_rule(tmp_path, monkeypatch):
    assert RUNTIME.count(SCHEDULED) == 1  # the line the broken copy drops
    broken = _module(tmp_path, monkeypatch, "echo_unscheduled", RUNTIME.replace(SCHEDULED, ""))
    with pytest.raises(ConformanceError, match=r"^AR-INV-001 \(ar_status_follows_upstream\) for \d+: Output seq 0 in "
                                               r"state WAITING: the lifecycle has no row"):  # fmt: skip
        check_runtime(broken.factory, kinds=(StageKind.AR,), derandomize=True, max_examples=200, shrink=False)


def test_omni_run_runs_the_docs_runtime_by_its_factory_and_the_trace_checks_clean(tmp_path):
    (tmp_path / "echo_runtime.py").write_text(RUNTIME, encoding="utf-8")
    pipeline = str(ROOT / "examples" / "vllm_pipeline.toml")  # two AR stages, the second of two replicas
    run = subprocess.run([*OMNI_RUN, pipeline, "--runtime", "echo_runtime:factory", "--requests", "40",
                          "--no-progress", "--trace", "echo.jsonl"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "invariants: all" in run.stdout and "finished/stop=" in run.stdout, run.stdout
    echoed = re.findall(r"^text: '(.*)' -> '(.*)'$", run.stdout, re.M)
    assert echoed and all(prompt == text for prompt, text in echoed), run.stdout  # two echo stages: the prompt
    check = subprocess.run([str(BIN / "omni-fsm"), "check", "echo.jsonl"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0 and "40 requests, 0 violations" in check.stdout, check.stdout + check.stderr


def test_the_docs_embedding_example_runs_on_the_docs_runtime(tmp_path, monkeypatch):
    _module(tmp_path, monkeypatch, "echo_runtime", RUNTIME)
    exec(compile(BLOCKS["# using echo_runtime"], str(DOC), "exec"), {})
