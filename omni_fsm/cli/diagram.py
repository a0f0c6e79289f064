"""Diagrams and the lifecycle document, drawn from the same table the core runs (``SPEC``).

``mermaid`` returns a ``stateDiagram-v2`` drawn by ``transitions``' ``GraphMachine`` (of a whole table, or
of the rows a ``View`` selects); ``render_lifecycle_markdown`` returns the whole ``docs/lifecycle.md``. The
module stays light: ``transitions.extensions`` (which loads asyncio) is imported only while drawing.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from omni_fsm.errors import ConfigError
from omni_fsm.spec import events as ev
from omni_fsm.spec.table import MISS_POLICY, SPEC, Effect, Row, Spec
from omni_fsm.spec.vocabulary import BOUND, ENGINE_TERMINAL, HOLDS_SLOT, LIVE, PARKED, TERMINAL, EngineState, ReqState

Which = Literal["request", "engine"]
REGENERATE = "omni-fsm diagram --markdown > docs/lifecycle.md"
#: Between the merged labels of parallel edges (one line per row in the rendered diagram).
EDGE_JOIN = "<br/>"


class _Placeholder:
    """The one model a GraphMachine needs before it can draw (a static machine cannot)."""

    state: enum.Enum


def _table(spec: Spec, which: Which) -> tuple[tuple[Row, ...], type[enum.Enum], enum.Enum, frozenset[Any]]:
    if which == "request":
        return spec.rows, ReqState, ReqState.NEW, TERMINAL
    if which == "engine":
        return spec.engine_rows, EngineState, EngineState.RUNNING, ENGINE_TERMINAL
    raise ConfigError(f"unknown table {which!r}: expected 'request' or 'engine'")


def edges(rows: tuple[Row, ...]) -> dict[tuple[enum.Enum, enum.Enum], list[Row]]:
    """Return the rows grouped by ``(source, target)``, in table order (parallel edges merged)."""
    grouped: dict[tuple[enum.Enum, enum.Enum], list[Row]] = {}
    for row in rows:
        grouped.setdefault((row.source, row.target), []).append(row)
    return grouped


@attrs.frozen
class View:
    """A readable part of one table: the rows whose event is in ``events``, or that leave or enter a state of
    ``states``; but not the rows leaving a state of ``never``, nor those whose event is in ``elsewhere`` (another
    view draws them). ``every_row``: the whole table."""

    anchor: str
    title: str
    which: Which
    events: frozenset[type[ev.Event]] = frozenset()
    states: frozenset[enum.Enum] = frozenset()
    never: frozenset[enum.Enum] = frozenset()
    elsewhere: frozenset[type[ev.Event]] = frozenset()
    every_row: bool = False

    def selects(self, row: Row) -> bool:
        """Return whether ``row`` is drawn in this view."""
        if self.every_row:
            return True
        chosen = row.event in self.events or row.source in self.states or row.target in self.states
        return chosen and row.source not in self.never and row.event not in self.elsewhere

    def rows(self, spec: Spec = SPEC) -> tuple[Row, ...]:
        """Return the rows of ``spec``'s table that this view draws, in table order."""
        return tuple(row for row in _table(spec, self.which)[0] if self.selects(row))

    def rule(self) -> str:
        """Return the selection rule in words (markdown)."""
        if self.every_row:
            return f"every row of the {self.which} table"
        said = []
        if self.events:
            said.append("event is " + ", ".join(f"`{e.__name__}`" for e in sorted(self.events, key=_by_name)))
        if self.states:
            said.append("leave or enter " + ", ".join(f"`{s.name}`" for s in sorted(self.states, key=_by_name)))
        but = []
        if self.never:
            but.append("leaving " + ", ".join(f"`{s.name}`" for s in sorted(self.never, key=_by_name)))
        if self.elsewhere:
            but.append("of " + ", ".join(f"`{e.__name__}`" for e in sorted(self.elsewhere, key=_by_name)))
        return "the rows whose " + " or which ".join(said) + (", except those " + " or ".join(but) if but else "")


def _by_name(thing: Any) -> str:
    return str(getattr(thing, "__name__", getattr(thing, "name", "")))


_ABORTING = frozenset({ReqState.ABORTING, ReqState.ABORTING_CHILDREN})
_SAMPLES: frozenset[type[ev.Event]] = frozenset({ev.ChildEnded, ev.CompanionEnded})
_FAILURES: frozenset[type[ev.Event]] = frozenset({ev.StageFailed, ev.ReplicaLost, ev.EngineFailed, ev.ShutdownAbort})
#: The diagram's views: each a rule over the rows' events and states (no list of edges); every row of both
#: tables is in at least one (tests/fsm/test_diagram.py says so).
VIEWS: tuple[View, ...] = (
    View("admission-and-scheduling", "Admission and scheduling", "request",
         events=frozenset({ev.Submit, ev.Admit, ev.Scheduled, ev.Preempted, ev.AwaitGrammar, ev.AwaitRemoteKVs,
                           ev.AwaitStreamingReq, ev.AwaitChunk, ev.InputReady, ev.StageOutput, ev.StageFinished}),
         never=_ABORTING),
    View("abort", "Abort", "request", events=frozenset({ev.Abort, ev.AbortDone, ev.AbortFailed, ev.StageAborted}),
         states=_ABORTING, elsewhere=_SAMPLES | _FAILURES),
    View("samples-and-companions", "Samples and companions", "request", events=_SAMPLES,
         states=frozenset({ReqState.AWAITING_CHILDREN, ReqState.ABORTING_CHILDREN, ReqState.STAGE_DONE}),
         elsewhere=_FAILURES),
    View("failure-and-shutdown", "Failure and shutdown", "request", events=_FAILURES),
    View("control-plane", "Control plane", "engine", every_row=True),
)


def mermaid(spec: Spec = SPEC, which: Which = "request", view: View | None = None) -> str:
    """Return ``spec``'s request (or engine) table, or the rows ``view`` selects, as mermaid ``stateDiagram-v2``."""
    from transitions.extensions import GraphMachine  # loads asyncio: only when drawing

    rows, states, initial, terminal = _table(spec, which if view is None else view.which)
    drawn: Sequence[Any] = list(states)
    title = f"title: {spec.name}, {which} table"
    if view is not None:
        rows, title = view.rows(spec), f"title: {spec.name}, {view.title.lower()}"
        touched = {row.source for row in rows} | {row.target for row in rows}
        drawn = [state for state in states if state in touched]
    start = initial if initial in drawn else drawn[0]
    transitions = [
        {"trigger": group[0].event.__name__, "source": source, "dest": target,
         "label": EDGE_JOIN.join(row.label() for row in group)}
        for (source, target), group in edges(rows).items()
    ]
    model = _Placeholder()
    machine: Any = GraphMachine(model=model, states=drawn, initial=start, transitions=transitions,
                                auto_transitions=False, graph_engine="mermaid", title=title)
    machine.model_graphs[id(model)].reset_styling()  # no 'active' state: this is the table, not a run
    # the title doubles as mermaid's front matter, which must be a YAML mapping: hence "title: ..."
    text: str = model.get_graph().draw(None)  # type: ignore[attr-defined]
    lines = text.rstrip("\n").split("\n")
    if start is not initial:  # a view without the table's initial state starts nowhere: no "[*] -->" arrow
        lines = [line for line in lines if line.strip() != f"[*] --> {start.name}"]
    finals = [f"  {state.name} --> [*]" for state in drawn if state in terminal]
    return "\n".join([*lines, *finals]) + "\n"


def _names(states: frozenset[Any]) -> str:
    return ", ".join(f"`{s.name}`" for s in sorted(states, key=lambda s: s.name))


def _effects(row: Row) -> str:
    to = f" -> `{row.resume_to.name}`" if row.resume_to is not None else ""  # FOLLOW_INTERRUPTED's move
    return ", ".join(e.name + (to if e is Effect.FOLLOW_INTERRUPTED else "") for e in row.effects) or "-"


def _row_table(rows: tuple[Row, ...]) -> list[str]:
    lines = ["| # | source | event [guards] | target | effects |", "| ---: | --- | --- | --- | --- |"]
    lines += [f"| {i} | `{r.source.name}` | {r.label()} | `{r.target.name}` | {_effects(r)} |"
              for i, r in enumerate(rows, 1)]
    return lines


def _view_section(spec: Spec, view: View) -> list[str]:
    rows = view.rows(spec)
    return [f"### {view.title} ({len(rows)} rows)", "", f"Drawn: {view.rule()}.", "", "```mermaid",
            mermaid(spec, view=view).rstrip("\n"), "```", ""]


def render_lifecycle_markdown(spec: Spec = SPEC) -> str:
    """Return the whole ``docs/lifecycle.md``: explanation, the views, the whole request diagram, both tables."""
    on_terminal = ", ".join(effect.name for effect in spec.on_terminal)
    lines = [
        "# The request lifecycle",
        "",
        f"<!-- Generated from omni_fsm/spec/table.py by omni_fsm/cli/diagram.py; do not edit. Run `{REGENERATE}`. -->",
        "",
        "One table (`omni_fsm.spec.table.SPEC`) is the whole lifecycle: rows `source --event [guards]--> target /"
        " effects`, tried in order; the first row whose guards hold wins. The core runs it as it reads (a dict of"
        " each (state, event type)'s rows, built when the core is made); the `transitions` reference machine, the"
        " explorer and this page are all built from it too.",
        "",
        "## States",
        "",
        f"- **Live**: {_names(LIVE)}.",
        f"- **Terminal** (`TERMINAL`; no row leaves one): {_names(TERMINAL)}. Entering any terminal state runs"
        f" the same entry actions: {on_terminal}.",
        f"- **Bound** to the current stage (dispatched there): {_names(BOUND)}.",
        f"- **Parked**, waiting for something outside the scheduler: {_names(PARKED)}.",
        "",
        "## Slots",
        "",
        f"A record occupies one running slot of its current stage exactly while its state is in"
        f" `holds_slot` ({_names(spec.holds_slot)}), or, while `ABORTING`, while the state the abort"
        f" interrupted is. Slots are not effects: the core takes and frees them by comparing the states"
        f" before and after each transition. Terminal states never hold a slot. The table's default is"
        f" {'the same set as' if spec.holds_slot == HOLDS_SLOT else 'NOT'} `HOLDS_SLOT`.",
        "",
        "## Abort",
        "",
        "An abort of a bound request is a small sub-machine: `Abort` acknowledges it, remembers the"
        " interrupted state and asks the bound stage to abort physically (`ABORTING`). Only `AbortDone`"
        " (or the stage finishing the request meanwhile) commits it (`FINISHED_ABORTED`); `AbortFailed`"
        " answers the caller that it failed and resumes the interrupted state; a child or companion, or a"
        " parent whose companions were lost or are being aborted with it, cannot resume (`cannot_resume`)"
        " and asks the stage again."
        " While aborting, scheduler reports move the interrupted state (so a failed abort resumes where"
        " the request really is) and outputs reach no client. `PENDING` and `STAGE_DONE` hold nothing at"
        " a stage and abort at once; an `n>1` parent (`AWAITING_CHILDREN`) aborts its children and ends"
        " after the last one.",
        "",
        "## When no row matches",
        "",
        *(f"- {'an' if origin.value[0] in 'aeiou' else 'a'} *{origin.value}* event with no row: {miss.value};"
          for origin, miss in MISS_POLICY.items()),
        "- a *runtime* report for an id no longer tracked, or for a stage the request is not bound to"
        " (a duplicate, a late completion), never reaches the table: it is dropped and counted.",
        "",
        "## Views",
        "",
        "The whole request table is one large diagram (below). Each view draws the rows a rule over their events"
        " and states selects, so a row the table gains lands in its views unasked; every row of both tables is in"
        " at least one view, and a row may be in several.",
        "",
        *(line for view in VIEWS for line in _view_section(spec, view)),
        "## Request lifecycle (the whole table)",
        "",
        "```mermaid",
        mermaid(spec, "request").rstrip("\n"),
        "```",
        "",
        f"## The request table ({len(spec.rows)} rows, in match order)",
        "",
        *_row_table(spec.rows),
        "",
        f"## The control-plane table ({len(spec.engine_rows)} rows, in match order)",
        "",
        *_row_table(spec.engine_rows),
    ]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``omni-fsm diagram``'s options on ``parser``."""
    one = parser.add_mutually_exclusive_group()  # the markdown document holds both diagrams
    one.add_argument("--engine", action="store_true", help="draw the engine control plane instead")
    one.add_argument("--markdown", action="store_true", help="print the whole docs/lifecycle.md (both diagrams)")


def main(args: argparse.Namespace) -> int:
    """Print the diagram (or the lifecycle document) to stdout; return the exit code."""
    if args.markdown:
        print(render_lifecycle_markdown(), end="")
    else:
        print(mermaid(SPEC, "engine" if args.engine else "request"), end="")
    return 0


__all__ = ["VIEWS", "View", "add_arguments", "edges", "main", "mermaid", "render_lifecycle_markdown"]
