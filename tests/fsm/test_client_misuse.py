"""Bad calls of the embedding program: one typed error naming what was wrong; nothing changes."""

from __future__ import annotations

import attrs
import pytest

from omni_fsm import ConfigError, Effect, InternalError, Lifecycle, LifecycleError, OmniFsmError, Spec, StageKind
from omni_fsm import events as ev
from omni_fsm.engine.selection import Selection
from omni_fsm.spec.table import SPEC, Row
from omni_fsm.spec.vocabulary import ReqState

from . import faults

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


def test_an_unguarded_row_that_hides_later_rows_is_refused_when_indexed():
    hiding = Row(ReqState.RUNNING, ev.StageOutput, ReqState.RUNNING)
    hidden = Row(ReqState.RUNNING, ev.StageOutput, ReqState.RUNNING, when=("ar_stage",))
    with pytest.raises(ConfigError, match="an unguarded row hides the rows after it"):
        Selection((hiding, hidden))
    Selection(SPEC.rows)  # the real table has none


def _without(keep) -> Spec:
    return faults.edit_rows(lambda r: not keep(r), lambda r: [])


def test_a_refused_submit_leaves_nothing_behind():
    lc = Lifecycle((AR,), (True,), spec=_without(lambda r: r.event is not ev.Submit))
    for _ in range(2):  # the second try is refused the same way, not as "id already tracked"
        with pytest.raises(LifecycleError, match="request 0 in state NEW: no transition"):
            lc.handle(ev.Submit(0))
        assert lc.records == {}


def test_a_missing_stage_failed_row_is_an_internal_error_not_a_recursion():
    spec = _without(lambda r: not (r.event is ev.StageFailed and r.source is ReqState.RUNNING))
    lc = Lifecycle((AR,), (True,), spec=spec)
    lc.handle(ev.Submit(0))
    lc.handle(ev.Scheduled(0, 0))
    with pytest.raises(InternalError, match="no row for StageFailed"):
        lc.handle(ev.InputReady(0, 0))  # illegal in RUNNING: handled as StageFailed, which has no row here


def test_a_refused_internal_fan_out_is_an_internal_error():
    lc = Lifecycle((AR,), (True,), spec=_without(lambda r: not (r.event is ev.Abort and r.source is ReqState.WAITING)))
    lc.handle(ev.Submit(0, n=2))  # the parent waits on two children, both WAITING
    with pytest.raises(InternalError, match="fan-out Abort"):
        lc.handle(ev.Abort(0))  # the parent's abort reaches its children: no row for them


def test_an_engine_effect_on_a_request_row_is_refused_when_built():
    row = attrs.evolve(SPEC.rows[0], effects=(Effect.SEND_RPC,))
    with pytest.raises(ConfigError, match="SEND_RPC has no meaning for a request"):
        Lifecycle((AR,), (True,), spec=attrs.evolve(SPEC, rows=(row, *SPEC.rows[1:])))


@pytest.mark.parametrize("resume_to", [None, ReqState.FINISHED_ABORTED], ids=["none", "not-bound"])
def test_following_an_interrupted_state_must_say_a_bound_state_when_built(resume_to):
    """The table says where the interrupted state moves; a row that does not, or moves it off the stage, is refused."""
    at = next(i for i, r in enumerate(SPEC.rows) if Effect.FOLLOW_INTERRUPTED in r.effects)
    rows = (*SPEC.rows[:at], attrs.evolve(SPEC.rows[at], resume_to=resume_to), *SPEC.rows[at + 1 :])
    with pytest.raises(ConfigError, match="FOLLOW_INTERRUPTED must say a bound state"):
        Lifecycle((AR,), (True,), spec=attrs.evolve(SPEC, rows=rows))


def test_the_miss_policy_covers_every_event_origin():
    from omni_fsm.spec.table import MISS_POLICY

    assert set(MISS_POLICY) == set(ev.Origin)
    assert all(ev_cls.ORIGIN in MISS_POLICY for ev_cls in (*ev.REQUEST_EVENTS, *ev.ENGINE_EVENTS))
