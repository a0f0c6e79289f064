"""docs/traceability.md is generated from specs/ and the tests, is current, and has no gaps.

Every ``checked`` invariant has a check, a test, and a negative test (a named fault that makes
exactly that invariant fail); every ``covers`` mark names a registered invariant.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from pathlib import Path

import pytest

from omni_fsm.cli import traceability
from omni_fsm.errors import MalformedInput
from omni_fsm.registry import load_registry
from omni_fsm.registry.traceability import DOC_FILE, REGENERATE, CoverMark, discover_tests, generate

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry(ROOT)
TESTS = discover_tests(ROOT)
CHECKED = [inv for inv in REGISTRY.invariants if inv.kind == "checked"]


def test_checked_in_table_is_current() -> None:
    current = (ROOT / DOC_FILE).read_text(encoding="utf-8") if (ROOT / DOC_FILE).is_file() else ""
    assert current == generate(ROOT), f"{DOC_FILE} is stale: regenerate with `{REGENERATE}`"


@pytest.mark.parametrize("inv_id", [inv.id for inv in CHECKED])
def test_every_checked_invariant_has_a_check_a_test_and_a_negative_test(inv_id: str) -> None:
    entry = REGISTRY.get(inv_id)
    assert entry is not None and entry.checks, f"{inv_id} is checked but names no check"
    marks = TESTS.get(inv_id, ())
    assert marks, f"{inv_id} has no test: mark one with @pytest.mark.covers({inv_id!r})"
    assert any(m.negative for m in marks), f"{inv_id} has no negative test (a fault that makes it fail)"


def test_every_covers_mark_names_a_registered_invariant() -> None:
    unknown = {inv_id: marks for inv_id, marks in TESTS.items() if REGISTRY.get(inv_id) is None}
    assert not unknown, f"covers() names IDs not in specs/invariants.toml: {unknown}"


def test_the_promotion_gate_has_one_test_per_outcome_class() -> None:
    names = {m.nodeid.rsplit("[", 1)[-1].rstrip("]") for m in TESTS["ORCH-INV-101"] if not m.negative}
    assert {"success", "abort", "request_scoped_failure", "fatal_engine_failure"} <= names


def command(*argv: str) -> int:
    """Run ``omni-fsm traceability`` (its ``add_arguments`` and ``main``, as the CLI wires them)."""
    parser = argparse.ArgumentParser()
    traceability.add_arguments(parser)
    return traceability.main(parser.parse_args(argv))


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert command("--root", str(ROOT)) == 0
    assert capsys.readouterr().out == generate(ROOT)


def test_the_command_checks_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "specs").symlink_to(ROOT / "specs")
    (tmp_path / "tests").mkdir()
    assert command("--root", str(tmp_path), "--check") == 1
    assert REGENERATE in capsys.readouterr().err
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC_FILE).write_text(generate(tmp_path), encoding="utf-8")
    assert command("--root", str(tmp_path), "--check") == 0


def test_a_malformed_registry_is_one_line_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    path = tmp_path / "specs/invariants.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('kind = "process"', 'kind = "manual"', 1))
    assert command("--root", str(tmp_path)) == 2
    assert capsys.readouterr().err.startswith("specs/invariants.toml:")


# -- test discovery reads the source, never imports it ------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[CoverMark, ...]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return discover_tests(tmp_path)


def test_discovery_finds_every_form_of_the_mark(tmp_path: Path) -> None:
    found = _tree(tmp_path, {
        "tests/fsm/test_a.py": """
            import pytest
            pytestmark = pytest.mark.covers("X-INV-001")

            @pytest.mark.covers("X-INV-002", "X-INV-003")
            def test_f(): ...

            @pytest.mark.covers("X-INV-004")
            class TestC:
                pytestmark = [pytest.mark.slow, pytest.mark.covers("X-INV-005")]
                @pytest.mark.covers("X-INV-006")
                def test_m(self): ...

            CASES = [pytest.param(1, id="one", marks=pytest.mark.covers("X-INV-007")), pytest.param(2)]

            @pytest.mark.parametrize("x", CASES)
            def test_named(x): ...

            @pytest.mark.parametrize("x", [pytest.param(1, marks=[pytest.mark.covers("X-INV-008")])])
            def test_inline(x): ...
        """,
        "tests/bugs/test_b1.py": """
            import pytest
            @pytest.mark.covers("X-INV-002")
            def test_bug(): ...
        """,
    })  # fmt: skip
    assert {k: [m.nodeid for m in v] for k, v in found.items()} == {
        "X-INV-001": ["tests/fsm/test_a.py"],
        "X-INV-002": ["tests/bugs/test_b1.py::test_bug", "tests/fsm/test_a.py::test_f"],
        "X-INV-003": ["tests/fsm/test_a.py::test_f"],
        "X-INV-004": ["tests/fsm/test_a.py::TestC"],
        "X-INV-005": ["tests/fsm/test_a.py::TestC"],
        "X-INV-006": ["tests/fsm/test_a.py::TestC::test_m"],
        "X-INV-007": ["tests/fsm/test_a.py::test_named[one]"],
        "X-INV-008": ["tests/fsm/test_a.py::test_inline[0]"],
    }
    assert [m.negative for m in found["X-INV-002"]] == [True, False]


def test_a_covers_mark_without_literal_ids_is_reported(tmp_path: Path) -> None:
    with pytest.raises(MalformedInput, match=r"^tests/test_x\.py:4: covers\(\) takes literal invariant IDs"):
        _tree(tmp_path, {"tests/test_x.py": """
            import pytest
            ID = "X-INV-001"
            @pytest.mark.covers(ID)
            def test_x(): ...
        """})  # fmt: skip
