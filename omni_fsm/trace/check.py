"""Judging a recorded trace against the invariants: ``check_trace(path)`` returns a ``Report``.

The trace is streamed through ``Monitor.step`` (and ``Monitor.finish`` when it ends with the end
marker); each violation is rendered with its invariant, request, line and that request's recent
lines (``Recent``). A trace without its end marker may be cut anywhere (a copy of one still being
written): its last step may lack observations not written yet, so it is not judged, and a last line
without its newline that is no JSON yet is not read (``TraceReader.partial_line``). Memory: the
monitor's view per distinct id, plus the last ``context`` lines of each open request (dropped at
its ``released``). The ``omni-fsm check`` command around it (options,
progress lines, exit codes) is ``omni_fsm.cli.check``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

import attrs

from omni_fsm.invariants import Monitor, Violation
from omni_fsm.invariants.judge import JUDGED_LESS_WITHOUT
from omni_fsm.spec import observations as ob
from omni_fsm.trace.codec import NOT_CARRIED
from omni_fsm.trace.jsonl import Item, Step, TraceHeader, dumps, read_trace

DEFAULT_CONTEXT = 6  #: recent lines kept per request, shown with each violation about it
PROGRESS_AFTER, PROGRESS_EVERY = 2.0, 5.0  #: seconds before the first progress line, and between lines
#: Called now and then on a long check with (steps judged, line reached, seconds so far).
Progress = Callable[[int, int, float], None]
Line = tuple[int, Item]


def _lines_of(step: Step) -> Iterator[Line]:
    """Yield (line number, item) for the step's event and outputs (they are consecutive lines)."""
    first = step.line
    if step.event is not None:
        yield first, step.event
        first += 1
    yield from enumerate(step.outputs, first)


def _rid_of(item: Item) -> int | None:
    rid = getattr(item, "rid", None)
    return rid if isinstance(rid, int) and rid >= 0 else None


@attrs.define
class Recent:
    """The last ``size`` lines of each open request, and of the engine (lines naming no request)."""

    size: int
    by_rid: dict[int, deque[Line]] = attrs.field(factory=dict)
    engine: deque[Line] = attrs.field(init=False)
    ended: set[int] = attrs.field(factory=set)  #: released ids: late lines about them are not kept

    def __attrs_post_init__(self) -> None:
        self.engine = deque(maxlen=self.size)

    def note(self, line: Line) -> None:
        """Remember one line under the request it names."""
        rid = _rid_of(line[1])
        if rid is None:
            self.engine.append(line)
        elif rid not in self.ended:
            lines = self.by_rid.get(rid)
            if lines is None:
                lines = self.by_rid[rid] = deque(maxlen=self.size)
            lines.append(line)

    def forget(self, rid: int) -> None:
        """Drop a released request's lines."""
        self.by_rid.pop(rid, None)
        self.ended.add(rid)

    def context(self, rid: int | None, step: list[Line]) -> list[Line]:
        """Return the recent lines to show for a violation about ``rid`` found in ``step``."""
        if rid is None:
            return list(self.engine)
        if rid in self.by_rid:
            return list(self.by_rid[rid])
        return [line for line in step if _rid_of(line[1]) == rid][-self.size :] if self.size else []


@attrs.frozen
class Finding:
    """One violation where the trace shows it: its step's line (or the end marker's) and the lines shown with it."""

    line: int
    violation: Violation
    context: tuple[Line, ...]


@attrs.define
class Report:
    """What checking one trace found."""

    name: str
    steps: int = 0
    requests: int = 0  #: client requests submitted
    complete: bool = False
    last_line: int = 1  #: the trace's last line (where an incomplete trace stops)
    findings: list[str] = attrs.field(factory=list)  #: one rendered block per violation
    found: list[Finding] = attrs.field(factory=list)  #: the same violations, as values (for ``omni_fsm.view``)
    header: TraceHeader | None = None  #: the pipeline the trace names (set once its header is read)
    #: an incomplete trace's last step, not judged (its observations may not all be written yet): its first line
    unjudged: int | None = None
    #: what an older trace does not carry, as ``identity (invariants judged less)``: those parts are not judged
    not_observable: tuple[str, ...] = ()

    def incomplete(self) -> str:
        """Return what an incomplete trace's check leaves out (empty for a complete trace)."""
        if self.complete:
            return ""
        last = f"; its last step (from line {self.unjudged}) not judged: it may be partial" if self.unjudged else ""
        return f"no end marker: end-of-history rules not applied{last}"

    def summary(self) -> str:
        """Return the one-line summary."""
        tail = "" if self.complete else f" ({self.incomplete()})"
        if self.not_observable:
            version = self.header.version if self.header is not None else "an older"
            tail += f" (not observable in a version-{version} trace, not judged: {'; '.join(self.not_observable)})"
        return f"{self.name}: {self.steps} steps, {self.requests} requests, {len(self.findings)} violations{tail}"

    def missing_end(self) -> str:
        """Return the ``FILE:LINE: reason`` line of an incomplete trace."""
        return (f'{self.name}:{self.last_line}: incomplete trace: no end marker {{"end": true}} after the last line '
                "(cut off, or still being written); --allow-incomplete checks the steps present")


def _render(name: str, line: int, violation: Violation, context: list[Line]) -> str:
    who = "engine" if violation.rid is None else f"request {violation.rid}"
    head = f"{name}:{line}: {violation.invariant} ({violation.check}) {who}: {violation.message}"
    if not context:
        return head
    shown = "\n".join(f"    {number}: {dumps(item)}" for number, item in context)
    return f"{head}\n  recent lines of the {who}:\n{shown}"


def _note(report: Report, line: int, violation: Violation, context: list[Line]) -> None:
    report.findings.append(_render(report.name, line, violation, context))
    report.found.append(Finding(line, violation, tuple(context)))


def _judge_step(monitor: Monitor, step: Step, recent: Recent, report: Report) -> None:
    lines = list(_lines_of(step))
    for line in lines:
        recent.note(line)
    for violation in monitor.step(step.event, step.outputs):
        _note(report, step.line, violation, recent.context(violation.rid, lines))
    for obs in step.outputs:
        if isinstance(obs, ob.Submitted) and obs.parent < 0:
            report.requests += 1
        elif isinstance(obs, ob.Released):
            recent.forget(obs.rid)
    report.steps += 1


def check_trace(path: str, context: int = DEFAULT_CONTEXT, progress: Progress | None = None,
                keep: list[Step] | None = None) -> Report:
    """Return the report of checking the trace at ``path``; raise ``MalformedInput`` if it is not one.

    ``progress`` is called every ``PROGRESS_EVERY`` seconds once the check has run ``PROGRESS_AFTER``;
    ``keep``, when given, receives every step read (``omni-fsm view`` draws them).
    """
    started = time.perf_counter()
    due = started + PROGRESS_AFTER
    with read_trace(path) as reader:
        head = reader.header
        blind = NOT_CARRIED[head.version]
        monitor = Monitor(head.kinds, head.final, head.capacity, blind)
        recent = Recent(context)
        report = Report(reader.name, header=head, not_observable=tuple(
            f"{identity} ({', '.join(JUDGED_LESS_WITHOUT[identity])})" for identity in sorted(blind)))
        last: Step | None = None  # judged once the next step (or the end marker) shows it whole
        for step in reader:
            if keep is not None:
                keep.append(step)
            if last is not None:
                _judge_step(monitor, last, recent, report)
                if progress is not None and report.steps % 1024 == 0 and time.perf_counter() >= due:
                    due = time.perf_counter() + PROGRESS_EVERY
                    progress(report.steps, last.line, due - PROGRESS_EVERY - started)
            last = step
    report.complete, report.last_line = reader.complete, reader.last_line
    if last is not None and reader.complete:
        _judge_step(monitor, last, recent, report)
    elif last is not None:
        report.unjudged = last.line
    if reader.complete:
        for violation in monitor.finish():
            _note(report, reader.end_line, violation, recent.context(violation.rid, []))
    return report


__all__ = ["DEFAULT_CONTEXT", "PROGRESS_AFTER", "PROGRESS_EVERY", "Finding", "Line", "Progress", "Recent", "Report",
           "check_trace"]
