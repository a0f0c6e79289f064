"""The generated row programs (``omni_fsm/spec/programs.py``) are current, are what the core runs for ``SPEC``
with the generated selection, and do exactly what the generic way (``Lifecycle._run_row``, each row's plan)
does: the same observations, states, slots and counters, event by event."""

from __future__ import annotations

import traceback
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_fsm import SPEC, ReqState, StageKind
from omni_fsm import events as ev
from omni_fsm.cli import programs as generator
from omni_fsm.cli.programs import REGENERATE, render_programs
from omni_fsm.engine import core as core_module
from omni_fsm.engine.compiled import CompiledTable, policy_digest
from omni_fsm.engine.core import Lifecycle
from omni_fsm.spec import programs
from omni_fsm.spec.effects import Effect
from omni_fsm.spec.vocabulary import HOLDS_SLOT

from .test_bench_smoke import load_bench
from .test_reference_agreement import SEQUENCE_SETTINGS, SHAPES, core_events, handle

CLOSURES = CompiledTable(SPEC.rows, closures=True)


def generic(*args: Any, **kwargs: Any) -> Lifecycle:
    """A core that selects with closures and runs each row's plan the generic way (no program)."""
    lc = Lifecycle(*args, **kwargs)
    lc.table = CLOSURES
    return lc


def test_checked_in_programs_are_current() -> None:
    with open(programs.__file__, encoding="utf-8") as f:
        assert f.read() == render_programs(), f"omni_fsm/spec/programs.py is stale: run `{REGENERATE}`"


def test_the_core_runs_the_programs_for_spec_and_the_generic_way_otherwise() -> None:
    assert policy_digest(SPEC) == programs.MADE_FROM
    running = Lifecycle(["ar"], [True])._firing[ev.StageOutput][ReqState.RUNNING]
    assert running is programs.INDEX[ev.StageOutput][ReqState.RUNNING]
    other_policy = attrs.evolve(SPEC, holds_slot=HOLDS_SLOT | {ReqState.PENDING})
    assert policy_digest(other_policy) != programs.MADE_FROM
    for lc in (generic(["ar"], [True]), Lifecycle(["ar"], [True], spec=other_policy)):
        fire = lc._firing[ev.StageOutput][ReqState.RUNNING]
        assert fire is not running and fire.__qualname__.startswith("_generic")


def test_a_replaced_effect_turns_the_programs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault injected into an effect function (``tests/fsm/faults.py`` does) reaches the core: the programs,
    which inline the effect's body as it was, are not run."""
    accumulate = core_module._EFFECTS[Effect.ACCUMULATE]
    monkeypatch.setitem(core_module._EFFECTS, Effect.ACCUMULATE, lambda *args: accumulate(*args))
    fire = Lifecycle(["ar"], [True])._firing[ev.StageOutput][ReqState.RUNNING]
    assert fire is not programs.INDEX[ev.StageOutput][ReqState.RUNNING]


def test_the_policy_digest_follows_every_part_it_is_made_of() -> None:
    fan_out = dict(SPEC.fan_out)
    fan_out.pop(next(iter(fan_out)))
    for change in ({"fan_out": fan_out}, {"on_terminal": SPEC.on_terminal[:-1]},
                   {"holds_slot": HOLDS_SLOT | {ReqState.PENDING}}):  # fmt: skip
        assert policy_digest(attrs.evolve(SPEC, **change)) != policy_digest(SPEC), change


@SEQUENCE_SETTINGS
@given(shape=st.sampled_from(SHAPES), capacity=st.integers(1, 2), data=st.data())
def test_programs_and_the_generic_way_observe_the_same(
    shape: tuple[tuple[StageKind, ...], tuple[bool, ...]], capacity: int, data: st.DataObject
) -> None:
    fast, slow = Lifecycle(*shape, capacity), generic(*shape, capacity)
    assert fast._firing is not slow._firing
    for step in range(data.draw(st.integers(1, 40), "length")):
        event = data.draw(core_events(fast), f"event {step}")
        assert handle(slow, event) == handle(fast, event), (step, event)
        assert slow.snapshot() == fast.snapshot(), (step, event)
    assert slow.counters.as_dict() == fast.counters.as_dict()


def test_programs_and_the_generic_way_observe_the_same_on_the_bench_mix() -> None:
    """Thousands of events of every kind the benchmark times: aborts, samples, companions, three stages."""
    bench = load_bench().MIX  # bench/handle_instructions.py, as bench/fsm_step.py loads it
    mix = bench.record_mix(120)
    kinds = [StageKind.AR if k == "ar" else StageKind.DIFFUSION for k in bench.KINDS]
    fast, slow = Lifecycle(kinds, bench.FINAL), generic(kinds, bench.FINAL)
    observed = 0
    for event in mix:
        got = fast.handle(event)
        assert got == slow.handle(event), event
        observed += len(got)
    assert len(mix) > 1000 and observed > len(mix)
    assert fast.snapshot() == slow.snapshot() and not fast.records


def test_an_error_inside_a_program_names_its_file_and_line() -> None:
    lc = Lifecycle(["ar"], [True])
    lc.handle(ev.Submit(0))
    lc.handle(ev.Scheduled(0, 0))
    with pytest.raises(TypeError) as raised:
        lc.handle(ev.StageOutput(0, 0, tokens="three"))  # type: ignore[arg-type]  # += on an int fails in the program
    last = traceback.extract_tb(raised.tb)[-1]
    assert last.filename == programs.__file__ and last.line and "record.tokens += event.tokens" in last.line


def _returns(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    if rec.tokens:
        return
    out.append(rec)


def _reads_private(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    out.append(_returns)


def _assigns_a_parameter(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    rec = None  # noqa: F841


def _plain(ctx: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
    total = rec.tokens + event.tokens
    out.append(total)


def test_an_effect_is_inlined_only_when_its_body_can_be() -> None:
    module = generator._Module()
    for effect in (_returns, _reads_private, _assigns_a_parameter, lambda ctx, rec, event, source, out: None):
        assert generator._inlined(effect, module) is None, effect
    assert generator._inlined(_plain, module) == ["plain_total = record.tokens + event.tokens",
                                                  "out.append(plain_total)"]
