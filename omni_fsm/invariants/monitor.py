"""The monitor: judges an observable history against the invariants, step by step.

The invariants never consult the lifecycle table. A history is a sequence of *steps*: one input
event (what the client or a runtime did) followed by the observations the engine produced for it.
``Monitor.step`` judges one step; the facts it keeps per request are the minimum the rules need
(memory: a small view per open request plus one per distinct id).

The check names live in ``checks``, the per-request view in ``view``, the facts and the reporting
the rules share in ``judge``, the rules in one ``rules_*`` module per contract section, and which
rule judges what in ``rules``; this module holds the ``Monitor`` that runs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from omni_fsm.invariants.checks import (  # the check names, re-exported (``__all__``)
    ABORT_ENDS,
    ABORT_PREFIX,
    ADMISSION,
    ANSWERS_CORRELATED,
    AR_UPSTREAM,
    ASSIGNED_WORK,
    CACHE_FREED,
    CHECKS,
    COMMIT_AFTER_PHYSICAL,
    COMPANION_GATE,
    DEPENDENTS_INVISIBLE,
    DIFFUSION_WHOLE,
    FATAL_REACHES_ALL,
    FINISH_REASON,
    LAST_FINAL_TERMINAL,
    LATE_EVENTS_DROPPED,
    NEXT_LOGICAL_STAGE,
    NO_STATE_AFTER_TERMINAL,
    NO_WORK_AFTER_TERMINAL,
    ONE_TERMINAL,
    PARALLEL_ABORT,
    PARENT_AFTER_CHILDREN,
    REQUEST_SCOPED,
    ROUTE_AFTER_FINISH,
    RPC_ERRORS,
    SHUTDOWN_ENDS_ALL,
    SHUTDOWN_ORDER,
    SLOTS,
    STAGE_ORDER,
    THROUGH_ADAPTER,
    CheckInfo,
    Violation,
)
from omni_fsm.invariants.judge import Judge
from omni_fsm.invariants.rules import (
    OBSERVATION_RULES,
    judge_after_stop,
    judge_call,
    judge_end,
    judge_report,
    judge_step,
)
from omni_fsm.invariants.view import VIEW_FIELDS, View
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.vocabulary import StageKind


class Monitor(Judge):
    """Judges a history step by step against every invariant; collects the violations.

    A ``Judge``: its facts and its violations are the ``Judge``'s attributes, which the rules read,
    update and report to.
    """

    # -- one step ------------------------------------------------------------------------------

    def step(self, event: ev.Event | None, outputs: Sequence[ob.Observation]) -> list[Violation]:
        """Judge one step (an input event and what the engine produced for it); return new violations."""
        self.steps += 1
        before = len(self.violations)
        about = event.rid if isinstance(event, ev.RequestEvent) else -1
        name = type(event).__name__  # a drop names the event it dropped: another report dropped is no drop of this one
        dropped = any(isinstance(o, ob.Dropped) and o.rid == about and o.event == name for o in outputs)
        rejected = any(isinstance(o, ob.Rejected) and o.rid == about for o in outputs)
        terminal_rids = [o.rid for o in outputs if isinstance(o, ob.Emitted) and o.finished]
        if isinstance(event, ev.StageEvent):
            judge_report(self, event, outputs, dropped, rejected)
        elif event.__class__ is ev.Abort and not dropped:  # a client's abort call: owed an answer from now on
            judge_call(self, event)
        rule_of = OBSERVATION_RULES.get
        for obs in outputs:
            if self.stopped:
                judge_after_stop(self, obs)
            rule = rule_of(type(obs))
            if rule is not None:
                rule(self, obs)
        if event is not None:
            judge_step(self, event, outputs, dropped, terminal_rids, rejected)
        return self.violations[before:]

    # -- end of history ------------------------------------------------------------------------

    def finish(self) -> list[Violation]:
        """Judge the end of a complete history (everything drained); return new violations."""
        before = len(self.violations)
        judge_end(self)
        return self.violations[before:]

    # -- explorer support --------------------------------------------------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """Return the monitor's facts (not its violations) as a hashable tuple."""
        views = tuple((rid, v.snapshot()) for rid, v in sorted(self.views.items()))
        return (self.engine, tuple(self.slots), tuple(sorted(self.rpcs.items(), key=lambda kv: kv[0])),
                self.stopped, views)

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Set the facts from :meth:`snapshot`'s tuple; forget violations."""
        self.engine, slots, rpcs, self.stopped, views = snap
        self.slots = list(slots)
        self.rpcs = dict(rpcs)
        self.views = {rid: View(*fields) for rid, fields in views}
        self.violations = []


def check_history(kinds: Sequence[StageKind], final: Sequence[bool],
                  steps: Iterable[tuple[ev.Event | None, Sequence[ob.Observation]]],
                  capacity: int = 1 << 30, complete: bool = True,
                  blind: frozenset[str] = frozenset()) -> list[Violation]:
    """Judge a whole history; return every violation (end-of-history rules if ``complete``; ``blind``: the
    identities it does not carry, as ``Judge`` takes them)."""
    monitor = Monitor(kinds, final, capacity, blind)
    for event, outputs in steps:
        monitor.step(event, outputs)
    if complete:
        monitor.finish()
    return monitor.violations


__all__ = ["ABORT_ENDS", "ABORT_PREFIX", "ADMISSION", "ANSWERS_CORRELATED", "AR_UPSTREAM", "ASSIGNED_WORK",
           "CACHE_FREED", "CHECKS", "COMMIT_AFTER_PHYSICAL", "COMPANION_GATE", "DEPENDENTS_INVISIBLE",
           "DIFFUSION_WHOLE", "FATAL_REACHES_ALL", "FINISH_REASON", "LAST_FINAL_TERMINAL", "LATE_EVENTS_DROPPED",
           "NEXT_LOGICAL_STAGE", "NO_STATE_AFTER_TERMINAL", "NO_WORK_AFTER_TERMINAL", "ONE_TERMINAL",
           "PARALLEL_ABORT", "PARENT_AFTER_CHILDREN", "REQUEST_SCOPED", "ROUTE_AFTER_FINISH", "RPC_ERRORS",
           "SHUTDOWN_ENDS_ALL", "SHUTDOWN_ORDER", "SLOTS", "STAGE_ORDER", "THROUGH_ADAPTER", "VIEW_FIELDS",
           "CheckInfo", "Monitor", "View", "Violation", "check_history"]  # fmt: skip
