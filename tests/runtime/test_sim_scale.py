"""The simulator steps in time linear in the work it does, not in the requests it holds: a step reads the slot
holders and the head of its queue, never every request (issue 29: 100,000 prompts took over 300 s)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from omni_fsm import StageKind
from omni_runtime import StageInput, simple_pipeline
from omni_runtime.core import protocol as rp
from omni_runtime.runtimes.sim import SimConfig, sim_replica


class Unscannable(dict):  # type: ignore[type-arg]
    """The replica's requests, refusing to be walked whole once it holds any: a step that scans them fails."""

    def _scan(self, *args, **kwargs):
        if self:
            raise AssertionError("a step walked every request the replica holds")
        return iter(())

    __iter__ = values = items = keys = _scan


@pytest.mark.parametrize("kind", [StageKind.AR, StageKind.DIFFUSION])
@pytest.mark.parametrize("faults", ["calm", "legal"])
def test_a_step_never_walks_every_request_held(kind: StageKind, faults: str) -> None:
    spec = simple_pipeline([kind], max_running=2).stages[0]
    config = SimConfig() if faults == "calm" else attrs.evolve(SimConfig.legal(0.3), rpc_error=0)
    replica = sim_replica(spec, 0, 0, 3, config)
    reports: list[rp.Report] = []
    replica.bind(reports.append)
    replica.requests = Unscannable()
    assert replica.running() == 0  # the replica's view of its requests is the new dict's
    for rid in range(300):
        replica.add_request(rid, StageInput(token_ids=(1, 2, 3)))
    steps = 0
    while replica.step():
        steps += 1
        assert replica.running() <= 2
        assert steps < 10_000
    ends = [r.req_id for r in reports if isinstance(r, rp.Finished | rp.Failed)]
    assert sorted(ends) == list(range(300))  # every request ran to its end, one at a time per slot


def test_the_scale_bench_runs_both_sizes_and_prints_its_summary_line_last() -> None:
    """bench/sim_scale.py, small sizes: every prompt finishes, each round is printed, the summary line is last."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "sim_scale.py"
    run = subprocess.run([sys.executable, str(bench), "--small", "50", "--large", "500", "--repeats", "2"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["round 1", "round 1", "round 2", "round 2"]
    assert re.fullmatch(r"sim_scale: n_small=50 n_large=500 s_per_10k_small=\d+\.\d{3} s_per_10k_large=\d+\.\d{3} "
                        r"ratio=\d+\.\d\d", lines[-1]), lines[-1]  # fmt: skip
