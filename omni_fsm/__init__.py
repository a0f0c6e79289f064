"""omni_fsm: the request lifecycle of a multi-stage inference engine as one checked table.

The public API is re-exported here. The trace reader and writer (``TraceWriter``,
``read_trace`` and the ``Step`` it yields, ``write_trace``, from ``omni_fsm.trace``) and the HTML pages
(``render_trace``, ``render_page`` and its ``Section``, from ``omni_fsm.view``) are re-exported lazily,
on first use; the command line (``omni_fsm.cli``), the ``transitions`` reference machine
(``omni_fsm.engine.reference``) and the diagrams (``omni_fsm.cli.diagram``) are imported only by who needs
them; so ``import omni_fsm`` stays light and free of I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_fsm.engine.core import Counters, Lifecycle
from omni_fsm.errors import ConfigError, InternalError, LifecycleError, MalformedInput, OmniFsmError
from omni_fsm.invariants import Monitor, Violation, check_history, same_client_streams
from omni_fsm.spec import events, observations
from omni_fsm.spec.record import Engine, Record
from omni_fsm.spec.table import ON_TERMINAL, SPEC, Effect, Row, Spec
from omni_fsm.spec.vocabulary import (
    BOUND,
    ENGINE_TERMINAL,
    HOLDS_SLOT,
    LIVE,
    PARKED,
    TERMINAL,
    TERMINAL_OUTCOME,
    ControlMethod,
    EngineState,
    FinishReason,
    IdentityHashedEnum,
    Outcome,
    ReqState,
    Role,
    StageKind,
    StopKind,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers; at run time ``__getattr__`` imports them on first use
    from omni_fsm.trace import Step, TraceWriter, read_trace, write_trace
    from omni_fsm.view import Section, render_page, render_trace

_LAZY = {"Step": "omni_fsm.trace", "TraceWriter": "omni_fsm.trace", "read_trace": "omni_fsm.trace",
         "write_trace": "omni_fsm.trace", "Section": "omni_fsm.view", "render_page": "omni_fsm.view",
         "render_trace": "omni_fsm.view"}


def __getattr__(name: str) -> Any:
    """Return a lazily re-exported name (the trace I/O shell is imported on first use)."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'omni_fsm' has no attribute {name!r}")

__all__ = [
    "BOUND",
    "ENGINE_TERMINAL",
    "HOLDS_SLOT",
    "LIVE",
    "ON_TERMINAL",
    "PARKED",
    "SPEC",
    "TERMINAL",
    "TERMINAL_OUTCOME",
    "ConfigError",
    "ControlMethod",
    "Counters",
    "Effect",
    "Engine",
    "EngineState",
    "FinishReason",
    "IdentityHashedEnum",
    "InternalError",
    "Lifecycle",
    "LifecycleError",
    "MalformedInput",
    "Monitor",
    "OmniFsmError",
    "Outcome",
    "Record",
    "ReqState",
    "Role",
    "Row",
    "Section",
    "Spec",
    "StageKind",
    "Step",
    "StopKind",
    "TraceWriter",
    "Violation",
    "__version__",
    "check_history",
    "events",
    "observations",
    "read_trace",
    "render_page",
    "render_trace",
    "same_client_streams",
    "write_trace",
]
