"""The sweep (``omni-fsm explore --sweep``, ``specs/sweep.toml``): its bounds together let every invariant a
``Spec`` can break fire, and each single-point fault of ``sweep_faults`` (at least three of every kind) is caught
by the bound named for it, running that bound only (stopped at its first violation, as TLC stops)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from omni_fsm import SPEC
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.sweep import SWEEP_FILE, load, parse_sweep
from omni_fsm.errors import MalformedInput
from omni_fsm.explore.reach import NEEDS
from omni_fsm.explore.sweep import by_name, reachable_in, sweep
from omni_fsm.spec import effects as fx
from omni_fsm.spec import guards as gd

from .sweep_faults import FAULTS, KINDS, Fault

BOUNDS = by_name(load(""))
#: The rules no Spec can break, and so no bound of the sweep: judged on traces and runtimes only.
NOT_BY_ANY_SPEC = {"ORCH-INV-107"}


def caught(fault: Fault) -> set[str]:
    """Return what the fault's bound reports first: the invariants of its first violating step, else LIVENESS."""
    with fault.spec() as spec:
        ((_, report),) = sweep([BOUNDS[fault.bound]], spec, first_violation=True).runs
    return {c.invariant for c in report.violations} | ({"LIVENESS"} if report.stuck else set())


def test_the_sweep_lets_every_invariant_a_spec_can_break_fire() -> None:
    can, cannot = reachable_in([b.bound for b in BOUNDS.values()])
    assert len(can) >= 28 and set(cannot) == NOT_BY_ANY_SPEC and all(b is None for b in cannot.values())
    assert "judged on traces and runtimes only" in NEEDS["ORCH-INV-107"].why


def test_each_kind_has_at_least_three_faults_each_named_for_a_bound_of_the_sweep() -> None:
    assert {f.bound for f in FAULTS.values()} <= set(BOUNDS)
    per_kind = Counter(f.kind for f in FAULTS.values())
    assert sorted(per_kind) == sorted(KINDS) and min(per_kind.values()) >= 3, per_kind


@pytest.mark.parametrize("name", sorted(FAULTS, key=lambda n: (FAULTS[n].kind, n)),
                         ids=lambda n: f"{FAULTS[n].kind}:{n}")  # fmt: skip
def test_the_fault_is_caught_by_its_bound(name: str) -> None:
    fault = FAULTS[name]
    assert caught(fault) == fault.caught_as, f"{name} ({fault.doc}) at {fault.bound}"


def test_a_replaced_guard_or_effect_is_the_variant_s_alone() -> None:
    """The variant carries the replacement; the module tables and ``SPEC`` keep theirs."""
    guards, effects, engine_effects = dict(gd.GUARDS), dict(fx.EFFECTS), dict(fx.ENGINE_EFFECTS)
    for name, table, key in (("slot_free_off_by_one", "guards", "slot_free"),
                             ("forward_keeps_the_prefix", "effects", fx.Effect.FORWARD),
                             ("worker_error_answered_as_success", "engine_effects", fx.Effect.ANSWER_RPC_ERROR)):
        with FAULTS[name].spec() as spec:
            assert getattr(spec, table)[key] is not getattr(SPEC, table)[key]
            assert getattr(SPEC, table)[key] is {"guards": guards, "effects": effects,
                                                 "engine_effects": engine_effects}[table][key]  # fmt: skip
    assert (guards, effects, engine_effects) == (gd.GUARDS, fx.EFFECTS, fx.ENGINE_EFFECTS)


def test_a_bound_s_recorded_states_are_the_ones_it_has() -> None:
    """The diffusion bound (the smallest): its recorded size, what a stopped sweep measures its share against."""
    ((sb, report),) = sweep([BOUNDS["diffusion"]], SPEC).runs
    assert report.ok and report.states == sb.states


@pytest.mark.parametrize(("text", "says"), [
    ('[[bound]]\nname = "a"\nwhy = "w"\nstates = 1\nfamilies = ["nope"]\n', f"{SWEEP_FILE}:5: bound 1: unknown event"),
    ('[[bound]]\nname = "a"\nwhy = "w"\nstates = 1\nrequests = 0\n', f"{SWEEP_FILE}:1: bound 1: requests"),
    ('[[bound]]\nname = "a"\nwhy = "w"\nstates = 1\n\n[[bound]]\nname = "a"\nwhy = "w"\nstates = 1\n',
     f"{SWEEP_FILE}:7: bound 2: name 'a' is used twice"),
    ('[[bound]]\nname = "a"\nwhy = "w"\nstate = 1\n', f"{SWEEP_FILE}:4: bound 1: unknown field 'state'"),
    ("[[bound]\n", f"{SWEEP_FILE}:1: not valid TOML"),
])  # fmt: skip
def test_a_malformed_sweep_file_names_the_file_and_line(text: str, says: str) -> None:
    with pytest.raises(MalformedInput) as err:
        parse_sweep(text)
    assert str(err.value).startswith(says), err.value


def test_the_sweep_prints_each_bound_then_the_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["explore", "--sweep", "--only", "diffusion", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[1/1] diffusion: " in out and f"  states={BOUNDS['diffusion'].states} edges=" in out
    assert "  ORCH-INV-107 (no Spec breaks it): " in out and "judged on traces and runtimes only" in out
    assert re.fullmatch(r"explore: bounds=1 states=\d+ edges=\d+ evaluations=\d+ seconds=[\d.]+ "
                        r"reachable_invariants=23/29", out.splitlines()[-1]), out  # fmt: skip


def test_a_stopped_sweep_says_what_it_covered_and_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["explore", "--sweep", "--only", "default,diffusion", "--max-seconds", "0.5", "--out",
                     str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 4, out
    assert "  stopped early: --max-seconds 0.5 reached" in out and "of its recorded 200,578 states" in out
    assert re.search(r"\npartial: [\d,]+ states, .* 0 violations found so far, about \d+% of the sweep's recorded "
                     r"states; bounds not run: diffusion\n", out), out  # fmt: skip
    assert out.splitlines()[-1].startswith("explore: bounds=1 ") and out.endswith(" partial=yes\n")


@pytest.mark.parametrize(("argv", "says"), [
    (["--sweep", "--requests", "2"], "--sweep explores the bounds of specs/sweep.toml: it takes no --requests"),
    (["--only", "default"], "--only chooses bounds of the sweep: give --sweep too"),
    (["--sweep", "--only", "nope"], "--only: nope is no bound of specs/sweep.toml"),
])  # fmt: skip
def test_sweep_options_that_do_not_fit_are_refused(argv: list[str], says: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert cli_main(["explore", *argv]) == 2
    assert says in capsys.readouterr().err
