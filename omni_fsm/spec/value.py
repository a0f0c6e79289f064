"""``Value``: the base of the records the core takes and makes by the thousand (events and observations).

Each such record is a named tuple: its fields are the ``typing.NamedTuple`` it extends first (``_Name``), so
making one is one tuple allocation, where attrs' frozen ``__init__`` stores each field through
``object.__setattr__`` at several times the cost. ``Value`` makes the tuple a value of its own class: equal only to
a record of the same class with equal fields (``SlotTaken(1, 0)`` is not ``SlotFreed(1, 0)``, nor ``(1, 0)``),
hashed alike, true even with no fields. Named tuples bring the rest: immutability, pickling, a repr that names
the class and its fields, ``_replace`` for a changed copy and ``_fields``.
"""

from __future__ import annotations


class Value(tuple):  # type: ignore[type-arg]  # each subclass's named tuple says its fields
    """A named tuple whose class is part of its value."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple.__hash__(self)))

    def __bool__(self) -> bool:
        return True

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Return the class's fields as a trace writes them: those its base classes declare (``rid: int``), from
        the root down, then the others of its named tuple, in order."""
        names: list[str] = []
        for base in reversed(cls.__mro__):
            if issubclass(base, Value):
                names += [name for name, kind in vars(base).get("__annotations__", {}).items()
                          if "ClassVar[" not in str(kind) and name not in names]  # fmt: skip
        return (*names, *(name for name in getattr(cls, "_fields", ()) if name not in names))


__all__ = ["Value"]
