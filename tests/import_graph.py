"""The import graph of a package, read from its source (AST only, nothing imported): who imports what, where, with
the names taken; its cycles; the allowed-imports table a document declares. Shared by the architecture tests."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]

Graph = dict[str, dict[str, list[str]]]  # module -> imported module -> where ("path:line")


class Import(NamedTuple):
    """One module of the package imported: ``target`` (a module), the ``names`` taken from it, where."""

    target: str
    names: tuple[str, ...]
    line: int


def rel(path: Path) -> str:
    """Return ``path`` relative to the checkout."""
    return str(path.relative_to(ROOT))


def module_name(path: Path) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    """Return every module of ``package`` (a top-level package of the checkout) by name."""
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


@functools.cache
def tree(path: Path) -> ast.Module:
    """Return the parsed source of ``path``."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def is_private(name: str) -> bool:
    """Return whether ``name`` is private (``_name``, not a dunder)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def from_base(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``path``)."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(path: Path, package: str, known: dict[str, Path]) -> Iterator[Import]:
    """Every import of ``package`` in ``path``: module level, under ``if TYPE_CHECKING:``, inside functions.

    ``from pkg.x import y`` imports the module ``pkg.x.y`` when that is a module, else ``pkg.x``.
    """

    def ours(module: str) -> bool:
        return module == package or module.startswith(package + ".")

    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            yield from (Import(a.name, (), node.lineno) for a in node.names if ours(a.name))
        elif isinstance(node, ast.ImportFrom) and ours(base := from_base(node, path)):
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(sub, (), node.lineno) if sub in known else Import(base, (alias.name,), node.lineno)


def ancestors(module: str) -> list[str]:
    """Return the packages above ``module``, nearest first (``a.b.c`` -> ``a.b``, ``a``)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def graph(package: str, through_init: bool = False) -> Graph:
    """Return the import graph of ``package``. ``through_init``: importing ``a.b.c`` also imports the packages
    ``a.b`` and ``a`` (their ``__init__``), unless they are packages of the importer itself (being imported
    already)."""
    known = modules(package)
    made: Graph = {m: {} for m in known}
    for module, path in known.items():
        own = set(ancestors(module)) | ({module} if path.name == "__init__.py" else set())
        for imp in imports(path, package, known):
            targets = [imp.target]
            if through_init:
                targets += [p for p in ancestors(imp.target) if p not in own and p in known]
            for target in targets:
                wheres = made[module].setdefault(target, [])
                if (where := f"{rel(path)}:{imp.line}") not in wheres:
                    wheres.append(where)
    return made


def cycles(edges: Graph) -> list[list[str]]:
    """The strongly connected components with a cycle (several modules, or one importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
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
            if len(component) > 1 or v in edges.get(v, {}):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def describe_cycle(edges: Graph, component: list[str]) -> str:
    """Return a cycle's edges, each with where it is."""
    members = set(component)
    lines = [f"    {a} -> {b}  ({', '.join(edges[a][b])})" for a in component for b in sorted(edges.get(a, {}))
             if b in members]  # fmt: skip
    return f"  cycle among {', '.join(component)}:\n" + "\n".join(lines)


def allowed_imports(doc: Path, fence: str) -> dict[str, frozenset[str]]:
    """Return the table in ``doc``'s one code block fenced ```` ```FENCE ````: layer -> the layers it may import,
    rows low to high."""
    pattern = rf"^```{re.escape(fence)}[ \t]*\n(.*?)^```"
    blocks = re.findall(pattern, doc.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1, f"{rel(doc)}: expected exactly one ```{fence} block, found {len(blocks)}"
    rows: dict[str, frozenset[str]] = {}
    for raw in blocks[0].splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        layer, colon, allowed = line.partition(":")
        assert colon and layer.strip() and layer.strip() not in rows, f"{rel(doc)}: bad row {raw!r}"
        rows[layer.strip()] = frozenset(allowed.split()) - {"-"}
    return rows


def report(found: list[str]) -> str:
    """Findings ``path:line: what``, one a line, in file and line order."""

    def key(finding: str) -> tuple[str, int, str]:
        where, line, what = [*finding.split(":", 2), "", ""][:3]
        return (where, int(line) if line.isdigit() else 0, what)

    return "\n".join(sorted(found, key=key))


def imported_roots(path: Path) -> set[str]:
    """Return the top-level modules ``path`` imports, in every import form."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                roots.add(node.args[0].value.split(".")[0])
    return roots
