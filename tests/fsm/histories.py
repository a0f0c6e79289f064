"""Lifecycle histories for the invariant tests: a pipeline, the history the real core makes of a list of events,
and ways to retouch it (one fault each). Shared by the negative suite and the facts-carried tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from omni_fsm import FinishReason, Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm import observations as ob
from omni_fsm.invariants import check_history

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
R = FinishReason
Step = tuple[ev.Event | None, list[ob.Observation]]


@attrs.frozen
class Pipeline:
    kinds: tuple[StageKind, ...]
    final: tuple[bool, ...]
    capacity: int = 1 << 30


AR_AR_DIFF = Pipeline((AR, AR, DIFF), (False, True, True))  # an earlier final-output stage, then diffusion
TWO_FINAL = Pipeline((AR, AR), (True, True))
ONE_AR = Pipeline((AR,), (True,))
ONE_DIFF = Pipeline((DIFF,), (True,))
AR_THEN_DIFF = Pipeline((AR, DIFF), (False, True))


@attrs.frozen
class History:
    pipeline: Pipeline
    steps: tuple[Step, ...]
    complete: bool = True

    def violations(self) -> set[str]:
        p = self.pipeline
        return {v.invariant for v in check_history(p.kinds, p.final, self.steps, p.capacity, self.complete)}

    def at(self, event: ev.Event) -> int:
        """Return the index of the (first) step whose input is ``event``."""
        return next(i for i, (e, _) in enumerate(self.steps) if e == event)

    def with_step(self, index: int, event: ev.Event | None = None, outputs: Sequence[ob.Observation] | None = None,
                  *, keep_event: bool = True) -> History:  # fmt: skip
        old_event, old_outputs = self.steps[index]
        new: Step = (old_event if keep_event else event, list(old_outputs if outputs is None else outputs))
        return attrs.evolve(self, steps=(*self.steps[:index], new, *self.steps[index + 1 :]))

    def outputs(self, index: int) -> list[ob.Observation]:
        return list(self.steps[index][1])

    def then(self, event: ev.Event | None, outputs: Sequence[ob.Observation]) -> History:
        return attrs.evolve(self, steps=(*self.steps, (event, list(outputs))))

    def upto(self, index: int) -> History:
        """Return the prefix ending with step ``index``, judged as a prefix."""
        return attrs.evolve(self, steps=self.steps[: index + 1], complete=False)

    def without(self, index: int, drop: Callable[[ob.Observation], bool]) -> History:
        return self.with_step(index, outputs=[o for o in self.outputs(index) if not drop(o)])


def run(pipeline: Pipeline, *events: ev.Event) -> History:
    """Return the history the real core produces for ``events``."""
    lc = Lifecycle(pipeline.kinds, pipeline.final, pipeline.capacity)
    return History(pipeline, tuple((e, lc.handle(e)) for e in events))


def terminal(o: ob.Observation, rid: int = 1) -> bool:
    return isinstance(o, ob.Emitted) and o.rid == rid and o.finished


def about(rid: int) -> Callable[[ob.Observation], bool]:
    return lambda o: getattr(o, "rid", None) == rid


def retouch(outputs: Sequence[ob.Observation], match: Callable[[ob.Observation], bool],
            **changes: object) -> list[ob.Observation]:  # fmt: skip
    return [o._replace(**changes) if match(o) else o for o in outputs]
