"""Events and observations are cheap records (named tuples, ``omni_fsm.spec.value.Value``) that behave as values:
equal only to their own class with equal fields, hashed alike, immutable, picklable, with a repr that names the
class and its fields, and fields in the order a trace writes them."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.spec.value import Value
from omni_fsm.spec.vocabulary import ControlMethod, EngineState, FinishReason, Outcome, ReqState, Role, StopKind

BASES = (Value, ob.Observation, ev.Event, ev.RequestEvent, ev.StageEvent)
CLASSES = sorted((c for module in (ev, ob) for c in vars(module).values()
                  if isinstance(c, type) and issubclass(c, Value) and c not in BASES), key=lambda c: c.__name__)
#: a value of each field's type, other than its default (so that a field left at its default would show)
SAMPLES: dict[str, Any] = {
    "rid": 7, "stage": 2, "replica": 1, "src": 0, "dst": 1, "tokens": 3, "cumulative": 9, "finished": True,
    "stage_final": True, "outcome": Outcome.ABORTED, "reason": FinishReason.LENGTH, "sample": 1, "call_id": 4,
    "parent": 6, "ok": True, "event": "StageOutput", "why": "stale", "method": ControlMethod.PAUSE_SCHEDULER,
    "error": "boom", "state": EngineState.PAUSED, "role": Role.CHILD, "n": 2, "companions": 1,
    "stop": StopKind.LENGTH, "request_id": "req-7", "level": 2, "tags": frozenset({"weights"}),
}  # fmt: skip
#: event fields by name that take another value than the observations' (``outcome``: a terminal state)
EVENT_SAMPLES: dict[str, Any] = {"outcome": ReqState.FINISHED_ABORTED}


def sample(cls: type, name: str) -> Any:
    return EVENT_SAMPLES.get(name, SAMPLES[name]) if issubclass(cls, ev.Event) else SAMPLES[name]


def made(cls: type) -> Any:
    return cls(*(sample(cls, name) for name in cls._fields))


def test_every_event_and_observation_is_a_record_here() -> None:
    assert {*ev.REQUEST_EVENTS, *ev.ENGINE_EVENTS} <= set(CLASSES) and ob.OrchestratorStopped in CLASSES
    assert len(CLASSES) >= 44


def test_fields_read_in_trace_order_base_class_fields_first() -> None:
    assert ev.StageOutput.field_names() == ("rid", "stage", "replica", "tokens")
    assert ev.StageEvent.field_names() == ("rid", "stage", "replica")
    assert ev.Submit.field_names() == ("rid", "n", "companions", "request_id")
    assert ob.Emitted.field_names() == ob.Emitted._fields
    assert ev.StageOutput(1, 0, 3) == ev.StageOutput(rid=1, stage=0, tokens=3, replica=0)  # tokens stays third


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_fields_are_named_and_defaults_apply(cls: type) -> None:
    o = made(cls)
    assert [getattr(o, name) for name in cls._fields] == [sample(cls, name) for name in cls._fields]
    required = [name for name in cls._fields if name not in cls._field_defaults]
    bare = cls(*(sample(cls, name) for name in required))
    assert {name: getattr(bare, name) for name in cls._field_defaults} == cls._field_defaults
    assert cls(**{name: sample(cls, name) for name in cls._fields}) == o
    assert set(cls.field_names()) == set(cls._fields)
    with pytest.raises(TypeError):
        cls(*(sample(cls, name) for name in cls._fields), 1)  # one argument too many


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_equality_and_hash_are_by_class_and_fields(cls: type) -> None:
    o, same = made(cls), made(cls)
    assert o == same and (o != same) is False and hash(o) == hash(same) and o is not same
    assert o != tuple(o) and tuple(o) != o  # not a bare tuple of its fields
    for other in CLASSES:
        if other is not cls and other._fields == cls._fields:  # SlotTaken(1, 0) is not SlotFreed(1, 0)
            assert o != made(other) and made(other) != o
    if cls._fields:
        changed = o._replace(**{cls._fields[0]: 99})
        assert type(changed) is cls and changed != o and o == made(cls)  # a copy: ``o`` is as it was
    assert len({o, same}) == 1 and bool(cls(*(sample(cls, n) for n in cls._fields if n not in cls._field_defaults)))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_record_is_immutable(cls: type) -> None:
    o = made(cls)
    for name in cls._fields:
        with pytest.raises(AttributeError):
            setattr(o, name, 99)
    with pytest.raises(AttributeError):
        o.extra = 1  # no instance dict
    assert o == made(cls)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_repr_names_the_class_and_fields_and_pickling_round_trips(cls: type) -> None:
    o = made(cls)
    shown = ", ".join(f"{name}={sample(cls, name)!r}" for name in cls._fields)
    assert repr(o) == f"{cls.__name__}({shown})"
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(o, protocol))
        assert type(back) is cls and back == o
    assert copy.copy(o) == o and copy.deepcopy(o) == o


def test_a_record_with_no_fields_is_true_and_unequal_to_another() -> None:
    assert ob.OrchestratorStopped() and ob.RuntimesStopped() and ev.Shutdown() and ev.EngineDied()
    assert ob.OrchestratorStopped() != ob.RuntimesStopped() and ob.OrchestratorStopped() == ob.OrchestratorStopped()
    assert ev.Shutdown() != ev.EngineDied() and ev.Shutdown() != ob.OrchestratorStopped()


def test_an_event_keeps_its_origin_and_place_in_the_hierarchy() -> None:
    report = ev.Scheduled(1, 0, replica=2)
    assert isinstance(report, ev.StageEvent) and isinstance(report, ev.RequestEvent) and report.ORIGIN is ev.RUNTIME
    assert ev.Submit(1).ORIGIN is ev.CLIENT and ev.Admit(1).ORIGIN is ev.INTERNAL
    assert report != ev.Preempted(1, 0, replica=2) and report._replace(stage=1) == ev.Scheduled(1, 1, 2)
