"""A runtime cannot route: reports name no stage or destination, and runtimes never see the orchestrator."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import pytest

import omni_runtime
from omni_fsm import StageKind
from omni_runtime import Orchestrator, Prompt, simple_pipeline
from omni_runtime.core import protocol as rp

RUNTIMES = Path(__file__).parents[2] / "omni_runtime" / "runtimes"
#: what a runtime must never import: the orchestrator and the drivers around it
FORBIDDEN = ("omni_runtime.core.orchestrator", "omni_runtime.engines.host", "omni_runtime.engines.async_engine",
             "omni_runtime.engines.engine")


def test_reports_carry_no_routing_field():
    for cls in (rp.StatusChanged, rp.Output, rp.Finished, rp.Failed, rp.AbortResult, rp.RpcResult):
        names = {f.name for f in attrs.fields(cls)}
        assert not names & {"stage", "replica", "dst", "target", "next_stage"}, cls


def _reexported() -> set[str]:
    """Names ``omni_runtime`` re-exports from a forbidden module (``Orchestrator``, ``Host``, ``Engine``...)."""
    exported = {name: getattr(omni_runtime, name) for name in omni_runtime.__all__}
    return {name for name, obj in exported.items() if getattr(obj, "__module__", "") in FORBIDDEN}


def _is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _forbidden_imports(source: str, package: str) -> list[str]:
    """Return what ``source`` (a module of ``package``) imports from a forbidden module, in every import form.

    ``import a.b``, ``from a import b`` (``b`` a module or a name re-exported by ``a``), ``from a import *``,
    relative imports (resolved against ``package``) and ``importlib.import_module`` / ``__import__`` of a
    constant name.
    """
    found: list[str] = []
    reexported = _reexported()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    found.append(f"{'.' * node.level}{module} (beyond the top-level package)")
                    continue
                module = ".".join([*parts[: len(parts) - node.level + 1], *([module] if module else [])])
            if _is_forbidden(module):
                found.append(module)
                continue
            for alias in node.names:
                if alias.name == "*" and module == "omni_runtime":
                    found.append("omni_runtime.*")
                elif _is_forbidden(f"{module}.{alias.name}") or (module == "omni_runtime" and alias.name in reexported):
                    found.append(f"{module}.{alias.name}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            target = node.args[0].value
            if name in ("import_module", "__import__") and isinstance(target, str) and _is_forbidden(target):
                found.append(target)
    return found


@pytest.mark.parametrize("source", [
    "import omni_runtime.engines.host",
    "import omni_runtime.core.orchestrator as o",
    "import os, omni_runtime.engines.engine",
    "from omni_runtime.core import orchestrator",
    "from omni_runtime.engines import protocol, host as h",
    "from omni_runtime.engines.async_engine import AsyncEngine",
    "from omni_runtime.core.orchestrator import _Route",
    "from omni_runtime import Orchestrator",
    "from omni_runtime import Engine",
    "from omni_runtime import *",
    "from ...engines import host",
    "from ...core.orchestrator import Orchestrator",
    "from ...engines.engine import Engine",
    "from .... import x",
    "def f():\n    from ...engines import async_engine",
    "import importlib\nimportlib.import_module('omni_runtime.engines.host')",
    "__import__('omni_runtime.core.orchestrator')",
])  # fmt: skip
def test_the_import_check_catches_every_form(source):
    assert _forbidden_imports(source, "omni_runtime.runtimes.sim")


def test_the_import_check_allows_what_runtimes_use():
    allowed = "\n".join([
        "from omni_runtime.core import protocol as rp", "from omni_runtime.core.adapters import StageInput",
        "from omni_runtime.runtimes.sim._base import SimReplica", "from . import ar", "from .config import SimConfig",
        "from ...core.pipeline import StageSpec", "import omni_runtime.core.protocol", "from omni_fsm import StageKind",
        "from omni_runtime import hosting", "import omni_runtime.synchronous",
    ])  # fmt: skip
    assert _forbidden_imports(allowed, "omni_runtime.runtimes.sim") == []


def test_runtimes_import_no_orchestrator_or_driver():
    paths = sorted(RUNTIMES.rglob("*.py"))
    assert paths, RUNTIMES
    for path in paths:
        package = ".".join(("omni_runtime", *path.relative_to(RUNTIMES.parent).parent.parts))
        assert _forbidden_imports(path.read_text(), package) == [], path


def test_a_report_claiming_another_stage_is_not_acted_on():
    orch = Orchestrator(simple_pipeline([StageKind.AR, StageKind.AR]))
    rid, _ = orch.submit(Prompt())
    orch.report(0, 0, rp.StatusChanged(rid, 0, rp.Status.SCHEDULED))
    assert orch.report(1, 0, rp.Finished(rid, 0)) == []  # stage 1's runtime knows nothing of it
    assert orch.lifecycle.counters.dropped_stale == 1
