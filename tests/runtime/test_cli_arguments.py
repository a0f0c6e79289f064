"""omni-run refuses a bad option with an argparse error (exit 2, no traceback); WorkloadOptions refuses it too."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_fsm import StageKind
from omni_runtime.apps.cli import main
from omni_runtime.apps.workload import WorkloadOptions, max_replica_deaths, sim_config
from omni_runtime.core.pipeline import simple_pipeline
from omni_runtime.errors import ConfigError

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "pipeline.toml")  # three stages of two replicas


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replica-deaths", "-1"], "argument --replica-deaths: must be at least 0, got -1"),
        (["--replica-deaths", "4"], "argument --replica-deaths: at most 3 for"),
        (["--replica-deaths", "x"], "argument --replica-deaths: expected an integer, got 'x'"),
        (["--requests", "-1"], "argument --requests: must be at least 0, got -1"),
        (["--requests", "1e3"], "argument --requests: expected an integer, got '1e3'"),
        (["--concurrency", "0"], "argument --concurrency: must be at least 1, got 0"),
        (["--abort-rate", "1.5"], "argument --abort-rate: must be within [0, 1], got 1.5"),
        (["--abort-rate", "-0.1"], "argument --abort-rate: must be within [0, 1], got -0.1"),
        (["--abort-rate", "nan"], "argument --abort-rate: must be within [0, 1], got nan"),
        (["--fault-rate", "2"], "argument --fault-rate: must be within [0, 1], got 2"),
        (["--fault-rate", "lots"], "argument --fault-rate: expected a number within [0, 1], got 'lots'"),
        (["--parallel-rate", "-1"], "argument --parallel-rate: must be within [0, 1], got -1"),
        (["--companion-rate", "inf"], "argument --companion-rate: must be within [0, 1], got inf"),
        (["--parallel-rate", "0.6", "--companion-rate", "0.5"], "--parallel-rate + --companion-rate must be at most 1"),
        (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["--loop", "busy"], "argument --loop: invalid choice: 'busy'"),
        (["--runtime", "tpu"], "argument --runtime: invalid choice: 'tpu'"),
    ],
)
def test_bad_option_is_an_argparse_error(tmp_path, capsys, args, message):
    trace = tmp_path / "t.jsonl"
    with pytest.raises(SystemExit) as info:
        main([EXAMPLE, "--no-progress", "--trace", str(trace), *args])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"omni-run: error: {message}" in err and "Traceback" not in err
    assert not trace.exists()  # nothing ran


def _replicas_lost(capsys: pytest.CaptureFixture[str]) -> int:
    return int(capsys.readouterr().out.split("replicas_lost=")[1].split()[0].rstrip(","))


@pytest.mark.parametrize("deaths", ["0", "3"])
def test_replica_deaths_within_bounds_run(tmp_path, capsys, deaths):
    args = [EXAMPLE, "--requests", "200", "--no-progress", "--trace", str(tmp_path / "t.jsonl")]
    assert main([*args, "--replica-deaths", deaths]) == 0
    assert _replicas_lost(capsys) == int(deaths)  # 200 requests reach every planned death


def test_default_replica_death_needs_a_stage_of_several_replicas(tmp_path, capsys):
    single = tmp_path / "one.toml"
    single.write_text("[[stages]]\nkind = 'ar'\nfinal = true\n")
    for pipeline, lost in ((str(single), 0), (EXAMPLE, 1)):  # the default: one death, where a stage can lose one
        assert main([pipeline, "--requests", "200", "--no-progress", "--trace", str(tmp_path / "t.jsonl")]) == 0
        assert _replicas_lost(capsys) == lost, pipeline


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"replica_deaths": -1}, "WorkloadOptions: replica_deaths: must be at least 0, got -1"),
        ({"requests": -1}, "WorkloadOptions: requests: must be at least 0, got -1"),
        ({"requests": 1.5}, "WorkloadOptions: requests: must be an integer, got 1.5"),
        ({"concurrency": 0}, "WorkloadOptions: concurrency: must be at least 1, got 0"),
        ({"abort_rate": 1.1}, "WorkloadOptions: abort_rate: must be within [0, 1], got 1.1"),
        ({"fault_rate": float("nan")}, "WorkloadOptions: fault_rate: must be within [0, 1], got nan"),
        ({"parallel_rate": True}, "WorkloadOptions: parallel_rate: must be a number, got True"),
        ({"parallel_rate": 0.6, "companion_rate": 0.6},
         "WorkloadOptions: parallel_rate + companion_rate: must be at most 1"),
        ({"seed": "0"}, "WorkloadOptions: seed: must be an integer, got '0'"),
        ({"loop": "busy"}, "WorkloadOptions: loop: must be 'event' or 'poll', got 'busy'"),
    ],
)
def test_bad_workload_options_raise_config_error(fields, why):
    with pytest.raises(ConfigError) as info:
        WorkloadOptions(**fields)
    assert why in str(info.value)


def test_replica_deaths_are_bounded_by_the_pipeline():
    pipeline = simple_pipeline([StageKind.AR, StageKind.DIFFUSION], replicas=2)
    assert max_replica_deaths(pipeline) == 2
    assert len(sim_config(pipeline, WorkloadOptions(replica_deaths=2)).replica_deaths) == 2
    assert len(sim_config(pipeline, WorkloadOptions()).replica_deaths) == 1  # the default: one
    with pytest.raises(ConfigError, match=r"replica_deaths: at most 2 for pipeline 'pipeline' .*, got 3$"):
        sim_config(pipeline, WorkloadOptions(replica_deaths=3))
    assert sim_config(simple_pipeline([StageKind.AR]), WorkloadOptions()).replica_deaths == ()


def test_a_trace_path_that_cannot_be_written_is_one_line_and_writes_nothing(tmp_path, capsys):
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    assert main([EXAMPLE, "--no-progress", "--requests", "2", "--trace", str(blocked)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"omni-run: {blocked}: ") and "no new trace written" in err
    assert "Traceback" not in err and list(blocked.iterdir()) == []
