"""Every name the README and docs import from ``omni_runtime`` or ``omni_fsm`` is exported from that package's root.

The names are read from the documents' code blocks (Python blocks and scripts written from shell blocks alike), so
an example that starts using a new name is checked without this file changing. So is every dotted name
(``omni_runtime.ConfigError``, ``omni_fsm.invariants.Monitor``) in a code block or an inline code span: it names a
submodule, or a name the root exports, and what follows resolves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("omni_runtime", "omni_fsm")
_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
#: ``from omni_runtime import a, b`` on one line, or parenthesized over several
_FROM_ROOT = re.compile(r"^[ \t]*(from[ \t]+(?:omni_runtime|omni_fsm)[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*))", re.M)


def _root_imports(text: str) -> list[tuple[str, str]]:
    """Return the ``(package, name)`` pairs that ``text``'s code blocks import from a package root."""
    found: list[tuple[str, str]] = []
    for block in _BLOCK.findall(text):
        for statement in _FROM_ROOT.findall(block):
            node = ast.parse(statement).body[0]
            assert isinstance(node, ast.ImportFrom) and node.module in PACKAGES
            found += [(node.module, alias.name) for alias in node.names]
    return found


DOCUMENTED = sorted({pair for doc in DOCUMENTS for pair in _root_imports(doc.read_text(encoding="utf-8"))})
#: an inline code span (outside the code blocks) and a dotted name under a package root in code
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_DOTTED = re.compile(r"(?<![\w.])(?:omni_runtime|omni_fsm)(?:\.[A-Za-z_]\w*)+")


def _dotted_names(text: str) -> list[str]:
    """Return the dotted names under a package root (``omni_runtime.X...``) in ``text``'s code blocks and spans."""
    code = [*_BLOCK.findall(text), *_SPAN.findall(_BLOCK.sub("", text))]
    return [name for chunk in code for name in _DOTTED.findall(chunk)]


DOTTED = sorted({name for doc in DOCUMENTS for name in _dotted_names(doc.read_text(encoding="utf-8"))})


def _submodule(module: types.ModuleType, name: str) -> str | None:
    """Return the full name of ``module``'s submodule ``name`` if there is one (found, not imported), else None."""
    if not hasattr(module, "__path__"):
        return None
    full = f"{module.__name__}.{name}"
    return full if importlib.util.find_spec(full) is not None else None


def test_documents_import_from_both_roots() -> None:
    # a parser that finds nothing would make every other test here pass vacuously
    names = {package: {name for p, name in DOCUMENTED if p == package} for package in PACKAGES}
    assert {"Engine", "Prompt", "simple_pipeline"} <= names["omni_runtime"]
    assert {"Lifecycle", "Outcome", "StageKind"} <= names["omni_fsm"]


@pytest.mark.parametrize(("package", "name"), DOCUMENTED, ids=[f"{p}.{n}" for p, n in DOCUMENTED])
def test_documented_name_is_exported_from_root(package: str, name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import {name}", namespace)
    if not isinstance(namespace[name], types.ModuleType):  # a submodule (``protocol``, ``events``) is no re-export
        assert name in importlib.import_module(package).__all__, f"{package}.__all__ lacks {name!r}"


@pytest.mark.parametrize("dotted", DOTTED)
def test_documented_dotted_name_resolves_from_an_export_or_a_submodule(dotted: str) -> None:
    root, *parts = dotted.split(".")
    found: object = importlib.import_module(root)
    for depth, part in enumerate(parts):
        submodule = _submodule(found, part) if isinstance(found, types.ModuleType) else None
        if submodule is not None:
            if depth == len(parts) - 1:  # named, not used: found is enough (a runtime's engine may be absent)
                return
            found = importlib.import_module(submodule)
            continue
        if depth == 0:
            assert part in importlib.import_module(root).__all__, f"{root}.__all__ lacks {part!r} ({dotted})"
        assert hasattr(found, part), f"{dotted}: {'.'.join([root, *parts[:depth]])} has no {part!r}"
        found = getattr(found, part)


def test_dotted_names_are_read_from_blocks_and_spans_only() -> None:
    text = "Use `omni_runtime.ConfigError` and `omni_fsm.invariants.Monitor.step`; not omni_runtime.Prose.\n"
    text += "```python\nimport omni_runtime\nomni_runtime.Engine  # a.omni_runtime.Not\n```\n"
    assert sorted(_dotted_names(text)) == ["omni_fsm.invariants.Monitor.step", "omni_runtime.ConfigError",
                                           "omni_runtime.Engine"]  # fmt: skip
    names = {name.split(".")[1] for name in DOTTED}
    assert {"ConfigError", "testing", "core"} <= names  # the documents' own names are read


def test_parser_reads_parenthesized_and_aliased_imports() -> None:
    text = "```sh\ncat > x.py <<'PY'\nfrom omni_runtime import (\n    Engine,  # the sync driver\n    Prompt as P,\n)\n"
    text += "from omni_fsm import events as ev  # the events\nPY\n```\n"
    assert _root_imports(text) == [("omni_runtime", "Engine"), ("omni_runtime", "Prompt"), ("omni_fsm", "events")]


def test_outcome_is_exported_by_the_runtime_as_the_core_defines_it() -> None:
    from omni_fsm import Outcome as CoreOutcome
    from omni_runtime import Outcome

    assert Outcome is CoreOutcome
    assert "Outcome" in importlib.import_module("omni_runtime").__all__
