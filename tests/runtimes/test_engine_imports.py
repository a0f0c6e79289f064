"""Each runtime package is the only place that imports its engine; a missing engine fails under CI=true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.import_graph import imported_roots

ROOT = Path(__file__).resolve().parents[2]
VLLM, DIFFUSERS = ("omni_runtime", "runtimes", "vllm"), ("omni_runtime", "runtimes", "diffusers")
#: engine -> the packages allowed to import it (torch and transformers: only as the engines' own dependencies)
OWNERS = {"vllm": {VLLM}, "torch": {VLLM, DIFFUSERS}, "transformers": {VLLM, DIFFUSERS}, "diffusers": {DIFFUSERS},
          "ray": {("omni_runtime", "hosting", "ray")}}


def test_only_the_runtime_package_imports_its_engine():
    sources = [p for package in ("omni_fsm", "omni_runtime") for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(sources) > 50
    for path in sources:
        parts = path.relative_to(ROOT).parts
        for engine in imported_roots(path) & set(OWNERS):
            assert parts[:3] in OWNERS[engine], f"{path.relative_to(ROOT)} imports {engine}"


def test_the_check_sees_every_import_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import vllm.config\nfrom torch import nn\nimportlib.import_module('vllm')\n")
    assert imported_roots(source) == {"vllm", "torch"}


def test_a_missing_engine_skips_locally_and_fails_under_ci(tmp_path):
    test = tmp_path / "test_needs_engine.py"
    test.write_text("from tests.runtimes.real_engines import require\nrequire('no_such_engine_xyz', 'pip install it')\n"
                    "def test_x():\n    pass\n")  # fmt: skip
    for ci, outcome in (("", "1 skipped"), ("true", "1 error")):
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                              str(test)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CI": ci})  # fmt: skip
        assert outcome in run.stdout, run.stdout[-2000:]
        if ci:
            assert "CI=true: no_such_engine_xyz is not installed" in run.stdout
