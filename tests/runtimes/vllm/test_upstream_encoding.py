"""The upstream encoding (``omni_fsm.invariants.upstream``, AR-INV-001) is tight both ways: every move it allows vLLM
is one vLLM was seen to make (the contract test's table, per vLLM version) or one read in vLLM's source and driven
through vLLM's own code by a named test (``witnesses.READ_FROM_SOURCE``); and every move seen is allowed. Widening it
by any one move fails here. The same for vLLM-Omni's documented differences (``upstream.OMNI_DOCUMENTED``).

No vLLM needed: the tables are checked in (``data/``), the tests named are found in their files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from omni_fsm import Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm.invariants import Monitor
from omni_fsm.invariants import upstream as up
from omni_runtime import simple_pipeline
from omni_runtime.runtimes.sim import SimConfig
from tests.runtime.helpers import run_sync
from tests.runtimes.vllm import witnesses as w

pytestmark = pytest.mark.covers("AR-INV-001")
ROOT = Path(__file__).resolve().parents[3]
PAIRS = [(old, new) for old in ("None", *w.STATUSES) for new in w.STATUSES if old != new]


def test_every_move_of_the_encoding_is_witnessed_or_read_from_vllms_source() -> None:
    plain, resumable = w.encoded()
    assert w.unaccounted(plain, resumable) == []


def test_every_move_vllm_was_seen_to_make_is_in_the_encoding() -> None:
    plain, resumable = w.encoded()
    seen_plain, seen_resumable = w.witnessed()
    assert seen_plain, "no table of moves for any checked vLLM version"
    assert sorted(seen_plain - plain) == [] and sorted(seen_resumable - plain - resumable) == []


@pytest.mark.parametrize(("old", "new"), [p for p in PAIRS if p not in w.encoded()[0]], ids="->".join)
def test_widening_the_encoding_by_one_move_is_caught(old: str, new: str) -> None:
    """Any one move added (for any request, or for resumable ones only) is a move nobody witnessed."""
    plain, resumable = w.encoded()
    assert ((old, new), "any request") in w.unaccounted(plain | {(old, new)}, resumable)
    if (old, new) not in resumable:
        assert ((old, new), "a resumable request") in w.unaccounted(plain, resumable | {(old, new)})


def test_each_move_read_from_source_is_encoded_not_yet_witnessed_and_has_its_test() -> None:
    plain, resumable = w.encoded()
    seen_plain, _ = w.witnessed()
    for move, read in w.READ_FROM_SOURCE.items():
        assert move in (resumable if read.resumable else plain), move
        assert read.resumable or move not in seen_plain, f"{move} is witnessed now: drop it from READ_FROM_SOURCE"
        assert _names_a_test(read.test), read.test
    for read in w.OMNI_READ.values():
        assert _names_a_test(read.test), read.test


def test_the_documented_omni_differences_are_each_read_from_vllm_omni_and_nothing_more() -> None:
    assert sorted(up.OMNI_DOCUMENTED) == sorted(w.OMNI_READ)


def test_the_tables_are_of_checked_versions() -> None:
    kept = sorted(p.name for p in w.DATA.glob("vllm-*-moves.txt"))
    assert kept and all(name.split("-")[1] in up.CHECKED_AGAINST for name in kept), kept


def _names_a_test(node: str) -> bool:
    path, _, name = node.partition("::")
    function = name.split("[")[0]
    tree = ast.parse((ROOT / path).read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)


# -- vLLM-Omni's asynchronous chunks, as this project's AR simulator reproduces them ---------------------------

_STATUS = {ev.Scheduled: up.RUNNING, ev.AwaitChunk: up.CHUNK, ev.InputReady: up.WAITING, ev.StageFinished: up.FINISHED}


def test_the_simulator_makes_vllm_omnis_chunk_moves() -> None:
    """RUNNING -> WAITING_FOR_CHUNK -> WAITING on the simulator's async chunks; and the finish of a request waiting
    for its chunk, reported while its abort is in flight, is judged upstream-aligned (OMNI_DOCUMENTED)."""
    pipeline = simple_pipeline([StageKind.AR], [True], replicas=1, max_running=2)
    status: dict[int, str] = {}
    moves: set[tuple[str, str]] = set()

    def on_step(event: ev.Event, observations: object) -> None:
        new = _STATUS.get(type(event))
        if new is not None:
            rid = event.rid  # type: ignore[attr-defined]
            moves.add((status.get(rid, up.WAITING), new))
            status[rid] = new

    run_sync(pipeline, [(1, 0, 0)] * 4, 3, SimConfig(chunk_wait=1.0), on_step=on_step)
    assert {(up.RUNNING, up.CHUNK), (up.CHUNK, up.WAITING)} <= moves, moves
    lc, mon = Lifecycle([StageKind.AR], [True], 2), Monitor([StageKind.AR], [True], 2)
    for event in (ev.Submit(0), ev.Scheduled(0, 0), ev.AwaitChunk(0, 0), ev.Abort(0), ev.StageFinished(0, 0)):
        mon.step(event, lc.handle(event))
    assert [v.invariant for v in mon.violations] == []
    assert up.allowed(up.CHUNK, up.FINISHED) and not up.allowed(up.CHUNK, up.RUNNING)
