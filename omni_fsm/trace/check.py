"""``omni-fsm check FILE``: judge a recorded trace against the invariants.

The trace is streamed through ``Monitor.step`` (and ``Monitor.finish`` when it ends with the end
marker). Exit codes: 0 clean; 1 violations, each with its invariant, request, line and that
request's recent lines; 2 malformed input, as ``FILE:LINE: reason`` on stderr; 3 an internal
error; 4 incomplete: no violation, but no end marker either (cut off, or still being written),
as ``FILE:LINE: ...`` on stderr, unless ``--allow-incomplete`` accepts a prefix; and, from
``omni_fsm.cli``, 130 interrupted, 141 stdout's reader gone. Memory: the monitor's view per
distinct id, plus the last ``--context`` lines of each open request (dropped at its ``released``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator

import attrs

from omni_fsm.errors import MalformedInput
from omni_fsm.invariants import Monitor, Violation
from omni_fsm.spec import observations as ob
from omni_fsm.trace.jsonl import Item, Step, dumps, read_trace

CLEAN, VIOLATIONS, MALFORMED, INTERNAL, INCOMPLETE = 0, 1, 2, 3, 4
DEFAULT_CONTEXT = 6
MAX_CONTEXT = 10_000  #: the most recent lines ``--context`` may keep per request
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


@attrs.define
class Report:
    """What checking one trace found."""

    name: str
    steps: int = 0
    requests: int = 0  #: client requests submitted
    complete: bool = False
    last_line: int = 1  #: the trace's last line (where an incomplete trace stops)
    findings: list[str] = attrs.field(factory=list)  #: one rendered block per violation

    def summary(self) -> str:
        """Return the one-line summary."""
        tail = "" if self.complete else " (no end marker: end-of-history rules not applied)"
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


def _judge_step(monitor: Monitor, step: Step, recent: Recent, report: Report) -> None:
    lines = list(_lines_of(step))
    for line in lines:
        recent.note(line)
    for violation in monitor.step(step.event, step.outputs):
        report.findings.append(_render(report.name, step.line, violation, recent.context(violation.rid, lines)))
    for obs in step.outputs:
        if isinstance(obs, ob.Submitted) and obs.parent < 0:
            report.requests += 1
        elif isinstance(obs, ob.Released):
            recent.forget(obs.rid)
    report.steps += 1


def check_trace(path: str, context: int = DEFAULT_CONTEXT, progress: Progress | None = None) -> Report:
    """Return the report of checking the trace at ``path``; raise ``MalformedInput`` if it is not one.

    ``progress`` is called every ``PROGRESS_EVERY`` seconds once the check has run ``PROGRESS_AFTER``.
    """
    started = time.perf_counter()
    due = started + PROGRESS_AFTER
    with read_trace(path) as reader:
        head = reader.header
        monitor = Monitor(head.kinds, head.final, head.capacity)
        recent = Recent(context)
        report = Report(reader.name)
        for step in reader:
            _judge_step(monitor, step, recent, report)
            if progress is not None and report.steps % 1024 == 0 and time.perf_counter() >= due:
                due = time.perf_counter() + PROGRESS_EVERY
                progress(report.steps, step.line, due - PROGRESS_EVERY - started)
    report.complete, report.last_line = reader.complete, reader.last_line
    if reader.complete:
        for violation in monitor.finish():
            report.findings.append(_render(report.name, reader.end_line, violation,
                                           recent.context(violation.rid, [])))
    return report


def _context_size(text: str) -> int:
    """Return ``--context``'s value: an integer from 0 to ``MAX_CONTEXT``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_CONTEXT}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``check`` subcommand's arguments."""
    parser.add_argument("file", metavar="FILE", help="a JSONL lifecycle trace (see docs/trace-format.md)")
    parser.add_argument("--context", metavar="N", type=_context_size, default=DEFAULT_CONTEXT,
                        help=f"recent lines shown per violation, 0 to {MAX_CONTEXT} (default {DEFAULT_CONTEXT})")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="judge a trace without its end marker (cut off, or still being written) as the "
                        "steps present: exit 0 if none breaks an invariant (default: such a trace exits 4)")


def _progress_line(name: str) -> Progress:
    def show(steps: int, line: int, seconds: float) -> None:
        print(f"{name}: checking: {steps:,} steps, line {line:,}, {seconds:.0f} s", file=sys.stderr, flush=True)

    return show


def main(args: argparse.Namespace) -> int:
    """Check ``args.file``; print the report; return the exit code (0 clean, 1, 2, 3, 4: see the module)."""
    try:
        report = check_trace(args.file, args.context, _progress_line(args.file))
    except MalformedInput as err:
        print(err, file=sys.stderr)
        return MALFORMED
    except Exception as err:  # a bug here or in the monitor: say so in one line, no traceback
        print(f"{args.file}: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return INTERNAL
    for finding in report.findings:
        print(finding)
    print(report.summary())
    if not report.complete and not args.allow_incomplete:
        print(report.missing_end(), file=sys.stderr)
    if report.findings:  # what broke in a prefix is broken in the whole history
        return VIOLATIONS
    return CLEAN if report.complete or args.allow_incomplete else INCOMPLETE


__all__ = ["CLEAN", "INCOMPLETE", "INTERNAL", "MALFORMED", "VIOLATIONS", "Recent", "Report", "add_arguments",
           "check_trace", "main"]
