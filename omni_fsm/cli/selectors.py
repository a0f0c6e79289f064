"""Generate ``omni_fsm/spec/selection.py``: the row selection of ``SPEC`` with every guard inlined.

Run ``.venv/bin/python -m omni_fsm.cli.selectors > omni_fsm/spec/selection.py`` after changing the
table or a guard; ``tests/fsm/test_selectors.py`` fails while the checked-in file is stale. The
generated module is plain Python in a real file (a guard's error names its file and line); the core
uses it for ``SPEC`` and falls back to closures over the guard functions (``engine/compiled.py``) for
any other table. Why: a closure calls each guard, and a call costs more than the test it makes; on
``bench/handle_instructions.py``'s mix (callgrind) a ``handle`` took 24,502 instructions with the
closures and 20,242 with the inlined selection.

A guard is inlined when its body is one ``return`` expression over ``record``, ``event`` and ``engine``
(the names of a family's closure, such as ``state``, become the member they hold); any other guard is
called by name.
"""

from __future__ import annotations

import ast
import builtins
import enum
import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from omni_fsm.spec import events as ev
from omni_fsm.spec.guards import GUARDS
from omni_fsm.spec.table import REQUEST_ROWS, Row, rows_digest

REGENERATE = ".venv/bin/python -m omni_fsm.cli.selectors > omni_fsm/spec/selection.py"
PARAMS = ("record", "event", "engine")


def snake(name: str) -> str:
    """Return ``CamelCase`` as ``camel_case`` (the generated modules' function names)."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def module_head(doc: list[str]) -> list[str]:
    """Return the opening lines of a generated module: its docstring (``doc``, the lines between the quotes) and the
    imports every generated module starts with."""
    return [f'"""{doc[0]}', *doc[1:], '"""', "", "from __future__ import annotations", "", "from typing import Any", ""]


class _Inliner:
    """Turns guard functions into expressions and collects the names those expressions need."""

    def __init__(self) -> None:
        self.imports: dict[str, set[str]] = {}  #: module -> names
        self.members: dict[str, enum.Enum] = {}  #: plain name -> enum member
        self.called: dict[str, str] = {}  #: module-level name -> guard name

    def _import(self, value: Any, name: str) -> None:
        self.imports.setdefault(value.__module__, set()).add(name)

    def _member(self, member: enum.Enum) -> str:
        name = f"{type(member).__name__}_{member.name}"
        self.members[name] = member
        self._import(type(member), type(member).__name__)
        return name

    def expression(self, name: str) -> str:
        """Return guard ``name`` as an expression over ``record``, ``event``, ``engine``."""
        guard = GUARDS[name]
        tree = ast.parse(textwrap.dedent(inspect.getsource(guard)))
        func = tree.body[0]
        if not isinstance(func, ast.FunctionDef) or tuple(a.arg for a in func.args.args) != PARAMS:
            raise ValueError(f"guard {name}: expected def {name}(record, event, engine)")
        body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return self._call(name)
        cells = dict(zip(guard.__code__.co_freevars, (c.cell_contents for c in guard.__closure__ or ()),
                         strict=True))  # fmt: skip
        expr = _Rewrite(self, cells, guard.__globals__).visit(body[0].value)
        return ast.unparse(expr)

    def _call(self, name: str) -> str:
        alias = f"guard_{name}"
        self.called[alias] = name
        return f"{alias}(record, event, engine)"


class _Rewrite(ast.NodeTransformer):
    """Enum members as plain module names, a closure's cells as the members they hold, globals imported."""

    def __init__(self, inliner: _Inliner, cells: dict[str, Any], globals_: dict[str, Any]) -> None:
        self.inliner, self.cells, self.globals = inliner, cells, globals_

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        base = node.value
        if isinstance(base, ast.Name) and base.id not in PARAMS:
            owner = self.cells.get(base.id, self.globals.get(base.id))
            if isinstance(owner, type) and issubclass(owner, enum.Enum) and node.attr in owner.__members__:
                return ast.Name(self.inliner._member(owner[node.attr]), ast.Load())
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in PARAMS:
            return node
        if node.id in self.cells:
            value = self.cells[node.id]
            if not isinstance(value, enum.Enum):
                raise ValueError(f"a guard's closure holds {value!r}: only enum members are inlined")
            return ast.Name(self.inliner._member(value), ast.Load())
        if node.id not in self.globals and hasattr(builtins, node.id):
            return node
        value = self.globals[node.id]
        if not isinstance(value, Callable) or not hasattr(value, "__module__"):  # type: ignore[arg-type]
            raise ValueError(f"a guard names {node.id!r}, which is no function or class")
        self.inliner._import(value, node.id)
        return node


def _selector(name: str, entries: list[tuple[int, Row]], inliner: _Inliner) -> list[str]:
    lines = [f"def {name}(record: Any, event: Any, engine: Any) -> Row | None:"]
    for index, row in entries:
        tests = [f"({inliner.expression(g)})" for g in row.when]
        tests += [f"not ({inliner.expression(g)})" for g in row.unless]
        if not tests:
            lines.append(f"    return ROW_{index}")
            return lines
        lines.append(f"    if {' and '.join(tests)}:")
        lines.append(f"        return ROW_{index}")
    lines.append("    return None")
    return lines


def render_selectors(rows: tuple[Row, ...] = REQUEST_ROWS) -> str:
    """Return the source of ``omni_fsm/spec/selection.py`` for ``rows`` (the request table)."""
    inliner = _Inliner()
    pairs: dict[tuple[Any, type[ev.Event]], list[tuple[int, Row]]] = {}
    for at, row in enumerate(rows):
        pairs.setdefault((row.source, row.event), []).append((at, row))
    functions: list[str] = []
    index_lines: dict[str, list[str]] = {}
    used_rows: set[int] = set()
    for (state, event), entries in pairs.items():
        name = f"{state.name.lower()}__{snake(event.__name__)}"
        functions += ["", "", *_selector(name, entries, inliner)]
        used_rows |= {i for i, _ in entries}
        index_lines.setdefault(event.__name__, []).append(f"        {inliner._member(state)}: {name},")
    head = module_head([
        "The row selection of ``SPEC``: GENERATED by ``omni_fsm/cli/selectors.py`` from the table and the guards'",
        "own code. Do not edit: regenerate with",
        f"``{REGENERATE}``.",
        "",
        "One function per (state, event type) of the request table, its rows tried in match order with every",
        "guard's expression inlined. The core uses it when its table is ``REQUEST_ROWS`` (``DIGEST``) and",
        "``GUARDS`` are the guards it was made from; ``engine/compiled.py`` selects for any other table.",
    ])
    imports = {**inliner.imports}
    imports.setdefault("omni_fsm.spec.table", set()).update({"REQUEST_ROWS", "Row"})
    imports.setdefault("omni_fsm.spec.guards", set()).add("GUARDS")  # MADE_WITH reads it
    body = ["from omni_fsm.spec import events as ev"]
    body += [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(imports.items())
             if module != "omni_fsm.spec.events" and names]  # fmt: skip
    body += ["", f'DIGEST = "{rows_digest(rows)}"  #: the table this file was made from (``rows_digest``)', ""]
    body += [f"{name} = {type(m).__name__}.{m.name}" for name, m in sorted(inliner.members.items())]
    body += [f'{alias} = GUARDS["{guard}"]' for alias, guard in sorted(inliner.called.items())]
    body += [f"ROW_{i} = REQUEST_ROWS[{i}]" for i in sorted(used_rows)]
    table = ["", "", "#: event type -> state -> selector", "INDEX: dict[type[Any], dict[Any, Any]] = {"]
    for event_name, items in index_lines.items():
        table += [f"    ev.{event_name}: {{", *items, "    },"]
    table += ["}", "#: the guard functions the selectors inline (the core checks it uses the same)",
              "MADE_WITH = {name: GUARDS[name] for name in " + repr(sorted(set(_guard_names(rows)))) + "}"]
    return "\n".join([*head, *body, *functions, *table]) + "\n"


def _guard_names(rows: tuple[Row, ...]) -> list[str]:
    return [g for r in rows for g in (*r.when, *r.unless)]


def main(argv: list[str] | None = None) -> int:
    """Print the generated module; return 0."""
    sys.stdout.write(render_selectors())
    return 0


__all__ = ["REGENERATE", "main", "module_head", "render_selectors", "snake"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
