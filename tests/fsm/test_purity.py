"""The formal core stays pure: light to import, no threads, no asyncio, no I/O in its core modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "omni_fsm"
#: The shell around the core: the command line and its interrupts, the trace reader and writer, the registry
#: files and their TOML (whole subpackages: the layout says what is shell).
SHELL_PACKAGES = ("cli", "trace", "registry")
PURE = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in SHELL_PACKAGES)
FORBIDDEN_MODULES = {"threading", "asyncio", "concurrent", "multiprocessing", "_thread", "queue", "socket",
                     "subprocess", "selectors", "torch", "vllm", "diffusers", "omni_runtime"}
FORBIDDEN_CALLS = {"open", "print", "input"}
#: The one module that starts processes, and what it may import for it: the explorer across cores (forked workers,
#: each fed through a multiprocessing queue, whose ``queue.Empty`` it catches). No thread of its own, no asyncio.
PROCESSES = {PACKAGE / "explore" / "parallel.py": {"multiprocessing", "queue"}}


def test_import_loads_no_runtime_or_heavy_module() -> None:
    code = ("import sys, omni_fsm; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'vllm', 'diffusers', 'asyncio', 'omni_runtime') or m.startswith('transitions.extensions')); "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_cli_and_diagrams_are_imported_lazily() -> None:
    lazy = ("'omni_fsm.cli', 'omni_fsm.cli.diagram', 'omni_fsm.engine.reference', 'omni_fsm.trace.check', "
            "'omni_fsm.cli.explore'")
    code = f"import sys, omni_fsm; print(','.join(m for m in ({lazy}, 'transitions') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_uses_no_thread_async_or_io_primitive(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    forbidden = FORBIDDEN_MODULES - PROCESSES.get(path, set())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in forbidden]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in forbidden:
            found.append(node.module or "")
        elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            found.append(f"async construct at line {node.lineno}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{node.func.id}() at line {node.lineno}")
    assert found == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_not_even_the_shell_uses_threads_or_async(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    concurrency = FORBIDDEN_MODULES - {"torch", "vllm", "diffusers", "omni_runtime"} - PROCESSES.get(path, set())
    found = [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
             if a.name.split(".")[0] in concurrency]  # fmt: skip
    found += [node.module or "" for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in concurrency]  # fmt: skip
    assert found == []


def test_only_the_explorer_across_cores_starts_processes() -> None:
    """The carve-out above names a module that exists and needs it: drop the entry when it no longer does."""
    for path, allowed in PROCESSES.items():
        imported = {a.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.Import) for a in node.names}  # fmt: skip
        assert allowed <= imported, path
