"""Runtimes by name: the drivers and the kit import no runtime package; a name resolves when it is used."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from omni_fsm import StageKind
from omni_runtime import registry, simple_pipeline
from omni_runtime.errors import ConfigError
from omni_runtime.registry import DEFAULT, RUNTIMES, provider

PACKAGE = Path(__file__).resolve().parents[2] / "omni_runtime"
#: the orchestrator core, its drivers, the demo's workload and command line, and the kit: none of them imports a
#: runtime package
CORE = ["core/orchestrator.py", "engines/host.py", "engines/engine.py", "engines/async_engine.py", "registry.py",
        "core/adapters.py", "core/protocol.py", "core/commands.py", "core/pipeline.py", "core/text.py",
        "apps/workload.py", "apps/cli.py", "testing/__init__.py", "testing/kit.py", "testing/plugin.py",
        "testing/_machine.py", "testing/_checker.py", "testing/item.py"]  # fmt: skip


@pytest.mark.parametrize("path", CORE)
def test_the_core_drivers_and_kit_import_no_runtime(path):
    for node in ast.walk(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert not [n for n in names if n.startswith("omni_runtime.runtimes")], (path, names)


def test_every_name_resolves_and_the_default_is_the_simulator():
    for name in RUNTIMES:
        assert callable(provider(name))
    from omni_runtime.runtimes.sim import sim_factory

    assert DEFAULT == "sim" and provider() is sim_factory


def test_an_unknown_name_is_a_config_error_naming_the_known_ones():
    known = "diffusers, ray, sim, sim-kit, vllm, vllm-engine, vllm-scheduler"
    with pytest.raises(ConfigError, match=rf"unknown runtime 'nope' \(known: {known}\)"):
        provider("nope")


def test_a_stage_of_a_kind_the_runtime_does_not_serve_is_refused_before_any_replica_is_made():
    pipeline = simple_pipeline([StageKind.AR, StageKind.DIFFUSION])
    with pytest.raises(ConfigError, match=r"^stage 1 \('s1'\) is diffusion: the vllm runtime runs AR stages only$"):
        registry.runtimes(pipeline, "vllm")
    with pytest.raises(ConfigError, match=r"^stage 0 \('s0'\) is ar: no runtime is named for it$"):
        registry.runtimes(pipeline, {StageKind.DIFFUSION: "sim"})


def test_a_runtime_per_stage_kind_makes_each_stage_on_its_own():
    pipeline = simple_pipeline([StageKind.AR, StageKind.DIFFUSION])
    made = registry.runtimes(pipeline, {StageKind.AR: "sim", StageKind.DIFFUSION: "sim-kit"})
    assert [type(r[0]).__name__ for r in made] == ["SimAR", "SimDiffusion"]
    assert made[1][0].seed == 7 != made[0][0].seed  # the kit's replica, seeded 7
