"""``omni_runtime.testing``: the conformance kit for stage runtimes, and its pytest plugin.

From Python: ``check_runtime(factory)`` runs the state machine and raises ``ConformanceError``
naming the broken invariant. As a pytest plugin::

    pytest -p omni_runtime.testing --omni-runtime=package.module:factory

where ``factory(stage_spec, stage, replica, rpc_fails) -> StageRuntime`` is a ``RuntimeFactory``, the one
signature the engines' ``build_runtimes`` and ``omni-run --runtime`` call too (``rpc_fails``: its workers raise in
every control RPC). Request ids are drawn per example, aborts come in batches of 1-3 and
right after a request reports a wait, and progress is judged before ``shutdown()``, after which
nothing may be reported (``make_machine`` says how). The stream is judged as the engine would take
it too: a report its lifecycle has no row for fails the kit (AR-INV-001), and so does a runtime
call that raises (under the rule its answer belongs to, with the calls that led to it).
Strategies: ``stage_specs``, ``pipelines``, ``workloads``.

The plugin runs the same examples every time (derandomized, no example database), whatever the
Hypothesis profile; ``--omni-runtime-seed=N`` draws them from seed ``N`` instead (``random``: a
fresh seed), with the profile's example database on, and a failure names the seed.

The package is the plugin (``plugin.py``: its hooks, which import no Hypothesis) and gives the kit's names
(``kit.py``) on first use, so that loading the plugin loads no kit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_runtime.testing.plugin import parse_kinds, parse_seed
from omni_runtime.testing.plugin import pytest_addoption as pytest_addoption
from omni_runtime.testing.plugin import pytest_collection_modifyitems as pytest_collection_modifyitems

if TYPE_CHECKING:  # for type checkers; at run time ``__getattr__`` imports them on first use
    from omni_runtime.testing.kit import (
        ConformanceError,
        KitViolation,
        RawStreamChecker,
        check_runtime,
        load_factory,
        make_machine,
        pipelines,
        sim_factory,
        stage_specs,
        workloads,
    )

#: the kit's names, given from ``kit.py`` on first use (it imports Hypothesis)
_KIT = ("ConformanceError", "KitViolation", "RawStreamChecker", "check_runtime", "load_factory", "make_machine",
        "pipelines", "sim_factory", "stage_specs", "workloads")  # fmt: skip


def __getattr__(name: str) -> Any:
    """Return the kit's ``name`` (``kit.py`` imported on first use)."""
    if name in _KIT:
        from omni_runtime.testing import kit

        value = getattr(kit, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'omni_runtime.testing' has no attribute {name!r}")


__all__ = ["ConformanceError", "KitViolation", "RawStreamChecker", "check_runtime", "load_factory", "make_machine",
           "parse_kinds", "parse_seed", "pipelines", "sim_factory", "stage_specs", "workloads"]  # fmt: skip
