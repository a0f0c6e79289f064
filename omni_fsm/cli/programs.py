"""Generate ``omni_fsm/spec/programs.py``: each (state, event type)'s row selection and row programs for ``SPEC``.

Run ``.venv/bin/python -m omni_fsm.cli.programs > omni_fsm/spec/programs.py`` after changing the table, a
guard, an effect or the spec's policy; ``tests/fsm/test_programs.py`` fails while the checked-in file is stale.

Once the table has chosen a row, everything the core does is known from the row: the target state, its
effects in order, whether it frees or takes a slot (``policy.slot_plan``) and whether it ends the request.
The generic way (``Lifecycle._run_row``) looks that plan up per event, loops over the effect functions and
tests each flag. A program runs it straight through: ``spec/selection.py``'s tests, and where a selector
returns a row, that row's program: the target state, each effect's body inlined (or, for a body that cannot
be, the effect called), only the slot moves and terminal effects the row has. On
``bench/handle_instructions.py``'s mix (callgrind) that took a ``handle`` from 18,844 instructions to about
14,800 (14,201 by ``bench/handle_instructions.py`` itself), and ``bench/fsm_step.py``'s ratio from 8 to 11.

An effect is inlined when its body (``spec/effects.py``) has no scope or control flow of its own (no
``return``, no comprehension, no nested function), assigns none of its parameters and names only public
module-level names; its locals are prefixed with its name. Anything else is called by name from ``EFFECTS``
or made from the spec (a fan-out, ``FOLLOW_INTERRUPTED``).
"""

from __future__ import annotations

import ast
import builtins
import enum
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from omni_fsm.cli.selectors import module_head
from omni_fsm.engine.compiled import policy_digest
from omni_fsm.spec import effects as effects_module
from omni_fsm.spec import policy
from omni_fsm.spec import selection as generated_selection
from omni_fsm.spec.effects import EFFECTS, Effect
from omni_fsm.spec.guards import GUARDS
from omni_fsm.spec.table import REQUEST_ROWS, SPEC, Row, Spec, rows_digest

REGENERATE = ".venv/bin/python -m omni_fsm.cli.programs > omni_fsm/spec/programs.py"
#: an effect's parameters, and what they are called in a program
EFFECT_PARAMS = {"ctx": "core", "rec": "record", "event": "event", "source": "source", "out": "out"}
#: what an inlined effect may not hold: its own scope, or control flow out of its body
NOT_INLINED = (ast.Return, ast.Yield, ast.YieldFrom, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef,
               ast.ClassDef, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.Global, ast.Nonlocal,
               ast.Try, ast.With, ast.Await, ast.Delete)


#: where a module-level value an inlined body reads is looked for, in order (the modules that define them first)
_HOMES = ("omni_fsm.spec.vocabulary", "omni_fsm.spec.policy", "omni_fsm.spec.guards", "omni_fsm.spec.effects")


class _Module:
    """The generated module's names: each bound once, to one value (a clash is an error, never a shadow)."""

    def __init__(self) -> None:
        self.imports: dict[str, set[str]] = {}  #: module -> ``name`` or ``module as name``
        self.lines: dict[str, str] = {}  #: module-level name -> its definition
        self.values: dict[str, Any] = {}

    def bind(self, name: str, value: Any, definition: str | None = None, home: str | None = None) -> str:
        """Bind ``name`` to ``value``: defined as ``definition``, else imported from ``home`` (its own module)."""
        if name in self.values and self.values[name] is not value:
            raise ValueError(f"{name!r} names two things in the generated programs")
        self.values[name] = value
        if definition is not None:
            self.lines[name] = definition
        else:
            self.imports.setdefault(home or value.__module__, set()).add(name)
        return name

    def global_(self, name: str, value: Any, home: str) -> str:
        """Bind a name an inlined guard or effect of module ``home`` reads; return it."""
        if isinstance(value, enum.Enum):
            self.bind(type(value).__name__, type(value))
            return self.bind(name, value, f"{type(value).__name__}.{value.name}")
        if isinstance(value, Row):
            self.bind("REQUEST_ROWS", REQUEST_ROWS, home="omni_fsm.spec.table")
            return self.bind(name, value, f"REQUEST_ROWS[{REQUEST_ROWS.index(value)}]")
        if name.startswith("guard_"):
            self.bind("GUARDS", GUARDS, home="omni_fsm.spec.guards")
            return self.bind(name, value, f'GUARDS["{name.removeprefix("guard_")}"]')
        if inspect.ismodule(value):
            package, _, leaf = value.__name__.rpartition(".")
            self.imports.setdefault(package, set()).add(leaf if leaf == name else f"{leaf} as {name}")
            self.values[name] = value
            return name
        if name.startswith("_"):
            raise ValueError(f"{name!r}: an inlined body may read public names only")
        own = getattr(value, "__module__", None)
        if getattr(sys.modules.get(own or ""), name, None) is not value:  # a set or table: where it is exported
            own = next((m for m in _HOMES if getattr(sys.modules[m], name, None) is value), home)
        return self.bind(name, value, home=own)


def _tests(select: Callable[..., Any]) -> list[tuple[ast.expr | None, Row]]:
    """Return a generated selector's ``(test, row)`` in order (``None``: unconditional)."""
    func = ast.parse(textwrap.dedent(inspect.getsource(select))).body[0]
    assert isinstance(func, ast.FunctionDef)
    found: list[tuple[ast.expr | None, Row]] = []
    for node in func.body:
        returned = node.body[0] if isinstance(node, ast.If) else None
        if isinstance(returned, ast.Return) and isinstance(returned.value, ast.Name):
            found.append((node.test, select.__globals__[returned.value.id]))  # type: ignore[attr-defined]
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            found.append((None, select.__globals__[node.value.id]))
            break
        elif isinstance(node, ast.Return):
            break
        else:
            raise ValueError(f"{select.__name__}: a selector of if-return statements expected")
    return found


def _rename_globals(tree: ast.AST, globals_: dict[str, Any], module: _Module, locals_: dict[str, str]) -> None:
    """Rename ``tree``'s locals by ``locals_`` and bind every global it reads in ``module``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name):
            continue
        if node.id in locals_:
            node.id = locals_[node.id]
        elif node.id in globals_:
            module.global_(node.id, globals_[node.id], globals_["__name__"])
        elif not hasattr(builtins, node.id):
            raise ValueError(f"{node.id!r}: a name neither local, global nor builtin")


def _inlined(effect: Callable[..., Any], module: _Module) -> list[str] | None:
    """Return ``effect``'s body as program lines, or ``None`` when it must be called (see the module)."""
    if not inspect.isfunction(effect) or effect.__closure__ is not None or effect.__name__ == "<lambda>":
        return None
    func = ast.parse(textwrap.dedent(inspect.getsource(effect))).body[0]
    if not isinstance(func, ast.FunctionDef) or [a.arg for a in func.args.args] != list(EFFECT_PARAMS):
        return None
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    nodes = [n for s in body for n in ast.walk(s)]
    stored = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    read = {n.id for n in nodes if isinstance(n, ast.Name)} - stored - set(EFFECT_PARAMS)
    if any(isinstance(n, NOT_INLINED) for n in nodes) or stored & set(EFFECT_PARAMS) or any(
            name.startswith("_") for name in read):
        return None
    prefix = effect.__name__.strip("_")
    renamed = {**EFFECT_PARAMS, **{name: f"{prefix}_{name}" for name in stored}}
    for statement in body:
        _rename_globals(statement, effect.__globals__, module, renamed)
    return [line for statement in body for line in ast.unparse(statement).splitlines()]


def _effect(effect: Effect, spec: Spec, resume_to: Any, module: _Module) -> list[str]:
    """Return the lines that run ``effect`` of a row in a program."""
    if effect is Effect.FOLLOW_INTERRUPTED:
        module.bind("follow_interrupted", effects_module.follow_interrupted)
        name = module.bind(f"follow_interrupted_{resume_to.name.lower()}", None,
                           f"follow_interrupted(ReqState.{resume_to.name})")
        module.bind("ReqState", type(resume_to))
        return [f"{name}(core, record, event, source, out)"]
    if effect in spec.fan_out:
        module.bind("fan_out_effect", effects_module.fan_out_effect)
        module.bind("SPEC", SPEC, home="omni_fsm.spec.table")
        module.bind("Effect", Effect)
        name = module.bind(f"fan_out_{effect.name.lower()}", None,
                           f"fan_out_effect(SPEC.fan_out[Effect.{effect.name}])")
        return [f"{name}(core, record, event, source, out)"]
    lines = _inlined(EFFECTS[effect], module)
    if lines is not None:
        return [f"# {effect.name}", *lines]
    module.bind("EFFECTS", EFFECTS, home="omni_fsm.spec.effects")
    module.bind("Effect", Effect)
    name = module.bind(f"effect_{effect.name.lower()}", None, f"EFFECTS[Effect.{effect.name}]")
    return [f"{name}(core, record, event, source, out)  # {effect.name}"]


def _row_program(row: Row, spec: Spec, module: _Module) -> list[str]:
    """Return the lines that run ``row`` on ``record`` (``source``: its state before), ending in ``return ROW``."""
    plan = policy.slot_plan(row.source, row.target, row.effects, spec.holds_slot)  # type: ignore[arg-type]
    target = module.global_(f"ReqState_{row.target.name}", row.target, "")
    body: list[str] = []
    if plan.free is None:  # an abort is involved: slots follow the state it interrupted (or restores)
        module.bind("holds_slot", policy.holds_slot)
        module.bind("HOLDS_SLOT", spec.holds_slot, "SPEC.holds_slot")
        module.bind("SPEC", SPEC, home="omni_fsm.spec.table")
        body.append("held = holds_slot(source, record.resume, HOLDS_SLOT)")
    if plan.free is not False:
        body.append("held_stage = record.stage")
    body.append(f"record.state = {target}")
    for effect in row.effects:
        body += _effect(effect, spec, row.resume_to, module)
    free = ["core.engine.slots_used[held_stage] -= 1", "out.append(ob.SlotFreed(record.rid, held_stage))"]
    take = ["core.engine.slots_used[record.stage] += 1", "out.append(ob.SlotTaken(record.rid, record.stage))"]
    if plan.free is None or plan.free or plan.take:
        module.global_("ob", sys.modules["omni_fsm.spec.observations"], "")
    if plan.free is None:
        module.bind("slot_moves", policy.slot_moves)
        body += ["free, take = slot_moves(held, holds_slot(record.state, record.resume, HOLDS_SLOT), "
                 "record.stage != held_stage)", "if free:", *(f"    {x}" for x in free), "if take:",
                 *(f"    {x}" for x in take)]  # fmt: skip
    else:
        body += [*(free if plan.free else []), *(take if plan.take else [])]
    if plan.terminal:  # one function for every terminal row: they are few per event
        body.append("on_terminal(core, record, event, source, out)")
    index = REQUEST_ROWS.index(row)
    body.append(f"return {module.global_(f'ROW_{index}', row, '')}")
    return body


def render_programs(spec: Spec = SPEC) -> str:
    """Return the source of ``omni_fsm/spec/programs.py`` for ``spec`` (its request rows as ``selection.py``
    selects them)."""
    if rows_digest(spec.rows) != generated_selection.DIGEST:
        raise ValueError("spec/selection.py selects another table: regenerate it first")
    module = _Module()
    functions: list[str] = []
    index: dict[str, list[str]] = {}
    for event_type, by_state in generated_selection.INDEX.items():
        for state, select in by_state.items():
            name = select.__name__
            lines = [f"def {name}(core: Any, record: Any, event: Any, out: Any) -> Row | None:"]
            tests = _tests(select)
            reads_engine = any(t is not None and any(isinstance(n, ast.Name) and n.id == "engine" for n in ast.walk(t))
                               for t, _ in tests)  # fmt: skip
            if reads_engine:
                lines.append("    engine = core.engine")
            header = len(lines)
            for test, row in tests:
                program = _row_program(row, spec, module)
                if test is None:
                    lines += [f"    {x}" for x in program]
                    break
                _rename_globals(test, select.__globals__, module, {"record": "record", "event": "event",
                                                                    "engine": "engine"})
                lines += [f"    if {ast.unparse(test)}:", *(f"        {x}" for x in program)]
            else:
                lines.append("    return None")
            if any(re.search(r"\bsource\b", line.split("#")[0]) for line in lines[header:]):
                lines.insert(header, "    source = record.state")  # the state the row leaves, as effects are told
            functions += ["", "", *lines]
            alias = module.global_(f"ReqState_{state.name}", state, "")
            index.setdefault(event_type.__name__, []).append(f"        {alias}: {name},")
    terminal = ["def on_terminal(core: Any, record: Any, event: Any, source: Any, out: Any) -> None:",
                '    """What every terminal row does after its own effects (``spec.on_terminal``)."""']
    for effect in spec.on_terminal:
        terminal += [f"    {x}" for x in _effect(effect, spec, None, module)]
    functions = ["", "", *terminal, *functions]
    module.bind("Row", Row)
    head = module_head([
        "Row programs of ``SPEC``: GENERATED by ``omni_fsm/cli/programs.py`` from the table, the guards, the",
        "effects and the spec's policy. Do not edit: regenerate with",
        f"``{REGENERATE}``.",
        "",
        "One function per (state, event type) of the request table: ``spec/selection.py``'s tests, and where a",
        "selector returns a row, the row's program (target state, effects, slot moves, terminal effects), which",
        "returns the row; ``None``: no row. The core runs these when its table selects with ``spec/selection.py``,",
        "its spec's policy is ``MADE_FROM`` and its effects ``MADE_WITH``; otherwise each row's plan the generic way",
        "(``Lifecycle._run_row``).",
    ])
    module.global_("ev", sys.modules["omni_fsm.spec.events"], "")
    made_from = f'MADE_FROM = "{policy_digest(spec)}"  #: the spec policy these were made from (``policy_digest``)'
    module.bind("EFFECTS", EFFECTS, home="omni_fsm.spec.effects")
    made_with = "MADE_WITH = dict(EFFECTS)  #: the effect functions these inline or call (the core checks it has these)"
    body = [f"from {mod} import {', '.join(sorted(names))}" for mod, names in sorted(module.imports.items())]
    body += ["", made_from, made_with, ""]
    body += [f"{name} = {definition}" for name, definition in sorted(module.lines.items())]
    table = ["", "", "#: event type -> state -> program", "INDEX: dict[type[Any], dict[Any, Any]] = {"]
    for event_name, items in index.items():
        table += [f"    ev.{event_name}: {{", *items, "    },"]
    table.append("}")
    return "\n".join([*head, *body, *functions, *table]) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the generated module; return 0."""
    sys.stdout.write(render_programs())
    return 0


__all__ = ["REGENERATE", "main", "render_programs"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
