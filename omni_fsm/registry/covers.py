"""The tests' ``covers`` marks: which tests say they cover which invariant, found without importing them.

``discover_tests(root)`` reads ``tests/**/*.py`` with ``ast``: ``@pytest.mark.covers("ID", ...)`` on a
function, a class or a method, ``pytestmark = pytest.mark.covers(...)`` (module or class), and
``pytest.param(..., marks=pytest.mark.covers(...))`` in a ``parametrize`` list (written inline or
bound to a module-level name). A test is *negative* (a fault that must make its invariant fail)
when it lives under ``tests/bugs/`` or in a file whose name contains ``negative``. Validating the
registry (which IDs have tests) and ``docs/traceability.md`` (``omni_fsm.registry.traceability``)
both use what it finds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from omni_fsm.errors import MalformedInput

_COVERS = ("pytest.mark.covers", "mark.covers")


@attrs.frozen
class CoverMark:
    """A test that says it covers an invariant: its pytest node id, and whether it is negative."""

    nodeid: str
    negative: bool


# -- finding the marks --------------------------------------------------------------------------


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _call_to(node: ast.expr, *names: str) -> ast.Call | None:
    return node if isinstance(node, ast.Call) and _dotted(node.func) in names else None


class _Scanner:
    """Collects ``(invariant ID, node id)`` pairs from one test file."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.found: list[tuple[str, str]] = []
        self.names: dict[str, ast.expr] = {}  #: module-level name -> value (parametrize lists)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.names[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.names[node.target.id] = node.value
        self.body(tree.body, path)

    def ids(self, marks: ast.expr) -> Iterator[str]:
        """Yield the IDs of every ``covers`` mark in ``marks`` (a mark, or a list / tuple of marks)."""
        elements = marks.elts if isinstance(marks, (ast.List, ast.Tuple)) else [marks]
        for element in elements:
            call = _call_to(element, *_COVERS)
            if call is None:
                continue
            for arg in call.args:
                if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
                    raise MalformedInput(self.path, arg.lineno, "covers() takes literal invariant IDs")
                yield arg.value

    def add(self, marks: ast.expr, nodeid: str) -> None:
        self.found += [(inv_id, nodeid) for inv_id in self.ids(marks)]

    def body(self, nodes: Sequence[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.Assign) and any(_dotted(t) == "pytestmark" for t in node.targets):
                self.add(node.value, prefix)
            elif isinstance(node, ast.ClassDef):
                self.decorated(node, f"{prefix}::{node.name}")
                self.body(node.body, f"{prefix}::{node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.decorated(node, f"{prefix}::{node.name}")

    def decorated(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, nodeid: str) -> None:
        for decorator in node.decorator_list:
            self.add(decorator, nodeid)
            parametrize = _call_to(decorator, "pytest.mark.parametrize", "mark.parametrize")
            if parametrize is not None:
                self.params(parametrize, nodeid)

    def params(self, call: ast.Call, nodeid: str) -> None:
        keywords = {k.arg: k.value for k in call.keywords}
        values = call.args[1] if len(call.args) > 1 else keywords.get("argvalues")
        if isinstance(values, ast.Name):
            values = self.names.get(values.id)
        if not isinstance(values, (ast.List, ast.Tuple)):
            return
        for index, element in enumerate(values.elts):
            param = _call_to(element, "pytest.param")
            if param is None:
                continue
            options = {k.arg: k.value for k in param.keywords}
            given = options.get("id")
            name = given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else str(index)
            if "marks" in options:
                self.add(options["marks"], f"{nodeid}[{name}]")


def is_negative(path: str) -> bool:
    """Return whether tests in ``path`` (relative, POSIX) are negative tests."""
    return path.startswith("tests/bugs/") or "negative" in Path(path).name


def has_tests(root: Path) -> bool:
    """Return whether ``root`` holds ``tests/`` (a checkout), not only ``specs/`` (an installed copy)."""
    return (root / "tests").is_dir()


def discover_tests(root: Path) -> dict[str, tuple[CoverMark, ...]]:
    """Return invariant ID -> the tests under ``root/tests`` that cover it, in file order."""
    found: dict[str, list[CoverMark]] = {}
    for file in sorted((root / "tests").rglob("*.py")):
        path = file.relative_to(root).as_posix()
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=path)
        except SyntaxError as exc:
            raise MalformedInput(path, exc.lineno or 0, f"cannot parse: {exc.msg}") from None
        for inv_id, nodeid in _Scanner(path, tree).found:
            mark = CoverMark(nodeid, is_negative(path))
            if mark not in found.setdefault(inv_id, []):
                found[inv_id].append(mark)
    return {inv_id: tuple(marks) for inv_id, marks in sorted(found.items())}


__all__ = ["CoverMark", "discover_tests", "has_tests", "is_negative"]
