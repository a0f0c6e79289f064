"""The judge: what the rules know about a history so far, and how they report a broken invariant.

``Judge`` is the one interface between the monitor and its rules (the ``rules_*`` modules): every
rule takes the judge, reads and updates its facts (its public attributes) and reports with
:meth:`Judge.fail`. ``Monitor`` is a ``Judge`` that runs the rules over a history, step by step.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from omni_fsm.invariants.checks import CHECKS, Violation
from omni_fsm.invariants.view import View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import EngineState, StageKind, pipeline_shape

#: The identities a history may not carry (an older trace's) -> the invariants judged less without them: each
#: of these rules skips the part that reads it, and ``omni-fsm check`` names them as not observable.
JUDGED_LESS_WITHOUT: dict[str, tuple[str, ...]] = {
    "abort_caller": ("ORCH-INV-104", "ORCH-INV-106"),  #: abort call ids, and whether an answer is the parent's
    "replica": ("ORCH-INV-206", "AR-INV-003"),  #: the replica a request is bound to and a report comes from
}


class Judge:
    """The facts the rules share (the pipeline, a view per request, the engine) and the violations found.

    ``blind``: the identities of ``JUDGED_LESS_WITHOUT`` the history does not carry (a version-1 trace's).
    """

    def __init__(self, kinds: Sequence[StageKind], final: Sequence[bool], capacity: int = 1 << 30,
                 blind: frozenset[str] = frozenset()) -> None:
        unknown = blind - JUDGED_LESS_WITHOUT.keys()
        if unknown:
            raise ValueError(f"no rule reads the identities {sorted(unknown)}")
        (self.kinds, self.final), self.capacity = pipeline_shape(kinds, final), capacity
        self.sees_callers = "abort_caller" not in blind  #: abort answers name their call or their parent
        self.sees_replicas = "replica" not in blind  #: dispatches and reports name their replica
        self.blind = blind
        self.views: dict[int, View] = {}
        self.engine = EngineState.RUNNING
        self.slots = [0] * len(self.kinds)
        self.rpcs: dict[int, Any] = {}  #: call id -> method, while unanswered
        self.stopped = 0  #: 1 once the orchestrator stopped, 2 once the runtimes did
        self.steps = 0
        self.violations: list[Violation] = []
        #: (parent, companion) for each companion lost in this step: its parent must fail in it (judged at its end)
        self.lost_companions: list[tuple[int, int]] = []

    def fail(self, check: str, rid: int | None, message: str) -> None:
        """Report that ``check`` (a name from ``checks``) is broken, for request ``rid`` (``None``: the engine)."""
        self.violations.append(Violation(CHECKS[check].invariant, check, rid, self.steps, message))

    def view(self, rid: int) -> View | None:
        """Return the view of request ``rid``, or ``None`` if the history never showed it."""
        return self.views.get(rid)


def fact(item: ev.Event | ob.Observation) -> str:
    """Return an event or observation as a violation names it: ``SlotFreed(rid=5, stage=0)`` (defaults left out)."""
    shown, defaults = [], getattr(item, "_field_defaults", {})  # a named tuple's defaults, by field
    for name in type(item).field_names():
        value = getattr(item, name)
        if name in defaults and value == defaults[name]:
            continue
        shown.append(f"{name}={value.value if isinstance(value, Enum) else repr(value)}")
    return f"{type(item).__name__}({', '.join(shown)})"


def said(value: Enum | None) -> str:
    """Return an outcome's or a reason's value as a message names it (``none`` for none)."""
    return "none" if value is None else str(value.value)
