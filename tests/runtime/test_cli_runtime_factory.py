"""``omni-run --runtime package.module:factory`` loads a runtime factory from the current directory; a name that does
not import, is missing or is no factory, and a factory that raises or makes no runtime, exit 2 with one line and
write no trace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from omni_runtime.apps.cli import main

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")  # thinker, talker (AR), image (diffusion)
#: a module in the current directory, with factories good and bad
MODULE = '''
from omni_fsm import StageKind
from omni_runtime import ConfigError
from omni_runtime.runtimes.sim import sim_replica

NUMBER = 3

def ar_only(spec, stage, replica, rpc_fails=False):
    if spec.kind is not StageKind.AR:
        raise ConfigError(f"stage {stage} is {spec.kind.value}: AR only")
    return sim_replica(spec, stage, replica)

def makes_a_string(spec, stage, replica, rpc_fails=False):
    return "a runtime"

def raises(spec, stage, replica, rpc_fails=False):
    raise RuntimeError("no engine here")

def two_arguments(spec, stage):
    return None
'''


@pytest.fixture
def in_module_dir(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    (tmp_path / "my_runtimes.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the current directory on it
    monkeypatch.delitem(sys.modules, "my_runtimes", raising=False)
    return tmp_path


@pytest.mark.parametrize(("runtime", "message"), [
    ("no_such_module:factory",
     "omni-run: --runtime=no_such_module:factory: cannot import no_such_module: ModuleNotFoundError: "
     "No module named 'no_such_module'"),
    ("my_runtimes:missing", "omni-run: --runtime=my_runtimes:missing: module my_runtimes has no 'missing'"),
    ("my_runtimes:NUMBER",
     "omni-run: --runtime=my_runtimes:NUMBER: module my_runtimes has a int, not a callable, 'NUMBER'"),
    ("my_runtimes:two_arguments",
     "omni-run: --runtime=my_runtimes:two_arguments: two_arguments is not a runtime factory: it cannot be called as "
     "two_arguments(spec, stage, replica, rpc_fails) (too many positional arguments)"),
    (":factory", "omni-run: --runtime wants package.module:factory, got ':factory'"),
    ("my_runtimes:ar_only", "omni-run: --runtime=my_runtimes:ar_only: stage 2 is diffusion: AR only"),
    ("my_runtimes:makes_a_string",
     "omni-run: --runtime=my_runtimes:makes_a_string: factory(<stage 0 'thinker'>, 0, 0, False) made a str, not a "
     "StageRuntime (it lacks bind, add_request, abort_requests, control, step, shutdown)"),
    ("my_runtimes:raises",
     "omni-run: --runtime=my_runtimes:raises: the factory raised RuntimeError: no engine here"),
])  # fmt: skip
def test_a_bad_runtime_factory_exits_2_with_one_line(in_module_dir, capsys, runtime, message):
    assert main([EXAMPLE, "--runtime", runtime, "--no-progress", "--trace", "t.jsonl"]) == 2
    captured = capsys.readouterr()
    assert captured.err == message + "\n" and captured.out == ""
    assert not (in_module_dir / "t.jsonl").exists()


def test_a_factory_from_the_current_directory_runs_the_checked_workload(in_module_dir, capsys):
    ar_pipeline = in_module_dir / "ar.toml"
    ar_pipeline.write_text("[[stages]]\nkind = 'ar'\n\n[[stages]]\nkind = 'ar'\nfinal = true\nreplicas = 2\n"
                           "adapter = 'ar2ar'\n")  # fmt: skip
    args = [str(ar_pipeline), "--runtime", "my_runtimes:ar_only", "--requests", "30", "--no-progress"]
    assert main([*args, "--trace", "t.jsonl"]) == 0
    out = capsys.readouterr().out
    assert "omni-run: 30 requests on pipeline" in out and "invariants: all" in out, out
    assert (in_module_dir / "t.jsonl").exists()
