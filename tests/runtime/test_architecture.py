"""``omni_runtime``'s layers stay visible: imports only in the direction docs/architecture.md declares, no import
cycle (counting those through an ``__init__``), no private names across modules, at most four modules at the top,
and a stage's failure report takes the walk the document writes down (traced with ``sys.setprofile``)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from omni_fsm import StageKind
from omni_runtime import Engine, Outcome, Prompt, simple_pipeline
from omni_runtime.core import protocol as rp
from tests.import_graph import (
    ROOT,
    allowed_imports,
    cycles,
    describe_cycle,
    graph,
    imports,
    is_private,
    modules,
    rel,
    report,
    tree,
)

PACKAGE = "omni_runtime"
DOC = ROOT / "docs" / "architecture.md"
FENCE = "allowed-imports omni_runtime"
MODULES = modules(PACKAGE)
FILES = sorted(MODULES.values())
TOP_LEVEL_MODULES = 4
#: underscore names that are public API of the standard library: Enum's and namedtuple's, ``os._exit``
STDLIB_UNDERSCORE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make", "_exit"})


def _layer(module: str) -> str:
    """The layer a module belongs to: its folder, a top-level module's own name, ``omni_runtime`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _graph(through_init: bool = True) -> dict[str, dict[str, list[str]]]:
    return graph(PACKAGE, through_init)


# -- 1. no import cycle ---------------------------------------------------------------------------------


def test_import_graph_has_no_cycle_counting_those_through_an_init() -> None:
    edges = _graph()
    found = cycles(edges)
    assert not found, "import cycles (edges with where they are):\n" + "\n".join(
        describe_cycle(edges, c) for c in found)


def test_a_cycle_through_an_init_is_found() -> None:
    """``pkg/__init__`` imports ``pkg.a``, which imports ``other``, which imports ``pkg.b``: importing ``pkg.b`` runs
    ``pkg/__init__``, so that is a cycle even though no module imports one it is imported by."""
    edges = {"pkg": {"pkg.a": ["x"]}, "pkg.a": {"other": ["x"]}, "other": {"pkg.b": ["x"], "pkg": ["x"]},
             "pkg.b": {}}  # fmt: skip
    assert cycles(edges) == [["other", "pkg", "pkg.a"]]


def test_no_module_inside_the_package_imports_the_root_package() -> None:
    found = [f"{where}: {module} imports {PACKAGE}" for module, targets in _graph(False).items() if module != PACKAGE
             for where in targets.get(PACKAGE, [])]  # fmt: skip
    assert not found, "the root package is the public face, not a dependency:\n" + report(found)


# -- 2. layer direction, as docs/architecture.md declares it ----------------------------------------------


def test_doc_lists_every_layer_that_exists_and_none_that_does_not() -> None:
    rows = allowed_imports(DOC, FENCE)
    existing = {_layer(m) for m in MODULES}
    named = set(rows) | {layer for allowed in rows.values() for layer in allowed}
    assert sorted(existing - set(rows)) == [], f"layers with no row in {rel(DOC)}"
    assert sorted(named - existing) == [], f"{rel(DOC)} names layers that do not exist"


def test_doc_layers_import_only_themselves_and_lower_layers() -> None:
    rows = allowed_imports(DOC, FENCE)
    found = [f"{layer} may import {sorted(allowed - set(list(rows)[: i + 1]))}, listed after it"
             for i, (layer, allowed) in enumerate(rows.items()) if allowed - set(list(rows)[: i + 1])]  # fmt: skip
    assert not found, f"{rel(DOC)}: layers must run low to high:\n" + "\n".join(found)


def test_every_import_is_allowed_by_the_doc() -> None:
    rows = allowed_imports(DOC, FENCE)
    found = [f"{where}: {module} -> {target} ({_layer(module)} may not import {_layer(target)})"
             for module, targets in sorted(_graph(False).items()) for target, wheres in sorted(targets.items())
             if _layer(target) not in rows.get(_layer(module), frozenset()) for where in wheres]  # fmt: skip
    assert not found, f"imports {rel(DOC)} does not allow:\n" + report(found)


def test_the_package_has_at_most_four_modules_at_its_top() -> None:
    top = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top


# -- 3. no private names across modules ------------------------------------------------------------------


def _private_imports(path: Path) -> list[str]:
    """A private name imported from another module, or a private module imported from outside its package."""
    importer = next(m for m, p in MODULES.items() if p == path)
    found = []
    for imp in imports(path, PACKAGE, MODULES):
        names = [n for n in imp.names if is_private(n)]
        parts = imp.target.split(".")
        outside = [p for i, p in enumerate(parts) if is_private(p)
                   and not (importer + ".").startswith(".".join(parts[:i]) + ".")]  # fmt: skip
        if names or outside:
            found.append(f"{rel(path)}:{imp.line}: {', '.join(names + outside)} from {imp.target}")
    return found


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_module_imports_no_private_name_of_another(path: Path) -> None:
    found = _private_imports(path)
    assert not found, "private names imported from another module:\n" + report(found)


def _owned_private_attributes(module: ast.Module) -> set[str]:
    """Private attributes of this module's own classes: set through ``self``/``cls``, or in a class body."""
    owned: set[str] = set()
    for node in ast.walk(module):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):  # fmt: skip
            owned.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    owned.add(stmt.name)
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    names = [t.id for t in targets if isinstance(t, ast.Name)]
                    owned.update(names)
                    if "__slots__" in names and stmt.value is not None:
                        owned.update(c.value for c in ast.walk(stmt.value)
                                     if isinstance(c, ast.Constant) and isinstance(c.value, str))  # fmt: skip
    return {name for name in owned if is_private(name)}


def _private_reach_ins(module: ast.Module, where: str) -> list[str]:
    owned = _owned_private_attributes(module)
    return [f"{where}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(module)
            if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in owned
            and node.attr not in STDLIB_UNDERSCORE_API and not re.fullmatch(r"_[^_].*[^_]_", node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]  # fmt: skip


@pytest.mark.parametrize(("source", "flagged"), [
    ("host._unclaimed.add(1)", 1), ("module._helper()", 1), ("self._queue.append(1)", 0), ("os._exit(1)", 0),
    ("class A:\n    __slots__ = ('_y',)\n    def f(self, other):\n        return other._y", 0),
])  # fmt: skip
def test_the_reach_in_check_flags_another_module_s_private_attribute(source: str, flagged: int) -> None:
    assert len(_private_reach_ins(ast.parse(source), "x.py")) == flagged


def test_the_private_import_check_allows_a_package_s_own_private_modules_only() -> None:
    inside = next(p for m, p in MODULES.items() if m == "omni_runtime.testing.kit")
    assert _private_imports(inside) == []  # it imports testing._machine and testing._checker, its package's own


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_module_reads_no_private_attribute_of_another_module(path: Path) -> None:
    found = _private_reach_ins(tree(path), rel(path))
    assert not found, "private attributes of another module's objects:\n" + report(found)


# -- 4. the walk of a stage's failure report ---------------------------------------------------------------


def _documented_walk() -> list[str]:
    blocks = re.findall(r"^```walk failure-report[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, f"{rel(DOC)}: expected one ```walk failure-report block, found {len(blocks)}"
    return [line.split("#", 1)[0].strip() for line in blocks[0].splitlines() if line.split("#", 1)[0].strip()]


def _project_file(filename: str) -> str | None:
    """Return a code file's name in the walk: its path in the checkout, ``omni_fsm`` for the lifecycle's files (one
    step, whose own walk is ``omni_fsm``'s business), ``None`` for code outside the packages."""
    path = Path(filename)
    if not path.is_absolute() or not path.is_relative_to(ROOT):
        return None
    relative = path.relative_to(ROOT)
    if relative.parts[0] == "omni_fsm":
        return "omni_fsm"
    return str(relative) if relative.parts[0] == PACKAGE else None


class _FailsItsRequests:
    """A runtime that schedules each request at one step and reports it ``Failed`` at the next, tracing from the
    moment its ``Failed`` goes to the sink."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace
        self.todo: list[int] = []
        self.scheduled: set[int] = set()

    def bind(self, sink: rp.ReportSink) -> None:
        self.sink = sink

    def add_request(self, req_id: int, stage_input: Any) -> None:
        self.todo.append(req_id)

    def abort_requests(self, abort_id: int, req_ids: Any) -> None:
        raise AssertionError("nothing is aborted here")

    def control(self, call_id: int, method: Any, level: int, tags: Any) -> None:
        raise AssertionError("no RPC is called here")

    def step(self) -> bool:
        for rid in list(self.todo):
            if rid in self.scheduled:
                self.todo.remove(rid)
                sys.setprofile(self.trace)
                self.sink(rp.Failed(rid, 1, "the stage could not run it"))
            else:
                self.scheduled.add(rid)
                self.sink(rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
        return bool(self.todo)

    def shutdown(self) -> None:
        pass


def test_a_failure_report_walks_from_the_runtime_to_the_client_s_terminal_as_documented() -> None:
    entered: list[str] = []  #: each project file control entered by a call from another file, in order

    def trace(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee, caller = _project_file(frame.f_code.co_filename), None
        if frame.f_back is not None:
            caller = _project_file(frame.f_back.f_code.co_filename) or frame.f_back.f_code.co_filename
        if callee is not None and callee != caller:
            entered.append(callee)

    pipeline = simple_pipeline([StageKind.AR])
    try:
        with Engine(pipeline, [[_FailsItsRequests(trace)]]) as engine:
            for message in engine.outputs(engine.submit(Prompt())):
                if message.finished:
                    sys.setprofile(None)
                    terminal = message
    finally:
        sys.setprofile(None)
    assert terminal.outcome is Outcome.FAILED and terminal.error == "the stage could not run it"
    walk = _documented_walk()
    assert entered == walk, f"the walk in {rel(DOC)} is {walk}; the report took {entered}"
    assert len(walk) <= 8 and len(set(walk)) == len(walk)


# -- 5. the tests share helpers through helper modules, never a test module -------------------------------------

TESTS = ROOT / "tests"
#: test modules that still import another test module: omni_fsm's, which the sessions rewriting its engine and its
#: invariants (issues 27 and 29) hold meanwhile; each is theirs to move to a helper module
TEST_IMPORT_EXCEPTIONS = {
    "tests/fsm/test_programs.py": "test_bench_smoke.load_bench (the generated programs go with issue 27)",
    "tests/fsm/test_selection.py": "test_reference_agreement (the generated selection goes with issue 27)",
    "tests/fsm/test_rules_disabled.py": "test_invariants_negative's cases (issue 29 reworks the invariants)",
}


def _is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


def _imported_test_files(path: Path) -> list[str]:
    """The files of ``tests/`` that ``path`` imports which are test modules (``tests.x.y``, or a bare name found
    beside it or in ``tests/runtime``, as the rootdir-style imports are)."""
    found = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level:  # relative: from the importer's folder up
            folder = path.parents[node.level - 1]
            modules = [f"{node.module}.{a.name}" if node.module else a.name for a in node.names]
            candidates = [folder.joinpath(*m.split(".")).with_suffix(".py") for m in modules]
            candidates += [folder.joinpath(*node.module.split(".")).with_suffix(".py")] if node.module else []
        else:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            candidates = []
            for name in names:
                parts = name.split(".")
                if parts[0] == "tests":
                    candidates.append(ROOT.joinpath(*parts).with_suffix(".py"))
                else:  # a rootdir-style import: beside it, or tests/runtime (tests/bugs puts it on the path)
                    candidates += [path.parent / f"{parts[0]}.py", TESTS / "runtime" / f"{parts[0]}.py"]
        found += [f"{rel(path)}:{node.lineno}: {rel(c)}" for c in dict.fromkeys(candidates)
                  if c.is_file() and _is_test_module(c) and c != path]  # fmt: skip
    return found


def test_no_test_module_imports_another_test_module() -> None:
    found = [f for p in sorted(TESTS.rglob("*.py")) if rel(p) not in TEST_IMPORT_EXCEPTIONS
             for f in _imported_test_files(p)]  # fmt: skip
    assert not found, "test modules imported (share a helper module instead):\n" + report(found)


@pytest.mark.parametrize("path", sorted(TEST_IMPORT_EXCEPTIONS))
def test_the_test_import_check_finds_each_exception_while_it_lasts(path: str) -> None:
    if (ROOT / path).is_file():
        assert _imported_test_files(ROOT / path), f"{path} imports no test module any more: drop its exception"
