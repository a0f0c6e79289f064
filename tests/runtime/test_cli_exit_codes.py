"""omni-run's exit codes: a run that fails (3) or whose replica stalls (4) is told from bad input (2); the trace so
far is kept without its end marker, and ``omni-fsm check --allow-incomplete`` judges it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import omni_fsm.cli
from omni_runtime.apps import cli
from omni_runtime.apps.cli import BAD_INPUT, RUN_FAILED, STALLED, build_parser, main

PIPELINE = """
[[stages]]
kind = "ar"
final = true
max_tokens = 3
"""
#: a module in the current directory: runtimes that stall or whose step raises once given a request
MODULE = '''
from omni_runtime.runtimes.sim import sim_replica

class Stalls:
    def __init__(self, spec, stage, replica):
        self.inner, self.held = sim_replica(spec, stage, replica), False
    def bind(self, sink):
        self.inner.bind(sink)
    def add_request(self, req_id, stage_input):
        self.held = True
    def abort_requests(self, abort_id, req_ids):
        pass
    def control(self, call_id, method, level, tags):
        self.inner.control(call_id, method, level, tags)
    def step(self):
        self.inner.step()
        return self.held
    def shutdown(self):
        pass

class Breaks(Stalls):
    def step(self):
        if self.held:
            raise RuntimeError("broken")
        return self.inner.step()

def stalls(spec, stage, replica, rpc_fails=False):
    return Stalls(spec, stage, replica)

def breaks(spec, stage, replica, rpc_fails=False):
    return Breaks(spec, stage, replica)
'''


@pytest.fixture
def run_dir(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    (tmp_path / "stalling.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "one.toml").write_text(PIPELINE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the current directory on it
    monkeypatch.delitem(sys.modules, "stalling", raising=False)
    return tmp_path


def _judged_incomplete(trace: Path) -> None:
    assert omni_fsm.cli.main(["check", str(trace)]) == 4  # no end marker
    assert omni_fsm.cli.main(["check", "--allow-incomplete", str(trace)]) == 0


@pytest.mark.parametrize(("factory", "code", "cause"), [
    ("stalling:stalls", STALLED, "replica 0/0 is lost: it stalled: busy but no report for 0.3 s (stall_timeout_s)"),
    ("stalling:breaks", RUN_FAILED, "replica 0/0 is lost: its step() raised RuntimeError: broken"),
])  # fmt: skip
def test_a_run_that_stalls_or_fails_has_its_own_code_and_keeps_its_trace_so_far(run_dir, capsys, factory, code,
                                                                                 cause) -> None:  # fmt: skip
    trace = run_dir / "run.jsonl"
    assert main(["one.toml", "--runtime", factory, "--requests", "3", "--concurrency", "1", "--stall-timeout", "0.3",
                 "--no-progress", "--trace", str(trace)]) == code  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("omni-run: the run failed: ") and cause in err and err.count("\n") == 1, err
    assert err.endswith(f"(the trace so far is in {trace}, incomplete: check it with omni-fsm check "
                        f"--allow-incomplete {trace})\n")  # fmt: skip
    _judged_incomplete(trace)


def test_bad_input_still_exits_2_and_writes_no_trace(run_dir, capsys) -> None:
    assert main(["missing.toml", "--trace", "run.jsonl"]) == BAD_INPUT
    assert not (run_dir / "run.jsonl").exists()


def test_the_exit_codes_are_in_the_help_and_the_stall_timeout_option_parses() -> None:
    parser = build_parser()
    assert "exit codes:" in parser.format_help() and "  4    a replica stalled" in parser.format_help()
    assert parser.parse_args([]).stall_timeout == 300.0
    assert parser.parse_args(["--stall-timeout", "0"]).stall_timeout is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--stall-timeout", "-1"])


def test_a_trace_the_free_disk_cannot_hold_is_refused_in_one_line_before_the_run(tmp_path, capsys,
                                                                                 monkeypatch) -> None:  # fmt: skip
    example = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")
    trace = tmp_path / "t.jsonl"
    monkeypatch.setattr(cli, "_free_bytes", lambda folder: 75 * 10**9)  # 75 GB free
    ran = []
    monkeypatch.setattr(cli, "_run", lambda *args: ran.append(args) or 0)  # a run would take days: none starts
    assert main([example, "--requests", "100000000", "--trace", str(trace), "--no-progress"]) == BAD_INPUT
    assert capsys.readouterr().err == (f"omni-run: the trace of 100000000 requests would take about 308.6 GB and "
                                       f"{tmp_path} has 75.0 GB free; run fewer --requests, put --trace elsewhere, "
                                       f"or --force\n")  # fmt: skip
    assert not ran and not trace.exists()
    assert main([example, "--requests", "100000000", "--trace", str(trace), "--no-progress", "--force"]) == 0
    assert len(ran) == 1  # --force goes on
    assert main([example, "--requests", "1000", "--trace", str(trace), "--no-progress"]) == 0 and len(ran) == 2
