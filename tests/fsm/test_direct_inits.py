"""The direct ``__init__`` of the hot loops' value classes: same fields, defaults and frozenness as attrs'."""

from __future__ import annotations

import sys
import typing
from typing import Any

import attrs
import pytest

from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.spec.frozen import direct_inits
from omni_runtime import adapters, commands, protocol


def _public(cls: type) -> bool:
    """Return whether ``cls`` is the class its module names (attrs leaves the pre-slots original behind)."""
    module = sys.modules[cls.__module__]
    return cls.__module__.startswith(("omni_fsm", "omni_runtime")) and getattr(module, cls.__name__, None) is cls


def _classes(base: type) -> list[type]:
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


VALUE_CLASSES = sorted({cls for base in (ev.Event, ob.Observation, commands.Command, commands.ClientMessage,
                                         protocol.Report, adapters.StageInput) for cls in _classes(base)
                        if _public(cls)},
                       key=lambda c: (c.__module__, c.__qualname__))  # fmt: skip


def _values(cls: type) -> dict[str, Any]:
    return {f.name: object() for f in attrs.fields(cls)}  # distinct sentinels: a swapped field shows


@pytest.mark.parametrize("cls", VALUE_CLASSES, ids=lambda c: c.__qualname__)
def test_every_hot_value_class_has_the_direct_init(cls: type) -> None:
    assert cls.__dict__.get("__direct_init__") is True


@pytest.mark.parametrize("cls", VALUE_CLASSES, ids=lambda c: c.__qualname__)
def test_direct_init_stores_each_argument_in_its_own_field(cls: type) -> None:
    values = _values(cls)
    by_position = cls(*values.values())
    by_name = cls(**values)
    for name, value in values.items():
        assert getattr(by_position, name) is value
        assert getattr(by_name, name) is value
    assert by_position == by_name


@pytest.mark.parametrize("cls", VALUE_CLASSES, ids=lambda c: c.__qualname__)
def test_direct_init_keeps_attrs_defaults(cls: type) -> None:
    required = {f.name: object() for f in attrs.fields(cls) if f.default is attrs.NOTHING}
    made = cls(**required)
    for f in attrs.fields(cls):
        assert getattr(made, f.name) is (required[f.name] if f.default is attrs.NOTHING else f.default)


@pytest.mark.parametrize("cls", VALUE_CLASSES, ids=lambda c: c.__qualname__)
def test_direct_init_leaves_instances_frozen_and_evolvable(cls: type) -> None:
    values = _values(cls)
    made = cls(**values)
    for name in values:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, name, 1)
        replaced = attrs.evolve(made, **{name: 1})
        assert getattr(replaced, name) == 1 and getattr(made, name) is values[name]
    with pytest.raises(TypeError):
        cls(*values.values(), object())  # one argument too many: the signature is attrs'


def test_a_class_with_a_validator_keeps_attrs_init() -> None:
    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.instance_of(int))

    assert direct_inits(Checked) == 0
    with pytest.raises(TypeError):
        Checked("one")  # type: ignore[arg-type]


def test_a_class_with_a_factory_default_keeps_attrs_init() -> None:
    @attrs.frozen
    class Listed:
        items: list[int] = attrs.field(factory=list)

    assert direct_inits(Listed) == 0
    assert Listed().items == [] and Listed().items is not Listed().items


@pytest.mark.parametrize("cls", VALUE_CLASSES, ids=lambda c: c.__qualname__)
def test_direct_init_annotations_resolve(cls: type) -> None:
    hints = typing.get_type_hints(cls.__init__)
    assert set(hints) == {f.name for f in attrs.fields(cls)} | {"return"}
    assert cls.__init__.__module__ == cls.__module__
