"""omni_fsm: the request lifecycle of a multi-stage inference engine as one checked table.

The public API is re-exported here; the command line (``omni_fsm.cli``), the ``transitions``
reference machine (``omni_fsm.reference``) and the diagrams (``omni_fsm.diagram``) are
imported lazily, so ``import omni_fsm`` stays light and free of I/O.
"""

from __future__ import annotations

from omni_fsm import events, observations
from omni_fsm._record import Engine, Record
from omni_fsm._table import ON_TERMINAL, SPEC, Effect, Row, Spec
from omni_fsm._vocab import (
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
    Outcome,
    ReqState,
    Role,
    StageKind,
    StopKind,
)
from omni_fsm.core import Counters, Lifecycle
from omni_fsm.errors import InternalError, LifecycleError, MalformedInput, OmniFsmError

__version__ = "0.1.0"

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
    "ControlMethod",
    "Counters",
    "Effect",
    "Engine",
    "EngineState",
    "FinishReason",
    "InternalError",
    "Lifecycle",
    "LifecycleError",
    "MalformedInput",
    "OmniFsmError",
    "Outcome",
    "Record",
    "ReqState",
    "Role",
    "Row",
    "Spec",
    "StageKind",
    "StopKind",
    "__version__",
    "events",
    "observations",
]
