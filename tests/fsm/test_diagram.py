"""The diagrams and docs/lifecycle.md are generated from the table, and the checked-in copy is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from omni_fsm import SPEC, EngineState, ReqState, cli
from omni_fsm.cli.diagram import EDGE_JOIN, REGENERATE, VIEWS, View, mermaid, render_lifecycle_markdown

LIFECYCLE_MD = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def drawn_edges(text: str) -> dict[tuple[str, str], list[str]]:
    """Return ``(source, target) -> labels`` parsed from mermaid ``A --> B: l1<br/>l2`` lines."""
    found: dict[tuple[str, str], list[str]] = {}
    for line in text.splitlines():
        arrow, _, labels = line.strip().partition(": ")
        if " --> " in arrow and labels:
            source, target = arrow.split(" --> ")
            found[(source, target)] = labels.split(EDGE_JOIN)
    return found


def test_checked_in_lifecycle_doc_is_current() -> None:
    current = render_lifecycle_markdown()
    checked_in = LIFECYCLE_MD.read_text(encoding="utf-8") if LIFECYCLE_MD.exists() else ""
    assert checked_in == current, f"docs/lifecycle.md is stale: run `{REGENERATE}`"


@pytest.mark.parametrize("state", list(ReqState), ids=lambda s: s.name)
def test_every_request_state_is_drawn(state: ReqState) -> None:
    assert f'state "{state.name}" as {state.name}' in mermaid(SPEC, "request")


@pytest.mark.parametrize("state", list(EngineState), ids=lambda s: s.name)
def test_every_engine_state_is_drawn(state: EngineState) -> None:
    assert f'state "{state.name}" as {state.name}' in mermaid(SPEC, "engine")


@pytest.mark.parametrize(("which", "rows"), [("request", SPEC.rows), ("engine", SPEC.engine_rows)])
def test_every_row_is_drawn_on_its_edge(which: Any, rows: Any) -> None:
    edges = drawn_edges(mermaid(SPEC, which))
    missing = [f"{r.source.name} --> {r.target.name}: {r.label()}" for r in rows
               if r.label() not in edges.get((r.source.name, r.target.name), [])]  # fmt: skip
    assert missing == []
    assert sum(len(labels) for labels in edges.values()) == len(rows), "an edge label that is no row"


@pytest.mark.parametrize("row", SPEC.rows + SPEC.engine_rows, ids=lambda r: f"{r.source.name}:{r.label()}")
def test_every_row_is_in_the_lifecycle_doc_table(row: Any) -> None:
    assert f"| `{row.source.name}` | {row.label()} | `{row.target.name}` |" in render_lifecycle_markdown()


def test_lifecycle_doc_holds_every_view_and_the_whole_diagram() -> None:
    doc = render_lifecycle_markdown()
    assert doc.count("```mermaid\n") == len(VIEWS) + 1 and doc.count("stateDiagram-v2") == len(VIEWS) + 1
    assert mermaid(SPEC, "request") in doc  # the whole request table, still drawn (the control plane is one view)
    for view in VIEWS:
        assert f"### {view.title} ({len(view.rows())} rows)\n" in doc and mermaid(SPEC, view=view) in doc


@pytest.mark.parametrize("row", SPEC.rows + SPEC.engine_rows, ids=lambda r: f"{r.source.name}:{r.label()}")
def test_every_row_is_in_at_least_one_view(row: Any) -> None:
    assert [view.title for view in VIEWS if row in view.rows()] != []


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.anchor)
def test_a_view_draws_exactly_the_rows_its_rule_selects(view: View) -> None:
    table = SPEC.rows if view.which == "request" else SPEC.engine_rows
    chosen = [row for row in table if view.selects(row)]
    assert chosen and list(view.rows()) == chosen
    edges = drawn_edges(mermaid(SPEC, view=view))
    assert sorted(label for labels in edges.values() for label in labels) == sorted(r.label() for r in chosen)
    drawn_states = {name for edge in edges for name in edge}
    touched = {r.source.name for r in chosen} | {r.target.name for r in chosen}
    assert drawn_states == touched  # and no state the view's rows do not touch is declared either:
    declared = {line.split(" as ")[1] for line in mermaid(SPEC, view=view).splitlines()
                if line.strip().startswith("state ")}
    assert declared == touched


@pytest.mark.parametrize("view", [v for v in VIEWS if v.which == "request"], ids=lambda v: v.anchor)
def test_a_request_view_is_a_readable_part_not_the_whole_table(view: View) -> None:
    assert len(view.rows()) <= len(SPEC.rows) // 3
    assert ("[*] --> NEW" in mermaid(SPEC, view=view)) == any(r.source is ReqState.NEW for r in view.rows())


def test_a_view_rule_is_said_in_words_from_its_events_and_states() -> None:
    abort = next(view for view in VIEWS if view.anchor == "abort")
    assert abort.rule().startswith("the rows whose event is `Abort`, `AbortDone`, `AbortFailed`, `StageAborted` or "
                                   "which leave or enter `ABORTING`, `ABORTING_CHILDREN`, except those of ")


def test_diagram_command_prints_a_state_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram"]) == 0
    out = capsys.readouterr().out
    assert "stateDiagram-v2" in out and "NEW --> WAITING" in out


def test_diagram_command_draws_the_control_plane(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram", "--engine"]) == 0
    out = capsys.readouterr().out
    assert "stateDiagram-v2" in out and "RUNNING --> DEAD" in out


def test_diagram_command_prints_the_lifecycle_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram", "--markdown"]) == 0
    assert capsys.readouterr().out == render_lifecycle_markdown()


def test_import_omni_fsm_loads_no_state_machine_library() -> None:
    code = "import sys, omni_fsm, omni_fsm.cli.diagram; print(sorted(m for m in sys.modules if 'transitions' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
