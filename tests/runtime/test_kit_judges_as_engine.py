"""The conformance kit judges a runtime as the engine does, and says what it judged.

- A report the lifecycle has no row for (an ``Output`` before ``SCHEDULED``) fails the kit under AR-INV-001,
  naming the report and the state; under the engine the request's terminal error says the same.
- A runtime that raises out of a call fails the kit under the rule that call's answer belongs to, with the
  calls that led to it (not a bare ``KeyError``).
- The pytest plugin runs the same examples every time, with no example database, unless
  ``--omni-runtime-seed`` asks for drawn ones; a failure says which.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from faulty_runtimes import _Wrapper
from hypothesis.database import ExampleDatabase

import omni_runtime.testing.kit as kit
from omni_fsm import Outcome, StageKind
from omni_runtime import Engine, Orchestrator, Prompt, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.runtimes.sim import SimConfig, sim_replica
from omni_runtime.testing import ConformanceError, RawStreamChecker, check_runtime, make_machine, parse_seed
from omni_runtime.testing.item import ConformanceItem

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
AR = StageSpec(name="s", kind=StageKind.AR, final=True, replicas=1, max_running=1, max_tokens=8, steps=1)
NO_ROW = r"^AR-INV-001 \(ar_status_follows_upstream\) for \d+: "


class _Sim(_Wrapper):
    """A calm simulated replica (no faults but RPC errors when asked); subclasses bend one behaviour."""

    def __init__(self, spec, stage, replica, rpc_fails=False):
        self._wrap(sim_replica(spec, stage, replica, 1, SimConfig(rpc_error=float(rpc_fails))))


class SkipsScheduled(_Sim):
    """Never reports ``SCHEDULED``: its outputs come while the request is, for the engine, still queued. Its stream
    is otherwise clean: in sequence (renumbered), one finish, truthful aborts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.skipped: dict[int, int] = {}

    def filter(self, report):
        if isinstance(report, rp.StatusChanged) and report.status is rp.Status.SCHEDULED:
            self.skipped[report.req_id] = self.skipped.get(report.req_id, 0) + 1
            return
        if isinstance(report, rp.RequestReport):
            report = attrs.evolve(report, seq=report.seq - self.skipped.get(report.req_id, 0))
        self.sink(report)


class AbortByKey(_Sim):
    """Aborts by ``del requests[req_id]``: the abort of a request it no longer holds raises ``KeyError``."""

    def abort_requests(self, abort_id, req_ids):
        for req_id in req_ids:
            del self.inner.requests[req_id]
            self.sink(rp.AbortResult(abort_id, req_id, True))


class StepBreaks(_Sim):
    """Raises out of ``step()`` once it holds a request (a bug of one request taking the replica down)."""

    def step(self):
        if self.inner.requests:
            raise RuntimeError("scheduler invariant broken")
        return super().step()


# -- a report the engine has no row for ---------------------------------------------------------------


def test_kit_fails_a_runtime_that_never_reports_scheduled_naming_the_rule():
    with pytest.raises(ConformanceError, match=NO_ROW + r"Output seq 0 in state WAITING: the lifecycle has no row "
                                                        r"for StageOutput there"):  # fmt: skip
        check_runtime(SkipsScheduled, max_examples=20, shrink=False, derandomize=True)


def test_the_rejected_report_is_named_with_its_request_state_and_event():
    machine = make_machine(SkipsScheduled)()
    machine.start(AR)
    machine.add(req_id=5, tokens=[1, 2])
    machine.step(steps=1)
    with pytest.raises(ConformanceError) as caught:
        machine.stream_is_clean()
    assert str(caught.value) == (
        "AR-INV-001 (ar_status_follows_upstream) for 5: Output seq 0 in state WAITING: the lifecycle has no row for "
        "StageOutput there, so the engine would reject it (Rejected) and fail the request")  # fmt: skip


def test_the_raw_checks_alone_pass_that_stream():
    """What the kit missed before it judged as the engine: the stream breaks none of the raw checks."""
    raw = RawStreamChecker()
    runtime = SkipsScheduled(AR, 0, 0)
    runtime.bind(raw)
    raw.added(5)
    runtime.add_request(5, StageInput((1, 2)))
    while runtime.step():
        pass
    assert raw.at_end() == [] and 5 in raw.finished


@pytest.mark.parametrize("kind", list(StageKind), ids=lambda kind: kind.value)
def test_the_simulator_passes_the_kit_judging_as_the_engine(kind):
    check_runtime(kit.sim_factory, max_examples=15, derandomize=True, kinds={kind})


def test_under_the_engine_the_request_fails_naming_the_rejected_report():
    pipeline = simple_pipeline([StageKind.AR])
    engine = Engine(pipeline, [[SkipsScheduled(pipeline.stages[0], 0, 0)]])
    terminal = engine.generate(Prompt((1, 2)))[-1]
    engine.shutdown()
    assert terminal.outcome is Outcome.FAILED and terminal.reason == "error"
    assert terminal.error == ("runtime report Output (StageOutput) rejected at stage 0: the lifecycle has no row "
                              "for it in WAITING")  # fmt: skip


def test_under_the_engine_a_later_stage_names_itself():
    pipeline = simple_pipeline([StageKind.AR, StageKind.AR])
    runtimes = [[sim_replica(pipeline.stages[0], 0, 0, 1)], [SkipsScheduled(pipeline.stages[1], 1, 0)]]
    engine = Engine(pipeline, runtimes)
    terminal = engine.generate(Prompt((1, 2)))[-1]
    engine.shutdown()
    assert terminal.outcome is Outcome.FAILED
    assert terminal.error == ("runtime report Output (StageOutput) rejected at stage 1: the lifecycle has no row "
                              "for it in WAITING")  # fmt: skip


def test_the_orchestrator_names_a_rejected_status_in_the_terminal_error():
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    rid, _ = orch.submit(Prompt((1,)))
    out = orch.report(0, 0, rp.StatusChanged(rid, 0, rp.Status.PREEMPTED))  # still queued: no row
    terminal = [c.message for c in out if isinstance(c, cmd.Deliver) and c.message.finished]
    assert len(terminal) == 1 and terminal[0].outcome is Outcome.FAILED
    assert terminal[0].error == ("runtime report StatusChanged (Preempted) rejected at stage 0: the lifecycle has no "
                                 "row for it in WAITING")  # fmt: skip
    assert orch.counters()["failed_illegal"] == 1


# -- a runtime that raises ------------------------------------------------------------------------------


def test_kit_fails_a_runtime_that_raises_naming_the_rule_and_the_calls_before():
    machine = make_machine(AbortByKey)()
    machine.start(AR)
    machine.add(req_id=7, tokens=[1])
    machine.abort(picks=[0])
    with pytest.raises(ConformanceError) as caught:
        machine.abort_late(picks=[0])  # the request is gone: ``del`` raises KeyError
    lines = str(caught.value).splitlines()
    assert lines[0] == ("ORCH-INV-202 (one_result_per_aborted_request): abort_requests(1001, [7]) raised KeyError: 7 "
                        "(each id of an abort is owed one AbortResult, ok=False with the error if it cannot be "
                        "aborted)")  # fmt: skip
    assert lines[1].startswith("the kit's calls of the runtime so far (4), for a stage StageSpec(")
    assert lines[2:] == ["  bind(<the kit's sink>)", "  add_request(7, tokens=(1,))", "  abort_requests(1000, [7])",
                         "  abort_requests(1001, [7])"]  # fmt: skip
    assert isinstance(caught.value.__cause__, KeyError)
    machine.teardown()  # drives the broken runtime no further: nothing more is raised


def test_kit_drawing_examples_reports_a_raise_under_its_rule_not_a_bare_exception():
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-202 \(one_result_per_aborted_request\): abort_requests\("
                                               r"\d+, \[[\d, ]+\]\) raised KeyError: ") as caught:  # fmt: skip
        check_runtime(AbortByKey, max_examples=40, shrink=False, derandomize=True)
    assert "the kit's calls of the runtime so far" in str(caught.value)


def test_kit_names_a_step_that_raises_a_failure_that_is_not_request_scoped():
    machine = make_machine(StepBreaks)()
    machine.start(AR)
    machine.add(req_id=3, tokens=[1], samples=2)
    with pytest.raises(ConformanceError, match=r"^ORCH-INV-206 \(failure_is_request_scoped\): step\(\) raised "
                                               r"RuntimeError: scheduler invariant broken") as caught:  # fmt: skip
        machine.step(steps=3)
    assert str(caught.value).splitlines()[-2:] == ["  add_request(4, tokens=(1,))", "  step()"]


# -- the pytest plugin: derandomized unless a seed is asked for --------------------------------------------


def _item(draw_seed):
    item = ConformanceItem.__new__(ConformanceItem)  # the settings it applies need no pytest session
    item.draw_seed = draw_seed
    return item


def test_the_plugin_runs_derandomized_with_no_database_by_default(monkeypatch):
    assert parse_seed(None) is None
    item = _item(None)
    assert item.run_settings() == {"derandomize": True, "database": None}
    applied = []
    monkeypatch.setattr(kit, "run_state_machine_as_test", lambda machine, settings: applied.append((machine,
                                                                                                   settings)))
    check_runtime(kit.sim_factory, **item.run_settings())
    assert len(applied) == 2  # workers fine, workers raising
    for machine, settings in applied:
        assert settings.derandomize is True and settings.database is None
        assert getattr(machine, "_hypothesis_internal_use_seed", None) is None
    assert "derandomized" in item.how_drawn()


def test_the_plugin_draws_from_a_seed_with_the_database_on(monkeypatch):
    assert parse_seed("1234") == 1234
    drawn = parse_seed("random")
    assert isinstance(drawn, int) and drawn >= 0
    item = _item(1234)
    applied = []
    monkeypatch.setattr(kit, "run_state_machine_as_test", lambda machine, settings: applied.append((machine,
                                                                                                   settings)))
    check_runtime(kit.sim_factory, **item.run_settings())
    for machine, settings in applied:
        assert settings.derandomize is False and isinstance(settings.database, ExampleDatabase)
        assert machine._hypothesis_internal_use_seed == 1234
    assert item.how_drawn() == "examples drawn with --omni-runtime-seed=1234 (pass it again to draw the same)"


@pytest.mark.parametrize("text", ["x", "-1", "1.5", ""])
def test_a_seed_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match=r"^--omni-runtime-seed wants a non-negative integer or 'random', got "):
        parse_seed(text)


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the plugin in a fresh directory (its example database, if any, goes there)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    env.pop("HYPOTHESIS_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "omni_runtime.testing", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *args, str(HERE / "faulty_runtimes.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)  # fmt: skip


def _failure(run: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"runtime \S+ breaks its protocol: (.*)", run.stdout)
    assert run.returncode == 1 and found, run.stdout + run.stderr
    return found.group(1)


def test_the_plugin_fails_the_same_way_every_run_and_says_how_it_drew(tmp_path):
    spec = "--omni-runtime=test_kit_judges_as_engine:SkipsScheduled"
    first, second = _pytest(tmp_path, spec), _pytest(tmp_path, spec)
    assert _failure(first).startswith("AR-INV-001 (ar_status_follows_upstream) for ")
    assert _failure(first) == _failure(second)  # derandomized: the same examples, the same failure
    assert "examples derandomized" in first.stdout
    assert not (tmp_path / ".hypothesis" / "examples").exists()  # no example database
    seeded = _pytest(tmp_path, spec, "--omni-runtime-seed=random")
    named = re.search(r"examples drawn with --omni-runtime-seed=(\d+) ", seeded.stdout)
    assert _failure(seeded).startswith("AR-INV-001") and named, seeded.stdout
    assert (tmp_path / ".hypothesis" / "examples").is_dir()  # the database is on: the failure was saved
    bad = _pytest(tmp_path, spec, "--omni-runtime-seed=soon")
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --omni-runtime-seed wants a non-negative integer or 'random', got 'soon'" in bad.stderr
