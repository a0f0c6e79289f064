"""``docs/traceability.md``, generated: per namespace, invariant -> rule -> kind -> checks -> tests.

The invariants come from ``specs/`` (``omni_fsm.registry``). The tests are found by reading
``tests/**/*.py`` with ``ast``, never importing them: ``@pytest.mark.covers("ID", ...)`` on a
function, a class or a method, ``pytestmark = pytest.mark.covers(...)`` (module or class), and
``pytest.param(..., marks=pytest.mark.covers(...))`` in a ``parametrize`` list (written inline or
bound to a module-level name). A test is *negative* (a fault that must make its invariant fail)
when it lives under ``tests/bugs/`` or in a file whose name contains ``negative``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from omni_fsm.errors import MalformedInput
from omni_fsm.invariants import CHECKS, DIFFERENTIAL_CHECKS
from omni_fsm.registry import KINDS, Invariant, Registry, find_root, load_registry

DOC_FILE = "docs/traceability.md"
REGENERATE = ".venv/bin/omni-fsm traceability > docs/traceability.md"
_COVERS = ("pytest.mark.covers", "mark.covers")
_NAMESPACE_RULE = "— (the registry itself: reserved ranges and `specs/ids.lock`, tests/fsm/test_registry.py)"


@attrs.frozen
class CoverMark:
    """A test that says it covers an invariant: its pytest node id, and whether it is negative."""

    nodeid: str
    negative: bool


# -- finding the tests --------------------------------------------------------------------------


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


# -- rendering --------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _checks_cell(inv: Invariant) -> str:
    if inv.kind == "deferred":
        return f"deferred to {_cell(inv.deferred_to or '')}"
    if inv.kind == "process":
        return f"process: {_cell(inv.reason or '')}"
    return "<br>".join(f"`{name}`" + _CHECK_KIND.get(name, " (registry)") for name in inv.checks)


_CHECK_KIND = {**dict.fromkeys(CHECKS, ""), **dict.fromkeys(DIFFERENTIAL_CHECKS, " (differential)")}


def _tests_cell(marks: Sequence[CoverMark]) -> str:
    if not marks:
        return "—"
    ordered = sorted(marks, key=lambda m: (not m.negative, m.nodeid))
    negatives = sum(m.negative for m in marks)
    head = f"{len(marks)} ({negatives} negative)"
    return "<br>".join([head, *(f"`{_cell(m.nodeid)}`" + (" ✗" if m.negative else "") for m in ordered)])


def render(reg: Registry, tests: Mapping[str, Sequence[CoverMark]]) -> str:
    """Return the traceability document for ``reg`` and the discovered ``tests``."""
    out = [
        "# Invariant traceability",
        "",
        "<!-- Generated from specs/ and the tests' covers marks; do not edit. -->",
        f"Generated by `omni-fsm traceability` from `specs/`; regenerate with `{REGENERATE}`.",
        "",
        "Every rule of both contracts has an entry in `specs/invariants.toml`. Kinds: **checked** (the",
        "checks named judge it: history checks of `omni_fsm.invariants.CHECKS`, differential checks",
        "over two runs of `omni_fsm.invariants.DIFFERENTIAL_CHECKS`, or registry checks of",
        "`omni_fsm.registry`), **deferred** (what will check it is named), **process** (a human act",
        "no program can check). Tests are the ones marked `@pytest.mark.covers(ID)`; ✗ marks a",
        "negative test: a named fault that makes exactly that invariant fail.",
        "",
        "| namespace | contract | " + " | ".join(KINDS) + " | total |",
        "| --- | --- | " + " | ".join("---:" for _ in KINDS) + " | ---: |",
    ]
    for contract in reg.contracts:
        invs = [inv for inv in reg.invariants if inv.namespace == contract.namespace]
        counts = [str(sum(inv.kind == kind for inv in invs)) for kind in KINDS]
        out.append(f"| {contract.namespace} | {contract.title} | " + " | ".join(counts) + f" | {len(invs)} |")
    for contract in reg.contracts:
        out += ["", f"## {contract.namespace}: {contract.title}", "",
                f"Source: `{contract.path}` ({contract.file}).", "",
                "| ID | rule | source | kind | checks | tests |", "| --- | --- | --- | --- | --- | --- |"]
        for inv in sorted((i for i in reg.invariants if i.namespace == contract.namespace), key=lambda i: i.number):
            source = inv.source.section + (" (derived)" if inv.source.derived else "")
            title = _cell(inv.title) + (f" ({', '.join(inv.bugs)})" if inv.bugs else "")
            covering = _tests_cell(tests.get(inv.id, ())) if inv.kind == "checked" else "—"
            out.append(f"| {inv.id} | {title} | {source} | {inv.kind} | {_checks_cell(inv)} | {covering} |")
    out += ["", "## Contract rules", "", "Each rule of each contract, and the entries that state or refine it.", "",
            "| contract | section | rule | invariants |", "| --- | --- | --- | --- |"]
    for contract in reg.contracts:
        for item in (i for i in contract.items if i.role in ("rule", "namespace")):
            ids = ", ".join(inv.id for inv in reg.citing(contract.name, item.key)) or _NAMESPACE_RULE
            out.append(f"| {contract.name} | {item.section} | {_cell(item.text)} | {ids} |")
    return "\n".join(out) + "\n"


def generate(root: Path) -> str:
    """Return the traceability document of the checkout at ``root``."""
    return render(load_registry(root), discover_tests(root))


# -- command line -------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``omni-fsm traceability``'s options."""
    parser.add_argument("--root", type=Path, default=None, help="the checkout (default: found from cwd)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {DOC_FILE} is not current")


def main(args: argparse.Namespace) -> int:
    """Print the traceability document (or check the checked-in one); return the exit code."""
    root = find_root() if args.root is None else args.root
    try:
        text = generate(root)
    except MalformedInput as exc:
        print(exc, file=sys.stderr)
        return 2
    if not args.check:
        sys.stdout.write(text)
        return 0
    current = (root / DOC_FILE).read_text(encoding="utf-8") if (root / DOC_FILE).is_file() else ""
    if current != text:
        print(f"{DOC_FILE} is stale: regenerate with `{REGENERATE}`", file=sys.stderr)
        return 1
    return 0
