"""The generated row selection (``omni_fsm/spec/selection.py``) is current, is what the core runs for ``SPEC``,
and selects exactly as the closures over the guard functions do (which serve any other table)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_fsm import SPEC, ReqState
from omni_fsm import events as ev
from omni_fsm.cli.selectors import REGENERATE, render_selectors
from omni_fsm.engine.compiled import CompiledTable, is_generated_for
from omni_fsm.engine.core import Lifecycle
from omni_fsm.spec import selection
from omni_fsm.spec.guards import GUARDS
from omni_fsm.spec.table import rows_digest

from .test_reference_agreement import PAIR_SETTINGS, engines, events_of, pair_id, pairs, records

GENERATED = CompiledTable(SPEC.rows)
CLOSURES = CompiledTable(SPEC.rows, closures=True)
PATH = selection.__file__


def test_checked_in_selection_is_current() -> None:
    with open(PATH, encoding="utf-8") as f:
        assert f.read() == render_selectors(), f"omni_fsm/spec/selection.py is stale: run `{REGENERATE}`"


def test_the_core_runs_the_generated_selection_for_spec_and_closures_for_any_other_table() -> None:
    assert GENERATED.index is selection.INDEX and CLOSURES.index is not selection.INDEX
    assert Lifecycle(["ar"], [True]).table.index is selection.INDEX
    other = attrs.evolve(SPEC, rows=SPEC.rows[:-1])
    assert Lifecycle(["ar"], [True], spec=other).table.index is not selection.INDEX
    assert not is_generated_for(other.rows, GUARDS)


def test_a_replaced_guard_is_not_inlined() -> None:
    patched = {**GUARDS, "slot_free": lambda record, event, engine: True}
    assert not is_generated_for(SPEC.rows, patched)
    assert CompiledTable(SPEC.rows, patched).index is not selection.INDEX


def test_the_digest_follows_every_field_of_a_row() -> None:
    row = SPEC.rows[0]
    for change in ({"when": ()}, {"unless": ("slot_free",)}, {"effects": ()}, {"target": ReqState.PENDING}):
        assert rows_digest((attrs.evolve(row, **change), *SPEC.rows[1:])) != rows_digest(SPEC.rows), change


@pytest.mark.parametrize(("state", "event_type"), pairs(SPEC.rows, ReqState, ev.REQUEST_EVENTS, True), ids=pair_id)
@PAIR_SETTINGS
@given(data=st.data())
def test_generated_and_closures_select_the_same_row(state: ReqState, event_type: type[ev.Event],
                                                    data: st.DataObject) -> None:
    eng = data.draw(engines(rpcs=False), "engine")
    rec = data.draw(records(eng, state), "record")
    event = data.draw(events_of(event_type, rec.rid, eng), "event")
    assert GENERATED.select(rec, event, eng) is CLOSURES.select(rec, event, eng)
