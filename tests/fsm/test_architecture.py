"""The architecture stays visible: no import cycle, imports only in the direction docs/architecture.md
declares, no reaching into another module's privates, no exec/eval, and the engine decides nothing of its
own (Rule 1). Pure AST over omni_fsm/**/*.py: only the public-API tests import ``omni_fsm`` itself."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "omni_fsm"
DOC = ROOT / "docs" / "architecture.md"
FILES = sorted(PACKAGE.rglob("*.py"))
ENGINE_FILES = sorted((PACKAGE / "engine").rglob("*.py"))
VOCABULARY = "omni_fsm.spec.vocabulary"
EVENTS = "omni_fsm.spec.events"
#: the pure core and the shell around it (as in test_purity.py): the core imports nothing of the shell
PURE_LAYERS = ("spec", "engine", "invariants", "explore")
SHELL_LAYERS = ("trace", "registry", "cli")
#: underscore names that are public API of the standard library: Enum's ``_sunder_`` names and namedtuple's
STDLIB_UNDERSCORE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})
#: ``omni_fsm.__all__`` as it is: a public name added or removed is a decision, made here on purpose
PUBLIC_API = [
    "BOUND", "ConfigError", "ControlMethod", "Counters", "ENGINE_TERMINAL", "Effect", "Engine", "EngineState",
    "FinishReason", "HOLDS_SLOT", "IdentityHashedEnum", "InternalError", "LIVE", "Lifecycle", "LifecycleError",
    "MalformedInput", "Monitor", "ON_TERMINAL", "OmniFsmError", "Outcome", "PARKED", "Record", "ReqState", "Role",
    "Row", "SPEC", "Section", "Spec", "StageKind", "Step", "StopKind", "TERMINAL", "TERMINAL_OUTCOME",
    "TraceWriter", "Violation", "__version__", "check_history", "events", "observations", "read_trace", "render_page",
    "render_trace", "same_client_streams", "write_trace",
]  # fmt: skip


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _report(found: list[str]) -> str:
    """Findings ``path:line: what``, one a line, in file and line order."""

    def key(finding: str) -> tuple[str, int, str]:
        where, line, what = [*finding.split(":", 2), "", ""][:3]
        return (where, int(line) if line.isdigit() else 0, what)

    return "\n".join(sorted(found, key=key))


def _module_name(path: Path) -> str:
    """``omni_fsm/spec/events.py`` -> ``omni_fsm.spec.events``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in FILES}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _is_ours(module: str) -> bool:
    return module == "omni_fsm" or module.startswith("omni_fsm.")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _layer(module: str) -> str:
    """The layer a module belongs to: its subpackage, a root module's own name, ``omni_fsm`` for the root; a
    ``__main__`` module is an entry script of the command line (run, never imported): ``cli``."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "cli"
    return parts[1] if len(parts) > 1 else parts[0]


def _from_base(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``path``)."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


class Import(NamedTuple):
    """One omni_fsm module imported: ``target`` (a module), the ``names`` taken from it, where."""

    target: str
    names: tuple[str, ...]
    line: int


def _imports(path: Path) -> Iterator[Import]:
    """Every omni_fsm import of ``path``: module level, under ``if TYPE_CHECKING:``, inside functions.

    ``from omni_fsm.x import y`` imports the module ``omni_fsm.x.y`` when that is a module, else ``omni_fsm.x``.
    """
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            yield from (Import(a.name, (), node.lineno) for a in node.names if _is_ours(a.name))
        elif isinstance(node, ast.ImportFrom) and _is_ours(base := _from_base(node, path)):
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(sub, (), node.lineno) if sub in MODULES else Import(base, (alias.name,), node.lineno)


Graph = dict[str, dict[str, list[str]]]  # module -> imported module -> where ("path:line")


@functools.cache
def _graph() -> Graph:
    graph: Graph = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        for imp in _imports(path):
            wheres = graph[module].setdefault(imp.target, [])
            if (where := f"{_rel(path)}:{imp.line}") not in wheres:
                wheres.append(where)
    return graph


def _cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with a cycle (several modules, or one importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, {}):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe_cycle(graph: Graph, component: list[str]) -> str:
    members = set(component)
    edges = [f"    {a} -> {b}  ({', '.join(graph[a][b])})" for a in component for b in sorted(graph.get(a, {}))
             if b in members]  # fmt: skip
    return f"  cycle among {', '.join(component)}:\n" + "\n".join(edges)


def _allowed_imports() -> dict[str, frozenset[str]]:
    """The ``allowed-imports`` block of docs/architecture.md: layer -> layers it may import, low to high."""
    blocks = re.findall(r"^```allowed-imports[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, f"{_rel(DOC)}: expected exactly one ```allowed-imports block, found {len(blocks)}"
    rows: dict[str, frozenset[str]] = {}
    for raw in blocks[0].splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        layer, colon, allowed = line.partition(":")
        assert colon and layer.strip() and layer.strip() not in rows, f"{_rel(DOC)}: bad allowed-imports row {raw!r}"
        rows[layer.strip()] = frozenset(allowed.split()) - {"-"}
    return rows


def _existing_layers() -> set[str]:
    return {_layer(m) for m in MODULES}


# -- 1. no import cycle ---------------------------------------------------------------------------------


def test_import_graph_has_no_cycle() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles (edges with where they are):\n" + "\n".join(
        _describe_cycle(graph, c) for c in cycles)


def test_cycle_check_finds_a_cycle_and_a_self_import() -> None:
    graph: Graph = {"a": {"b": ["a.py:1"]}, "b": {"a": ["b.py:2"]}, "c": {"c": ["c.py:3"]}, "d": {"a": ["d.py:4"]}}
    assert _cycles(graph) == [["a", "b"], ["c"]]


def test_no_module_inside_the_package_imports_the_root_package() -> None:
    found = [f"{where}: {module} imports omni_fsm" for module, targets in _graph().items() if module != "omni_fsm"
             for where in targets.get("omni_fsm", [])]  # fmt: skip
    assert not found, "the root package is the public face, not a dependency:\n" + _report(found)


# -- 2. layer direction, as docs/architecture.md declares it --------------------------------------------


def test_doc_lists_every_layer_that_exists() -> None:
    missing = sorted(_existing_layers() - set(_allowed_imports()))
    assert not missing, f"layers with no row in {_rel(DOC)}'s allowed-imports block: {missing}"


def test_doc_lists_no_layer_that_does_not_exist() -> None:
    rows = _allowed_imports()
    named = set(rows) | {layer for allowed in rows.values() for layer in allowed}
    gone = sorted(named - _existing_layers())
    assert not gone, f"{_rel(DOC)}'s allowed-imports block names layers that do not exist: {gone}"


def test_doc_layers_import_only_themselves_and_lower_layers() -> None:
    rows = _allowed_imports()
    found = []
    for i, (layer, allowed) in enumerate(rows.items()):
        upward = sorted(allowed - set(list(rows)[: i + 1]))
        if upward:
            found.append(f"{layer} may import {upward}, listed after it")
    assert not found, f"{_rel(DOC)}: layers must run low to high:\n" + "\n".join(found)


def test_every_import_is_allowed_by_the_doc() -> None:
    rows = _allowed_imports()
    found = [f"{where}: {module} -> {target} ({_layer(module)} may not import {_layer(target)})"
             for module, targets in sorted(_graph().items()) for target, wheres in sorted(targets.items())
             if _layer(target) not in rows.get(_layer(module), frozenset()) for where in wheres]  # fmt: skip
    assert not found, f"imports {_rel(DOC)} does not allow:\n" + _report(found)


def test_pure_core_imports_nothing_of_the_shell() -> None:
    found = [f"{where}: {module} -> {target}" for module, targets in sorted(_graph().items())
             if _layer(module) in PURE_LAYERS for target, wheres in sorted(targets.items())
             if _layer(target) in SHELL_LAYERS for where in wheres]  # fmt: skip
    assert not found, "the pure core imports the shell:\n" + _report(found)


# -- 3. 4. 5. no private names, no private attributes, no exec/eval -------------------------------------


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_module_imports_no_private_name(path: Path) -> None:
    found = []
    for imp in _imports(path):
        private = [p for p in imp.target.split(".") if _is_private(p)] + [n for n in imp.names if _is_private(n)]
        if private:
            found.append(f"{_rel(path)}:{imp.line}: {', '.join(private)} from {imp.target}")
    assert not found, "private names imported from another module:\n" + _report(found)


def _owned_private_attributes(tree: ast.Module) -> set[str]:
    """Private attributes of this module's own classes: set through ``self``/``cls``, or in a class body."""
    owned: set[str] = set()
    for node in ast.walk(tree):
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
    return {name for name in owned if _is_private(name)}


def _private_reach_ins(tree: ast.Module, where: str) -> list[str]:
    owned = _owned_private_attributes(tree)
    return [f"{where}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in owned
            and node.attr not in STDLIB_UNDERSCORE_API and not re.fullmatch(r"_[^_].*[^_]_", node.attr)
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]  # fmt: skip


REACH_INS = ["lc._queue.append(event)", "m._fail(rid)", "other._x = 1", "module._helper()"]
NOT_REACH_INS = [
    "self._queue.append(event)",
    "cls._cache",
    "class A:\n    def f(self, other):\n        self._x = 1\n        return other._x",
    "class A:\n    __slots__ = ('_y',)\n    def f(self, other):\n        return other._y",
    "class A:\n    def _g(self):\n        pass\ndef f(a):\n    a._g()",
    "point._replace(x=1)",
    "Color._value_",
    "obj.__class__",
]


@pytest.mark.parametrize("source", REACH_INS)
def test_private_attribute_check_flags_a_reach_in(source: str) -> None:
    assert len(_private_reach_ins(ast.parse(source), "x.py")) == 1


@pytest.mark.parametrize("source", NOT_REACH_INS)
def test_private_attribute_check_passes_a_module_s_own_classes(source: str) -> None:
    assert _private_reach_ins(ast.parse(source), "x.py") == []


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_module_reads_no_private_attribute_of_another_module(path: Path) -> None:
    found = _private_reach_ins(_tree(path), _rel(path))
    assert not found, "private attributes of another module's objects:\n" + _report(found)


def _dynamic_code(tree: ast.Module, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id in ("exec", "eval", "compile")) or (
                isinstance(func, ast.Attribute) and func.attr in ("exec", "eval", "compile")
                and isinstance(func.value, ast.Name) and func.value.id == "builtins"):  # fmt: skip
            found.append(f"{where}:{node.lineno}: {ast.unparse(func)}()")
    return found


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_module_calls_no_exec_eval_or_compile(path: Path) -> None:
    found = _dynamic_code(_tree(path), _rel(path))
    assert not found, "code generated at run time:\n" + _report(found)


# -- 6. Rule 1: the engine compares no state or event type -----------------------------------------------


@functools.cache
def _vocabulary() -> tuple[frozenset[str], frozenset[str]]:
    """The Enum classes of spec/vocabulary.py and its module-level sets (``TERMINAL``, ``BOUND``, ...)."""
    tree = _tree(MODULES[VOCABULARY])
    enums: set[str] = set()
    grew = True
    while grew:  # an Enum class derives from ``enum.Enum`` (or ``enum.*Enum``/``Flag``) or from another one
        before = len(enums)
        enums |= {node.name for node in tree.body if isinstance(node, ast.ClassDef) and any(
            ast.unparse(b).split(".")[-1] in enums | {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"}
            for b in node.bases)}  # fmt: skip
        grew = len(enums) > before
    sets: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, annotation, value = node.target.id, ast.unparse(node.annotation), node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, annotation, value = node.targets[0].id, "", node.value
        else:
            continue
        set_typed = annotation.startswith(("frozenset", "set", "AbstractSet", "typing.AbstractSet"))
        set_made = isinstance(value, (ast.Set, ast.SetComp)) or (
            isinstance(value, ast.Call) and ast.unparse(value.func) in ("frozenset", "set"))
        set_derived = isinstance(value, ast.BinOp) and any(isinstance(n, ast.Name) and n.id in sets
                                                           for n in ast.walk(value))  # fmt: skip
        if set_typed or set_made or set_derived:
            sets.add(name)
    return frozenset(enums), frozenset(sets)


def _bound_names(tree: ast.Module, path: Path) -> dict[str, str]:
    """Local name -> the qualified name it was imported as (``ev`` -> ``omni_fsm.spec.events``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, path)
            names.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
    return names


def _qualified(node: ast.expr, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and (base := _qualified(node.value, names)) is not None:
        return f"{base}.{node.attr}"
    return None


@functools.cache
def _root_reexports() -> dict[str, str]:
    """``omni_fsm.X`` -> where the root package takes ``X`` from (``omni_fsm.ReqState`` -> the vocabulary's)."""
    root = MODULES["omni_fsm"]
    return {f"omni_fsm.{k}": v for k, v in _bound_names(_tree(root), root).items()}


def _is_spec_decision(qualified: str) -> bool:
    """Whether a name is an event class (anything of the events module), a vocabulary Enum or one of its
    members, or a vocabulary set."""
    for alias, real in _root_reexports().items():
        if qualified == alias or qualified.startswith(alias + "."):
            qualified = real + qualified[len(alias):]
            break
    enums, sets = _vocabulary()
    if qualified.startswith(EVENTS + "."):
        return True
    head, _, rest = qualified.partition(VOCABULARY + ".")
    if head or not rest:
        return False
    first = rest.split(".")[0]
    return first in enums or rest in sets


def _engine_decisions(tree: ast.Module, path: Path) -> list[str]:
    """``Compare`` nodes (and ``isinstance``/``issubclass`` calls, ``match`` cases) that test a vocabulary
    member, a vocabulary set or an event type."""
    names = _bound_names(tree, path)

    def walk(node: ast.AST) -> Iterator[ast.AST]:  # a nested comparison is reported on its own
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.Compare):
                yield from walk(child)

    def mentions(*nodes: ast.AST) -> bool:
        return any(isinstance(n, (ast.Name, ast.Attribute)) and (q := _qualified(n, names)) is not None
                   and _is_spec_decision(q) for node in nodes for n in walk(node))  # fmt: skip

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = mentions(node.left, *node.comparators)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):  # fmt: skip
            hit = mentions(node.args[1])
        elif isinstance(node, ast.match_case):
            hit = mentions(node.pattern)
        else:
            continue
        if hit:
            line = getattr(node, "lineno", getattr(getattr(node, "pattern", None), "lineno", 0))
            shown = ast.unparse(node.pattern) if isinstance(node, ast.match_case) else ast.unparse(node)
            found.append(f"{_rel(path)}:{line}: {shown}")
    return found


def test_vocabulary_enums_and_sets_are_found() -> None:
    enums, sets = _vocabulary()
    assert {"ReqState", "EngineState", "Role", "StageKind", "StopKind", "Outcome", "FinishReason",
            "ControlMethod"} <= enums  # fmt: skip
    assert {"TERMINAL", "LIVE", "PARKED", "HOLDS_SLOT", "BOUND", "ENGINE_TERMINAL"} <= sets


DECISIONS = [
    "x is ReqState.ABORTING",
    "state in (ReqState.RUNNING, ReqState.WAITING)",
    "ReqState.ABORTING in (row.source, row.target)",
    "rec.role is not Role.CHILD",
    "event.__class__ is ev.StageFailed",
    "isinstance(event, ev.StageEvent)",
    "isinstance(event, (ev.RpcDone, Submit))",
    "row.target in TERMINAL",
    "resume not in BOUND",
    "state in voc.PARKED",
    "kind == vocabulary.StageKind.AR",
    "type(event) is Submit",
    "match state:\n    case ReqState.RUNNING:\n        pass",
]
NOT_DECISIONS = [
    "row is None",
    "state in self.spec.holds_slot",
    "rec.stage != held_stage",
    "isinstance(table, CompiledTable)",
    "TERMINAL_OUTCOME[rec.state]",
    "dict.fromkeys(ReqState, select)",
    "x = ReqState.ABORTING",
]
_IMPORTS = ("from omni_fsm.spec import events as ev\nfrom omni_fsm.spec import vocabulary as voc\n"
            "import omni_fsm.spec.vocabulary as vocabulary\nfrom omni_fsm.spec.events import Submit\n"
            "from omni_fsm.spec.vocabulary import BOUND, TERMINAL, ReqState, Role, TERMINAL_OUTCOME\n")


@pytest.mark.parametrize("source", DECISIONS)
def test_rule1_check_flags_a_decision(source: str) -> None:
    assert len(_engine_decisions(ast.parse(_IMPORTS + source), ENGINE_FILES[0])) == 1


@pytest.mark.parametrize("source", NOT_DECISIONS)
def test_rule1_check_passes_what_only_reads_the_spec(source: str) -> None:
    assert _engine_decisions(ast.parse(_IMPORTS + source), ENGINE_FILES[0]) == []


@pytest.mark.parametrize("path", ENGINE_FILES, ids=_rel)
def test_engine_module_compares_no_state_or_event_type(path: Path) -> None:
    found = _engine_decisions(_tree(path), path)
    assert not found, "decisions that belong in spec/ (Rule 1):\n" + _report(found)


# -- 7. the public API ----------------------------------------------------------------------------------


def test_public_api_is_unchanged() -> None:
    public = importlib.import_module("omni_fsm").__all__
    assert sorted(public) == PUBLIC_API
    assert len(set(public)) == len(public)


@pytest.mark.parametrize("name", PUBLIC_API)
def test_public_name_resolves(name: str) -> None:
    assert getattr(importlib.import_module("omni_fsm"), name) is not None
