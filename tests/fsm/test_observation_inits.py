"""The generated ``__init__``s of the observations (``omni_fsm/spec/observation_inits.py``) are current, serve every
observation, and build exactly what attrs' own ``__init__`` builds: the same class, fields, equality and hash,
still frozen, still evolvable and picklable."""

from __future__ import annotations

import pickle
from typing import Any

import attrs
import pytest

from omni_fsm.cli.inits import REGENERATE, observation_classes, render_inits
from omni_fsm.spec import ATTRS_INITS, observation_inits
from omni_fsm.spec.vocabulary import ControlMethod, EngineState, FinishReason, Outcome, Role

#: a value of each field's type, other than its default (so that a field left at its default would show)
SAMPLES: dict[str, Any] = {
    "rid": 7, "stage": 2, "replica": 1, "src": 0, "dst": 1, "tokens": 3, "cumulative": 9, "finished": True,
    "stage_final": True, "outcome": Outcome.ABORTED, "reason": FinishReason.LENGTH, "sample": 1, "call_id": 4,
    "parent": 6, "ok": True, "event": "StageOutput", "why": "stale", "method": ControlMethod.PAUSE_SCHEDULER,
    "error": "boom", "state": EngineState.PAUSED, "role": Role.CHILD, "n": 2, "companions": 1,
}  # fmt: skip


def test_checked_in_inits_are_current() -> None:
    with open(observation_inits.__file__, encoding="utf-8") as f:
        assert f.read() == render_inits(), f"omni_fsm/spec/observation_inits.py is stale: run `{REGENERATE}`"


def test_every_observation_has_its_generated_init() -> None:
    classes = observation_classes()
    assert len(classes) >= 15 and set(observation_inits.INITS) == set(classes)
    for cls in classes:
        assert vars(cls)["__init__"] is observation_inits.INITS[cls] is not ATTRS_INITS[cls]


@pytest.mark.parametrize("cls", observation_classes(), ids=lambda c: c.__name__)
def test_the_generated_init_builds_what_attrs_builds(cls: type) -> None:
    fields = attrs.fields(cls)
    positional = [SAMPLES[f.name] for f in fields if not f.kw_only]
    keyword = {f.name: SAMPLES[f.name] for f in fields if f.kw_only}
    made = cls(*positional, **keyword)
    by_attrs = object.__new__(cls)
    ATTRS_INITS[cls](by_attrs, *positional, **keyword)
    assert type(made) is cls and made == by_attrs and hash(made) == hash(by_attrs) and repr(made) == repr(by_attrs)
    assert attrs.asdict(made) == {f.name: SAMPLES[f.name] for f in fields}
    defaults = {f.name: f.default for f in fields if f.default is not attrs.NOTHING}
    required = [SAMPLES[f.name] for f in fields if f.default is attrs.NOTHING]
    assert attrs.asdict(cls(*required)) == {**{f.name: SAMPLES[f.name] for f in fields}, **defaults}
    assert pickle.loads(pickle.dumps(made)) == made
    if fields:
        assert attrs.evolve(made, **{fields[0].name: 99}) != made
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, fields[0].name, 99)
    with pytest.raises(TypeError):
        cls(*positional, *positional, 1)  # too many arguments: refused as attrs refuses them
