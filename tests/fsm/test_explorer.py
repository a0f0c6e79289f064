"""The bounded exhaustive explorer: clean at small bounds, and it catches each re-injected
historic bug at a stated bound, naming the invariant (decided exhaustively, not by luck)."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

import omni_fsm.explore.explorer as explorer_module
from omni_fsm import StageKind
from omni_fsm import events as ev
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.explore import write_counterexample
from omni_fsm.engine.core import Lifecycle
from omni_fsm.explore.explorer import DEFAULT_FAMILIES, FAMILIES, Bound, explore
from omni_fsm.spec.record import Record
from omni_fsm.spec.table import SPEC, Effect

from . import faults
from .faults import B4_BOUND, SMALL

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
ALL = frozenset(FAMILIES)


def found(report: Any) -> set[str]:
    got = {c.invariant for c in report.violations}
    return got | ({"LIVENESS"} if report.stuck else set())


@pytest.mark.parametrize(
    "bound",
    [
        Bound(requests=2),
        Bound(requests=2, kinds=(AR, DIFF)),
        Bound(requests=1, stages=3, final_stages=2, kinds=(AR, AR, DIFF)),
        Bound(requests=1, families=ALL),
        Bound(requests=2, stages=1, families=ALL),
        Bound(requests=1, n=2, families=SMALL | {"failure", "death", "shutdown", "late"}),
        Bound(requests=1, companions=1, families=SMALL | {"failure", "death", "shutdown", "late", "abort_race"}),
        Bound(requests=2, stages=1, capacity=1, families=SMALL | {"park", "control"}),
    ],
    ids=["ar-ar", "ar-diffusion", "two-final-stages", "abort-races", "abort-races-x2", "n2", "companion",
         "capacity-1"],
)
@pytest.mark.covers("ORCH-INV-101", "ORCH-INV-209", "ORCH-INV-203", "ORCH-INV-204", "ORCH-INV-207", "AR-INV-001")
def test_explorer_finds_no_violation_and_liveness_holds(bound: Bound) -> None:
    report = explore(bound)
    assert report.ok, [str(c) for c in report.violations] + [str(report.stuck)]
    assert report.liveness_checked and report.edges > report.states > 1


def test_symmetry_reduces_states_for_safety_only() -> None:
    full, reduced = explore(Bound(requests=2, stages=1)), explore(Bound(requests=2, stages=1), symmetry=True)
    assert reduced.states < full.states and reduced.ok and not reduced.liveness_checked


def test_default_bound_is_the_documented_one() -> None:
    b = Bound()
    assert (b.requests, b.stages, b.final_stages, b.n, b.max_tokens) == (3, 2, 1, 1, 2)
    assert b.families == DEFAULT_FAMILIES == ALL - {"abort_race"}


# -- historic bugs, re-injected: each caught at a stated bound, naming the invariant -------------------

CAUGHT = [
    ("B1", faults.b1_parent_abort_misses_children, Bound(requests=1, n=2, families=SMALL), "ORCH-INV-203"),
    ("B2", faults.b2_last_child_keeps_parent, Bound(requests=1, n=2, families=SMALL), "ORCH-INV-203"),
    ("B4", faults.b4_parked_needs_a_second_slot, B4_BOUND, "LIVENESS"),
    ("B5", faults.b5_abort_misses_chunk_wait, Bound(requests=1, stages=1, families=SMALL | {"park", "abort_race"}),
     "ORCH-INV-209"),
    ("B6", faults.b6_zombie_after_abort, Bound(requests=1, stages=1, families=SMALL), "ORCH-INV-100"),
    ("B6b", faults.b6_abort_keeps_its_slot, Bound(requests=1, stages=1, families=SMALL), "AR-INV-200"),
    ("B7", faults.b7_terminal_keeps_state, Bound(requests=1, stages=1, families=SMALL), "ORCH-INV-208"),
]


@pytest.mark.parametrize(("bug", "fault", "bound", "invariant"), CAUGHT, ids=[c[0] for c in CAUGHT])
@pytest.mark.covers("ORCH-INV-100", "ORCH-INV-203", "ORCH-INV-208", "ORCH-INV-209", "AR-INV-200")
def test_explorer_catches_historic_bug(bug: str, fault: Any, bound: Bound, invariant: str) -> None:
    report = explore(bound, spec=fault())
    assert invariant in found(report), f"{bug}: found {found(report)}"


class _NoStaleCheck(Lifecycle):
    """B3 (vllm#42157) in our core: a report for another stage is taken as one for the current stage."""

    def _request(self, event: Any, out: Any, top: bool) -> None:
        rec = self.records.get(event.rid)
        if rec is not None and isinstance(event, ev.StageEvent) and event.stage != rec.stage:
            event = event._replace(stage=rec.stage)
        super()._request(event, out, top)


_FORWARD = SPEC.effects[Effect.FORWARD]
_FORWARDS_SEEN = [0]


def _stage_watched(effect: Any) -> Any:
    def run(lc: Lifecycle, rec: Record, event: Any, source: Any, out: Any) -> None:
        stage = rec.stage
        effect(lc, rec, event, source, out)
        if rec.stage != stage:
            assert effect is _FORWARD, f"{effect.__name__} moved {rec.rid} to stage {rec.stage} on {event!r}"
            _FORWARDS_SEEN[0] += 1

    return run


#: The real spec, every request effect watched: only ``FORWARD`` may change a record's stage.
_STAGE_WATCHED = attrs.evolve(SPEC, effects={effect: _stage_watched(run) for effect, run in SPEC.effects.items()})


@pytest.mark.parametrize("bound", [
    Bound(requests=2, families=ALL),
    Bound(requests=1, n=2, families=SMALL | {"failure", "death", "shutdown", "late"}),
    Bound(requests=1, companions=1, families=SMALL | {"failure", "death", "shutdown", "late", "abort_race"}),
], ids=["plain", "n2", "companion"])  # fmt: skip
def test_only_forward_moves_a_request_to_another_stage(bound: Bound) -> None:
    """The core resolves each row's slot moves when it is built, on this premise: every reachable step checks it."""
    _FORWARDS_SEEN[0] = 0
    report = explore(bound, spec=_STAGE_WATCHED)
    assert not report.violations and _FORWARDS_SEEN[0] > 0


@pytest.mark.covers("AR-INV-003")
def test_explorer_catches_late_reports_acted_on_b3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explorer_module, "Lifecycle", _NoStaleCheck)
    report = explore(Bound(requests=1, families=SMALL | {"late"}))
    assert "AR-INV-003" in found(report)


@pytest.mark.covers("ORCH-INV-101", "ORCH-INV-103")
def test_explorer_catches_a_silent_empty_terminal_b13(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm#19536: a prompt too long ends as ignored, but the empty final message is skipped."""
    faults.b13_empty_terminal_skipped(monkeypatch)
    report = explore(Bound(requests=1, stages=1, families=SMALL))
    assert "ORCH-INV-101" in found(report)


def test_counterexample_is_shortest_and_replays_as_a_trace_check_rejects(tmp_path: Any, capsys: Any) -> None:
    bound, spec = Bound(requests=1, stages=1, families=SMALL), faults.b6_zombie_after_abort()
    report = explore(bound, spec=spec)
    cx = next(c for c in report.violations if c.invariant == "ORCH-INV-100")
    assert [type(e).__name__ for e in cx.events] == ["Submit", "Abort", "AbortDone", "Scheduled"]
    path = tmp_path / "cx.trace.jsonl"
    write_counterexample(path, bound, cx, spec)  # replayed on the faulty table the explorer ran
    lines = path.read_text().splitlines()
    assert lines[-1] == '{"end":true}'  # a complete trace: nothing cut off
    capsys.readouterr()
    assert cli_main(["check", str(path)]) == 1
    scheduled = next(i for i, line in enumerate(lines, 1) if line.startswith('{"in":"scheduled"'))
    assert f"{path}:{scheduled}: ORCH-INV-100 " in capsys.readouterr().out  # the zombie step, named as found


def test_explore_cli_prints_the_report_and_exits_zero(capsys: Any, tmp_path: Any) -> None:
    code = cli_main(["explore", "--requests", "1", "--stages", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "liveness (every state can still end every request): holds" in out
    assert "\nviolations: 0\n" in out
    last = out.rstrip().splitlines()[-1]
    assert re.fullmatch(r"explore: states=\d+ edges=\d+ evaluations=\d+ seconds=[\d.]+ edges_per_s=\d+ "
                        r"reachable_invariants=\d+/29", last), last


def test_explore_cli_rejects_unknown_family(capsys: Any) -> None:
    assert cli_main(["explore", "--families", "submit,telepathy"]) == 2
    assert "telepathy" in capsys.readouterr().err


def test_snapshots_follow_their_named_field_orders() -> None:
    from omni_fsm.invariants.monitor import VIEW_FIELDS, View
    from omni_fsm.spec.record import ENGINE_FIELDS, RECORD_FIELDS, Engine, Record

    rec = Record(7, parent=3, stage=1, tokens=5, sample=2)
    assert rec.snapshot() == tuple(getattr(rec, f) for f in RECORD_FIELDS)
    eng = Engine(kinds=(StageKind.AR,), final=(True,))
    eng.pending_rpcs[4] = ("sleep", 1, frozenset())  # type: ignore[assignment]
    snap = dict(zip(ENGINE_FIELDS, eng.snapshot(), strict=True))
    assert snap == {"state": eng.state, "slots_used": (0,), "sleep_level": 0, "sleep_tags": frozenset(),
                    "pending_rpcs": ((4, ("sleep", 1, frozenset())),)}
    view = View()
    assert len(view.snapshot()) == len(VIEW_FIELDS)
    assert view.snapshot() == tuple(getattr(view, f) for f in VIEW_FIELDS)
