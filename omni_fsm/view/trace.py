"""A checked trace as one HTML page: a lane per request, the violations with their rules, every line linked.

``render_trace(report, steps, rules)`` returns the page; ``trace_sections`` returns its sections, for a page
of one's own (``omni_fsm.view.page.render_page``). Pure: the caller reads the trace and checks it
(``omni_fsm.trace.check.check_trace(path, keep=steps)``) and passes the rules' text (``specs/invariants.toml``,
through ``omni_fsm.registry``); nothing here opens a file. A *lane* is one request id (a client request, an
``n>1`` child, a CFG companion): its events and observations in trace order, each chip naming its stage (and
replica, where the line names one), its terminal and its abort marked; it is labelled with the engine's id and
the client's own (``Submit.request_id``, a version-3 trace's), and the filter finds either.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob
from omni_fsm.trace.codec import dumps, snake_name
from omni_fsm.view.page import Section, esc, render_page

if TYPE_CHECKING:
    from omni_fsm.trace.check import Finding, Report
    from omni_fsm.trace.codec import Item, TraceHeader
    from omni_fsm.trace.jsonl import Step

#: An invariant's (title, rule text), by ID: what the page quotes for each violation.
RuleText = tuple[str, str]
_ABORTS = (ev.Abort, ev.AbortDone, ev.AbortFailed, ev.StageAborted, ev.ShutdownAbort, ob.AbortRequested,
           ob.AbortSent, ob.AbortCommitted, ob.AbortAnswered)
_FAILURES = (ev.StageFailed, ev.ReplicaLost, ev.EngineDied, ob.Rejected)
STAGE_COLOURS = 6  #: stage chips cycle through this many colours (``st0`` ...)


@attrs.frozen
class Shown:
    """One line of the trace as the page draws it."""

    line: int
    kind: str  #: "header", "in" (an event), "out" (an observation) or "end"
    name: str  #: the line's name (``stage_output``), or the kind for the header and the end marker
    rid: int | None  #: the request it names (``None``: engine-wide, the header, the end marker)
    stage: str  #: "s1", "s1.r0" with the replica when the line names one, "s0→s1" for a forward, "" for none
    text: str  #: the line as JSON (re-encoded: the canonical form of what was read)
    marks: frozenset[str]  #: of "terminal", "abort", "failure", "released", "dropped"


@attrs.define
class Lane:
    """One request id's lines, and what its ``submitted`` and its terminal say about it."""

    rid: int
    lines: list[Shown] = attrs.field(factory=list)
    role: str = "unsubmitted"  #: "client", "child", "companion"; "unsubmitted" when never submitted
    parent: int = -1
    n: int = 1
    companions: int = 0
    outcome: str = "open"  #: "finished/stop", "aborted/abort", ...; "released", "rejected", "open"
    violations: list[tuple[str, str]] = attrs.field(factory=list)  #: (``v1``, its invariant) per violation about it
    request_id: str | None = None  #: the client's own id for its request (a dependent: its parent's)


def _stage(item: Item) -> str:
    if isinstance(item, ob.Forwarded):
        return f"s{item.src}→s{item.dst}"
    stage, replica = getattr(item, "stage", None), getattr(item, "replica", None)
    if not isinstance(stage, int):
        return ""
    return f"s{stage}" + (f".r{replica}" if isinstance(replica, int) and replica >= 0 else "")


def _marks(item: Item) -> frozenset[str]:
    marks = set()
    if isinstance(item, ob.Emitted) and item.finished:
        marks.add("terminal")
        if item.outcome is not None and item.outcome.value != "finished":
            marks.add("abort" if item.outcome.value == "aborted" else "failure")
    if isinstance(item, _ABORTS):
        marks.add("abort")
    if isinstance(item, _FAILURES) or (isinstance(item, ob.RpcAnswered) and not item.ok):
        marks.add("failure")
    if isinstance(item, ob.Released):
        marks.add("released")
    if isinstance(item, ob.Dropped):
        marks.add("dropped")
    return frozenset(marks)


def _shown(line: int, item: Item) -> Shown:
    rid = getattr(item, "rid", None)
    kind = "in" if isinstance(item, ev.Event) else "out"
    return Shown(line, kind, snake_name(type(item)), rid if isinstance(rid, int) and rid >= 0 else None,
                 _stage(item), dumps(item), _marks(item))


def trace_lines(header: TraceHeader, steps: Sequence[Step], end_line: int | None) -> list[Shown]:
    """Return every line of the trace, in order: the header, each step's event and outputs, the end marker."""
    head = json.dumps(header.encode(), separators=(",", ":"))
    shown = [Shown(1, "header", "header", None, "", head, frozenset())]
    for step in steps:
        first = step.line
        if step.event is not None:
            shown.append(_shown(first, step.event))
            first += 1
        shown += [_shown(number, obs) for number, obs in enumerate(step.outputs, first)]
    if end_line is not None:
        shown.append(Shown(end_line, "end", "end", None, "", '{"end":true}', frozenset()))
    return shown


def _outcome(lane: Lane, item: Item) -> None:
    if isinstance(item, ev.Submit):
        lane.request_id = item.request_id
    elif isinstance(item, ob.Submitted):
        lane.role, lane.parent, lane.n, lane.companions = item.role.value, item.parent, item.n, item.companions
    elif isinstance(item, ob.Emitted) and item.finished and item.outcome is not None:
        reason = f"/{item.reason.value}" if item.reason is not None else ""
        lane.outcome = f"{item.outcome.value}{reason}"
    elif isinstance(item, ob.Rejected) and lane.outcome == "open":
        lane.outcome = "rejected"
    elif isinstance(item, ob.Released) and lane.outcome == "open":
        lane.outcome = "released"


def request_lanes(steps: Sequence[Step], lines: Sequence[Shown]) -> dict[int, Lane]:
    """Return one lane per request id named in the trace, in order of first appearance."""
    lanes: dict[int, Lane] = {}
    for shown in lines:
        if shown.rid is not None:
            lanes.setdefault(shown.rid, Lane(shown.rid)).lines.append(shown)
    for step in steps:
        for item in (step.event, *step.outputs):
            rid = getattr(item, "rid", None)
            if item is not None and isinstance(rid, int) and rid in lanes:
                _outcome(lanes[rid], item)
    for lane in lanes.values():  # a child or companion is part of its parent's request: it carries the client's id
        parent = lanes.get(lane.parent)
        if lane.request_id is None and parent is not None:
            lane.request_id = parent.request_id
    return lanes


def _offending(found: Sequence[Finding]) -> dict[str, list[int]]:
    """Return each violation's id (``v1`` ...) -> the lines that show it: its step's line and its context."""
    return {f"v{i}": sorted({f.line, *(number for number, _ in f.context)}) for i, f in enumerate(found, 1)}


# -- sections ----------------------------------------------------------------------------------


def _stages(header: TraceHeader) -> str:
    return " → ".join(f'<span class="chip st{i % STAGE_COLOURS}">s{i} {esc(kind.value)}{"*" if final else ""}</span>'
                      for i, (kind, final) in enumerate(zip(header.kinds, header.final, strict=True)))


def _summary(report: Report, header: TraceHeader, lanes: Mapping[int, Lane], lines: int) -> Section:
    complete = "yes (end marker read)" if report.complete else f"no: {report.incomplete()}"
    rows = [("trace", f"<code>{esc(report.name)}</code>"), ("pipeline", _stages(header) + " (* = final output)"),
            ("capacity", f"{header.capacity} running slots per stage"), ("steps", str(report.steps)),
            ("lines", str(lines)), ("client requests", str(report.requests)),
            ("request lanes", f'<span id="lanes-total">{len(lanes)}</span> (clients, children, companions)'),
            ("violations", f'<span id="violations-total">{len(report.found)}</span>'), ("complete", esc(complete))]
    table = "\n".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
    legend = ('<p class="legend muted">Chips: <span class="item in">event</span> <span class="item out">'
              'observation</span> <span class="item out terminal">terminal</span> <span class="item in abort">'
              'abort</span> <span class="item in failure">failure</span> <span class="item out offending">'
              "a line that shows a violation</span>; the chip's colour is its stage.</p>")
    return Section("summary", "Summary", f'<table class="facts">{table}</table>\n{legend}')


def _violation(vid: str, found: Finding, lines: Sequence[int], text: Mapping[int, str],
               rules: Mapping[str, RuleText]) -> str:
    v = found.violation
    title, rule = rules.get(v.invariant, ("(not in the invariant registry)", ""))
    who = "the engine" if v.rid is None else f'<a href="#rid-{v.rid}">request {v.rid}</a>'
    shown = "\n".join(f'<li data-line="{n}"><a href="#L{n}">line {n}</a> <code>{esc(text.get(n, ""))}</code></li>'
                      for n in lines)
    return (f'<article class="violation" id="{vid}" data-invariant="{esc(v.invariant)}" tabindex="0">\n'
            f'<h3><span class="rule-id">{esc(v.invariant)}</span> <span class="rule-title">{esc(title)}</span></h3>\n'
            + (f'<blockquote class="rule-text">{esc(rule)}</blockquote>\n' if rule else "")
            + f'<p>Check <code>{esc(v.check)}</code> on {who}, at <a href="#L{found.line}">line {found.line}</a>: '
            f'<span class="message">{esc(v.message)}</span></p>\n'
            f'<p class="muted">The lines that show it (click to mark them):</p>\n<ol class="shown">{shown}</ol>\n'
            "</article>")


def _violations(report: Report, offending: Mapping[str, list[int]], text: Mapping[int, str],
                rules: Mapping[str, RuleText]) -> Section:
    if not report.found:
        tail = "" if report.complete else f" among the steps present ({report.incomplete()})"
        body = f'<p class="clean" id="no-violations">No violation: every invariant holds{esc(tail)}.</p>'
    else:
        body = "\n".join(_violation(vid, f, offending[vid], text, rules)
                         for vid, f in zip(offending, report.found, strict=True))
    return Section("violations", f"Violations ({len(report.found)})", body)


def _chip(shown: Shown, marked: Mapping[int, list[str]]) -> str:
    classes = [shown.kind, *sorted(shown.marks)]
    if shown.stage:
        classes.append(f"st{int(shown.stage[1:].split('→')[0].split('.')[0]) % STAGE_COLOURS}")
    if shown.line in marked:
        classes.append("offending")
    stage = f"<sub>{esc(shown.stage)}</sub>" if shown.stage else ""
    return (f'<li class="item {" ".join(classes)}" data-line="{shown.line}"><a href="#L{shown.line}" '
            f'title="{shown.line}: {esc(shown.text)}">{esc(shown.name)}{stage}</a></li>')


def _lane(lane: Lane, marked: Mapping[int, list[str]]) -> str:
    parent = f' of <a href="#rid-{lane.parent}">{lane.parent}</a>' if lane.parent >= 0 else ""
    extra = (f" n={lane.n}" if lane.n > 1 else "") + (f" companions={lane.companions}" if lane.companions else "")
    badges = " ".join(f'<a class="badge bad" href="#{vid}">{esc(inv)}</a>' for vid, inv in lane.violations)
    client = lane.request_id if lane.request_id is not None else ""
    search = " ".join([str(lane.rid), client, lane.role, lane.outcome, *(inv for _, inv in lane.violations)]).lower()
    outcome = lane.outcome.split("/")[0]
    classes = "lane violating" if lane.violations else "lane"
    chips = "".join(_chip(shown, marked) for shown in lane.lines)
    label = f"<b>request {lane.rid}</b>" + (f' <code class="client-id">{esc(client)}</code>' if client else "")
    return (f'<div class="{classes}" id="rid-{lane.rid}" data-rid="{lane.rid}" data-search="{esc(search)}">'
            f'<div class="lane-head">{label} <span class="muted">{esc(lane.role)}{parent}'
            f'{esc(extra)}</span><br><span class="badge out-{esc(outcome)}">{esc(lane.outcome)}</span> {badges}'
            f'</div><ol class="items">{chips}</ol></div>')


def _lanes(lanes: Mapping[int, Lane], marked: Mapping[int, list[str]]) -> Section:
    tools = ('<p class="tools"><input id="lane-filter" type="search" placeholder="filter: id, client id, role, '
             'outcome, invariant" aria-label="filter the lanes"> <label><input id="lane-only-violations" '
             'type="checkbox"> only lanes with a violation</label> <span class="muted" id="lane-count"></span></p>')
    body = "\n".join(_lane(lane, marked) for lane in lanes.values())
    return Section("lanes", f"Requests ({len(lanes)} lanes)", f'{tools}\n<div class="lanes">\n{body}\n</div>')


def _engine(lines: Sequence[Shown], marked: Mapping[int, list[str]]) -> Section:
    engine = [s for s in lines if s.rid is None and s.kind in ("in", "out")]
    chips = "".join(_chip(shown, marked) for shown in engine) or '<li class="muted">none</li>'
    return Section("engine", "Engine-wide lines", f'<div class="engine-lane"><ol class="items">{chips}</ol></div>')


def _listing(lines: Sequence[Shown], marked: Mapping[int, list[str]]) -> Section:
    def row(s: Shown) -> str:
        mark = f' offending" data-violations="{" ".join(marked[s.line])}' if s.line in marked else ""
        rid = f' data-rid="{s.rid}"' if s.rid is not None else ""
        return (f'<div class="tl {s.kind}{mark}" id="L{s.line}" data-line="{s.line}"{rid}><a class="no" '
                f'href="#L{s.line}">{s.line}</a> <code>{esc(s.text)}</code></div>')

    return Section("lines", f"Trace lines ({len(lines)})", '<div class="listing">\n'
                   + "\n".join(row(s) for s in lines) + "\n</div>")


def trace_sections(report: Report, steps: Sequence[Step], rules: Mapping[str, RuleText]) -> list[Section]:
    """Return the page's sections: summary, violations, request lanes, engine-wide lines, every line.

    ``report`` and ``steps`` come from one ``check_trace(path, keep=steps)``; ``rules`` maps invariant IDs to
    their (title, rule text).
    """
    if report.header is None:
        raise ValueError("the report names no trace header: check the trace with check_trace first")
    lines = trace_lines(report.header, steps, report.last_line if report.complete else None)
    lanes = request_lanes(steps, lines)
    offending = _offending(report.found)
    marked: dict[int, list[str]] = {}
    for vid, numbers in offending.items():
        for number in numbers:
            marked.setdefault(number, []).append(vid)
    for vid, found in zip(offending, report.found, strict=True):
        if found.violation.rid is not None and found.violation.rid in lanes:
            lanes[found.violation.rid].violations.append((vid, found.violation.invariant))
    text = {s.line: s.text for s in lines}
    return [_summary(report, report.header, lanes, len(lines)), _violations(report, offending, text, rules),
            _lanes(lanes, marked), _engine(lines, marked), _listing(lines, marked)]


def render_trace(report: Report, steps: Sequence[Step], rules: Mapping[str, RuleText]) -> str:
    """Return the whole HTML page of one checked trace (see ``trace_sections``)."""
    data = {"violations": {vid: {"invariant": f.violation.invariant, "rid": f.violation.rid,
                                 "message": f.violation.message, "lines": lines}
                           for (vid, lines), f in zip(_offending(report.found).items(), report.found, strict=True)}}
    return render_page(f"Trace {report.name}", trace_sections(report, steps, rules), style=TRACE_STYLE,
                       script=TRACE_SCRIPT, data=data, subtitle=report.summary())


def _colours() -> Iterator[str]:
    for i, colour in enumerate(("#dbe8ff", "#dcf3e3", "#f6e3c8", "#ecdcf7", "#d8f1f3", "#f4dbe4")[:STAGE_COLOURS]):
        yield f".st{i} {{ background: {colour}; }}"


TRACE_STYLE = """
.chip { padding: 1px 6px; border-radius: 8px; border: 1px solid var(--line); }
.legend .item { display: inline-block; }
.lanes { display: flex; flex-direction: column; gap: 4px; }
.lane, .engine-lane { display: flex; gap: 10px; background: #fff; border: 1px solid var(--line); border-radius: 6px;
                      padding: 6px 8px; }
.lane[hidden] { display: none; }
.lane.violating { border-color: var(--bad); box-shadow: inset 4px 0 0 var(--bad); }
.lane-head { flex: 0 0 210px; }
ol.items { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 3px; align-content: start; }
.item { font: 11px/1.3 ui-monospace, monospace; border: 1px solid #c5cbd6; border-radius: 4px; padding: 1px 4px;
        background: #fff; }
.item a { color: inherit; text-decoration: none; }
.item.in { border-style: solid; font-weight: 600; }
.item.out { border-style: dashed; }
.item.terminal { outline: 2px solid #222; }
.item.abort { color: #8a4b00; box-shadow: inset 0 -3px 0 #f0a020; }
.item.failure { color: var(--bad); box-shadow: inset 0 -3px 0 var(--bad); }
.item.offending, .tl.offending { background: var(--badbg) !important; border-color: var(--bad); }
.focus { outline: 3px solid #f0a020 !important; }
.badge { font-size: 11px; padding: 0 5px; border-radius: 8px; background: #eef0f4; text-decoration: none;
         color: inherit; }
.badge.bad { background: var(--bad); color: #fff; }
.badge.out-finished { background: var(--okbg); color: var(--ok); }
.badge.out-aborted { background: #fff0d9; color: #8a4b00; }
.badge.out-failed, .badge.out-fatal, .badge.out-rejected { background: var(--badbg); color: var(--bad); }
.violation { background: #fff; border: 1px solid var(--bad); border-left: 6px solid var(--bad); border-radius: 6px;
             padding: 4px 12px; margin: 10px 0; cursor: pointer; }
.violation h3 { margin: 6px 0; font-size: 15px; }
.rule-id { background: var(--bad); color: #fff; padding: 1px 6px; border-radius: 4px; font-family: monospace; }
.rule-text { margin: 4px 0 8px; padding: 4px 10px; border-left: 3px solid var(--line); color: var(--muted); }
.message { font-weight: 600; }
.clean { background: var(--okbg); color: var(--ok); padding: 8px 12px; border-radius: 6px; }
.listing { background: #fff; border: 1px solid var(--line); max-height: 70vh; overflow: auto; }
.tl { white-space: pre; padding: 0 6px; }
.tl .no { display: inline-block; width: 4em; text-align: right; color: var(--muted); margin-right: 8px; }
.tl.in { background: #f6f8fb; }
.tl:target { background: var(--mark) !important; }
.tools input[type=search] { width: 22em; }
""" + "\n".join(_colours()) + "\n"

TRACE_SCRIPT = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("page-data").textContent);
  var lanes = Array.prototype.slice.call(document.querySelectorAll(".lane"));
  var filter = document.getElementById("lane-filter");
  var only = document.getElementById("lane-only-violations");
  var count = document.getElementById("lane-count");
  function apply() {
    var q = filter.value.trim().toLowerCase(), shown = 0;
    lanes.forEach(function (lane) {
      var ok = (!q || lane.getAttribute("data-search").indexOf(q) >= 0) &&
               (!only.checked || lane.classList.contains("violating"));
      lane.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + lanes.length + " lanes shown";
  }
  function mark(vid) {
    document.querySelectorAll(".focus").forEach(function (el) { el.classList.remove("focus"); });
    var found = data.violations[vid];
    if (!found) { return; }
    found.lines.forEach(function (n) {
      document.querySelectorAll('.item[data-line="' + n + '"], .tl[data-line="' + n + '"]').forEach(
        function (el) { el.classList.add("focus"); });
    });
  }
  filter.addEventListener("input", apply);
  only.addEventListener("change", apply);
  document.querySelectorAll(".violation").forEach(function (el) {
    el.addEventListener("click", function () { mark(el.id); });
    el.addEventListener("keydown", function (e) { if (e.key === "Enter") { mark(el.id); } });
  });
  apply();
})();
"""

__all__ = ["STAGE_COLOURS", "TRACE_SCRIPT", "TRACE_STYLE", "Lane", "RuleText", "Shown", "render_trace",
           "request_lanes", "trace_lines", "trace_sections"]
