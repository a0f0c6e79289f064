"""``specs/`` is found from anywhere: the checkout around the current directory, else the copy the package ships
(in a checkout a link to the checkout's ``specs/``, so the checkout itself; in a wheel ``omni_fsm/_data``).

Without ``tests/`` beside ``specs/`` (an installed copy) which invariants have tests is not judged, and the
commands say so. tests/packaging/test_wheel_install.py runs the same from an installed wheel.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from omni_fsm.cli import registry, traceability
from omni_fsm.registry import find_root, load_registry, packaged_root, validate

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_specs_of_a_checkout_are_the_checkouts() -> None:
    assert packaged_root() == ROOT


def test_find_root_outside_a_checkout_is_the_packaged_root(tmp_path: Path) -> None:
    assert find_root(tmp_path) == packaged_root()


def test_find_root_inside_a_checkout_is_that_checkout(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    (tmp_path / "deeper").mkdir()
    assert find_root(tmp_path / "deeper") == tmp_path


def test_without_tests_which_invariants_have_tests_is_not_judged(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    reg = load_registry(tmp_path)
    assert any("which has no test" in problem for problem in validate(reg, set()))
    assert validate(reg, None) == []


def _command(module: object, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return module.main(parser.parse_args(argv))  # type: ignore[attr-defined,no-any-return]


def test_registry_of_an_installed_copy_says_tests_are_not_judged(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    assert _command(registry, "--root", str(tmp_path)) == 0
    assert "no tests/ beside specs/ (an installed copy)" in capsys.readouterr().out


def test_traceability_of_an_installed_copy_says_it_lists_no_tests(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    assert _command(traceability, "--root", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "This copy has no `tests/` beside `specs/`" in out and "::test_" not in out  # no test node ids
