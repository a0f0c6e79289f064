"""Diagrams and the lifecycle document, drawn from the same table the core runs (``SPEC``).

``mermaid`` returns a ``stateDiagram-v2`` drawn by ``transitions``' ``GraphMachine``;
``render_lifecycle_markdown`` returns the whole ``docs/lifecycle.md``. The module stays light:
``transitions.extensions`` (which loads asyncio) is imported only while drawing.
"""

from __future__ import annotations

import argparse
import enum
from typing import Any, Literal

from omni_fsm.errors import ConfigError
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


def mermaid(spec: Spec = SPEC, which: Which = "request") -> str:
    """Return ``spec``'s request (or engine) table as mermaid ``stateDiagram-v2`` text."""
    from transitions.extensions import GraphMachine  # loads asyncio: only when drawing

    rows, states, initial, terminal = _table(spec, which)
    transitions = [
        {"trigger": group[0].event.__name__, "source": source, "dest": target,
         "label": EDGE_JOIN.join(row.label() for row in group)}
        for (source, target), group in edges(rows).items()
    ]
    model = _Placeholder()
    machine: Any = GraphMachine(model=model, states=states, initial=initial, transitions=transitions,
                                auto_transitions=False, graph_engine="mermaid",
                                title=f"title: {spec.name}, {which} table")
    machine.model_graphs[id(model)].reset_styling()  # no 'active' state: this is the table, not a run
    # the title doubles as mermaid's front matter, which must be a YAML mapping: hence "title: ..."
    text: str = model.get_graph().draw(None)  # type: ignore[attr-defined]
    finals = [f"  {state.name} --> [*]" for state in states if state in terminal]
    return "\n".join([text.rstrip("\n"), *finals]) + "\n"


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


def render_lifecycle_markdown(spec: Spec = SPEC) -> str:
    """Return the whole ``docs/lifecycle.md``: explanation, both diagrams and both tables."""
    on_terminal = ", ".join(effect.name for effect in spec.on_terminal)
    lines = [
        "# The request lifecycle",
        "",
        f"<!-- Generated from omni_fsm/spec/table.py by omni_fsm/cli/diagram.py; do not edit. Run `{REGENERATE}`. -->",
        "",
        "One table (`omni_fsm.spec.table.SPEC`) is the whole lifecycle: rows `source --event [guards]--> target /"
        " effects`, tried in order; the first row whose guards hold wins. The core's compiled fast path, the"
        " `transitions` reference machine, the explorer and this page are all built from it.",
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
        "## Request lifecycle",
        "",
        "```mermaid",
        mermaid(spec, "request").rstrip("\n"),
        "```",
        "",
        "## Engine control plane",
        "",
        "```mermaid",
        mermaid(spec, "engine").rstrip("\n"),
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


__all__ = ["add_arguments", "edges", "main", "mermaid", "render_lifecycle_markdown"]
