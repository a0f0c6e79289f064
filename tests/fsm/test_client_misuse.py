"""Bad calls of the embedding program: one typed error naming what was wrong; nothing changes."""

from __future__ import annotations

import pytest

from omni_fsm import ConfigError, Lifecycle, LifecycleError, OmniFsmError, StageKind
from omni_fsm import events as ev
from omni_fsm._compiled import CompiledTable
from omni_fsm._table import SPEC, Row
from omni_fsm._vocab import ReqState

AR = StageKind.AR


def test_a_negative_request_id_is_refused_and_nothing_is_tracked():
    lc = Lifecycle((AR,), (True,))
    with pytest.raises(LifecycleError, match="request -5 in state NEW: request ids are non-negative"):
        lc.handle(ev.Submit(-5))
    assert lc.records == {} and lc.snapshot() == Lifecycle((AR,), (True,)).snapshot()


@pytest.mark.parametrize("kinds, final, capacity, why", [
    ((), (), 1, "at least one stage"),
    ((AR, AR), (True,), 1, "one 'final' flag per stage"),
    ((AR,), (False,), 1, "last stage must be a final-output stage"),
    ((AR,), (True,), 0, "capacity must be at least 1"),
])  # fmt: skip
def test_a_lifecycle_that_describes_no_pipeline_is_a_config_error(kinds, final, capacity, why):
    with pytest.raises(ConfigError, match=why) as caught:
        Lifecycle(kinds, final, capacity)
    assert isinstance(caught.value, OmniFsmError) and isinstance(caught.value, ValueError)


def test_an_unguarded_row_that_hides_later_rows_is_refused_when_compiled():
    hiding = Row(ReqState.RUNNING, ev.StageOutput, ReqState.RUNNING)
    hidden = Row(ReqState.RUNNING, ev.StageOutput, ReqState.RUNNING, when=("ar_stage",))
    with pytest.raises(ConfigError, match="an unguarded row hides the rows after it"):
        CompiledTable((hiding, hidden))
    CompiledTable(SPEC.rows)  # the real table has none
