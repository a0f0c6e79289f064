"""A faster ``__init__`` for the frozen, slotted attrs classes that hot loops create by the thousand.

attrs' ``__init__`` for a frozen class stores every field through ``object.__setattr__``, the
one write path a frozen class leaves open, and that is most of what an event, an observation,
a command or a runtime report costs to make. ``direct_inits(Base)`` gives ``Base`` and each of
its subclasses an ``__init__`` that stores the fields through their slot descriptors instead:
same parameters, same defaults, same values. Everything else (frozenness after construction,
``eq``, ``hash``, ``repr``, ``attrs.fields``, ``attrs.evolve``) stays attrs'. A class whose
fields need attrs' ``__init__`` (validators, converters, factories, keyword-only or ``init=False``
fields, ``__attrs_pre_init__`` / ``__attrs_post_init__``) keeps it.
"""

from __future__ import annotations

import sys
from types import MemberDescriptorType
from typing import Any

import attrs

_MARK = "__direct_init__"


def direct_inits(base: type) -> int:
    """Give ``base`` and its subclasses (recursively) the direct ``__init__``; return how many got it."""
    done, todo = 0, [base]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if _install(cls):
            done += 1
    return done


def _plain(cls: type) -> bool:
    """Return whether attrs' ``__init__`` of ``cls`` only stores its arguments."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return False
    if not all(isinstance(getattr(cls, f.name, None), MemberDescriptorType) for f in attrs.fields(cls)):
        return False
    if any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__")):
        return False
    return all(f.init and not f.kw_only and f.validator is None and f.converter is None
               and not isinstance(f.default, attrs.Factory)  # type: ignore[arg-type]
               for f in attrs.fields(cls))  # fmt: skip


def _install(cls: type) -> bool:
    if cls.__dict__.get(_MARK) or not _plain(cls):
        return False
    fields = attrs.fields(cls)
    # the class's module namespace, so that ``typing.get_type_hints`` resolves the annotations
    names: dict[str, Any] = dict(vars(sys.modules[cls.__module__]))
    params, body = [], []
    for f in fields:
        names[f"_set_{f.name}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        if f.default is attrs.NOTHING:
            params.append(f.alias)
        else:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.alias}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.alias})")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
    exec(source, names)  # generated from the class's own attrs fields, nothing else
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    generated = cls.__dict__["__init__"]  # attrs'
    init.__annotations__ = dict(generated.__annotations__)
    init.__doc__ = generated.__doc__
    cls.__init__ = init  # type: ignore[misc]
    setattr(cls, _MARK, True)
    return True
