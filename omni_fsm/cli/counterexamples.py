"""Counterexamples as traces: each replayed on a fresh core, written as a complete trace ``omni-fsm check`` reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from omni_fsm.engine.core import Lifecycle
from omni_fsm.errors import InternalError, LifecycleError
from omni_fsm.explore.explorer import Bound, Counterexample, Report
from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.spec.table import SPEC, Spec

#: A counterexample replayed on the core: its (event, observations) steps.
Replayed = list[tuple[ev.Event, list[ob.Observation]]]


def replay(bound: Bound, events: tuple[ev.Event, ...], spec: Spec = SPEC) -> Replayed:
    """Run ``events`` through a fresh core built on ``spec``; return the (event, observations) steps.

    Every event must replay: the explorer found them on the same core. ``InternalError`` names
    the first one the core refuses (the explorer and the core disagree: a bug, or another spec).
    """
    kinds, final = bound.pipeline()
    lc = Lifecycle(kinds, final, bound.capacity, spec)
    steps: Replayed = []
    for number, event in enumerate(events, 1):
        try:
            steps.append((event, list(lc.handle(event))))
        except LifecycleError as err:
            raise InternalError(f"cannot replay event {number} of {len(events)}, {event!r}: {err}") from None
    return steps


def write_counterexample(path: Path, bound: Bound, cx: Counterexample, spec: Spec = SPEC) -> None:
    """Write a counterexample, replayed on ``spec``, as a complete trace at ``path`` (``omni-fsm check`` reads it).

    The end marker says the history stops there: ``omni-fsm check`` applies the end-of-history
    rules, so the requests a LIVENESS counterexample leaves stuck are reported as never ended.
    ``InternalError`` if an event cannot be replayed; nothing is written then.
    """
    from omni_fsm.trace import write_trace

    kinds, final = bound.pipeline()
    try:
        steps = replay(bound, cx.events, spec)
    except InternalError as err:
        raise InternalError(f"counterexample {cx.invariant}: {err}") from None
    write_trace(path, kinds, final, bound.capacity, steps, complete=True)


def write_counterexamples(report: Report, bound: Bound, spec: Spec, out: Path, stream: TextIO,
                          prefix: str = "counterexample-") -> int:  # fmt: skip
    """Write each counterexample of ``report`` into ``out`` as a trace, naming each on ``stream``; return 0, or the
    exit status of what stopped it (2 a file that cannot be written, 3 an event the core cannot replay)."""
    for cx in (*report.violations, *([report.stuck] if report.stuck else [])):
        path = out / f"{prefix}{cx.invariant}.trace.jsonl"
        try:
            write_counterexample(path, bound, cx, spec)
        except OSError as exc:
            print(f"omni-fsm explore: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except InternalError as exc:  # the core refuses a step the explorer took: a bug, said in one line
            print(f"omni-fsm explore: internal error: {exc}", file=sys.stderr)
            return 3
        stream.write(f"  trace written: {path}\n")
    return 0


__all__ = ["Replayed", "replay", "write_counterexample", "write_counterexamples"]
