"""omni_runtime: a sans-IO orchestrator around the ``omni_fsm`` lifecycle, its drivers and runtimes.

Dependency direction, a folder per layer (docs/architecture.md): ``omni_fsm`` <- ``core`` (the orchestrator, commands,
the runtime protocol, pipelines, prompts, adapters) <- ``registry`` <- ``engines`` (``Engine``, ``AsyncEngine``, the
host) and ``hosting`` (process, Ray) <- ``runtimes`` (sim, vllm, diffusers) and ``apps`` (``omni-run``, the demos).
The core imports no asyncio: ``AsyncEngine`` (the asyncio driver) is re-exported lazily, so importing the package or
its core loads no event loop machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_fsm import Outcome  # a ClientMessage's outcome: re-exported so that a client needs one import
from omni_runtime.core.adapters import INPUT_ADAPTERS, OUTPUT_ADAPTERS
from omni_runtime.core.commands import (
    AbortAnswer,
    AbortAt,
    ClientMessage,
    Command,
    CommitAbort,
    Deliver,
    Dispatch,
    EngineChanged,
    RpcAnswer,
    RpcCall,
    StopOrchestrator,
    StopRuntimes,
)  # fmt: skip
from omni_runtime.core.orchestrator import Orchestrator
from omni_runtime.core.pipeline import (
    Pipeline,
    StageSpec,
    example_pipeline,
    load_pipeline,
    parse_pipeline,
    require_pipeline,
    simple_pipeline,
)
from omni_runtime.core.prompts import Prompt, Sampling, StageInput
from omni_runtime.core.protocol import PAUSE_MODES, RuntimeFactory, StageRuntime, StreamingInput, build_runtimes
from omni_runtime.core.results import RequestResult
from omni_runtime.core.text import IncrementalText, Tokenizer
from omni_runtime.engines.engine import Engine
from omni_runtime.engines.host import Host
from omni_runtime.errors import (
    ConfigError,
    EngineNotRunning,
    NoProgress,
    OmniRuntimeError,
    OptionError,
    PipelineError,
    RequestFailed,
    RequestRefused,
    RpcError,
)  # fmt: skip

if TYPE_CHECKING:  # for type checkers; at run time ``__getattr__`` imports it on first use
    from omni_runtime.engines.async_engine import AsyncEngine


def __getattr__(name: str) -> Any:
    """Return ``AsyncEngine`` (the asyncio driver), imported on first use."""
    if name == "AsyncEngine":
        from omni_runtime.engines.async_engine import AsyncEngine

        globals()[name] = AsyncEngine
        return AsyncEngine
    raise AttributeError(f"module 'omni_runtime' has no attribute {name!r}")


__all__ = [
    "INPUT_ADAPTERS",
    "OUTPUT_ADAPTERS",
    "PAUSE_MODES",
    "AbortAnswer",
    "AbortAt",
    "AsyncEngine",
    "ClientMessage",
    "Command",
    "CommitAbort",
    "ConfigError",
    "Deliver",
    "Dispatch",
    "Engine",
    "EngineChanged",
    "EngineNotRunning",
    "Host",
    "IncrementalText",
    "NoProgress",
    "OmniRuntimeError",
    "OptionError",
    "Orchestrator",
    "Outcome",
    "Pipeline",
    "PipelineError",
    "Prompt",
    "RequestFailed",
    "RequestRefused",
    "RequestResult",
    "RpcAnswer",
    "RpcCall",
    "RpcError",
    "RuntimeFactory",
    "Sampling",
    "StageInput",
    "StageRuntime",
    "StageSpec",
    "StopOrchestrator",
    "StopRuntimes",
    "StreamingInput",
    "Tokenizer",
    "build_runtimes",
    "example_pipeline",
    "load_pipeline",
    "parse_pipeline",
    "require_pipeline",
    "simple_pipeline",
]  # fmt: skip
