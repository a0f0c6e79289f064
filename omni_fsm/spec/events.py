"""Events: the inputs of the lifecycle core, each a named tuple of its own class (``value.Value``).

Each event class says where it comes from (``ORIGIN``), which decides what happens when the
table has no row for it (see ``_table.MISS_POLICY``):

- ``client``: a call of the embedding program (submit, abort, control RPCs, shutdown);
- ``runtime``: a report of a stage runtime (scheduler status, outputs, finishes, failures,
  physical abort and RPC results, death);
- ``internal``: produced by the core itself while handling another event (fan-out to
  children and companions, admission on resume, fatal and shutdown fan-out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, NamedTuple, Self

from omni_fsm.spec.value import Value
from omni_fsm.spec.vocabulary import ControlMethod, IdentityHashedEnum, ReqState, StopKind


class Origin(IdentityHashedEnum):
    """Where an event comes from: it decides what a missing table row means (``_table.MISS_POLICY``)."""

    CLIENT = "client"
    RUNTIME = "runtime"
    INTERNAL = "internal"


CLIENT, RUNTIME, INTERNAL = Origin.CLIENT, Origin.RUNTIME, Origin.INTERNAL


class Event(Value):
    """Base of every lifecycle event (its fields: each class's named tuple, ``_Name``)."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = INTERNAL


class RequestEvent(Event):
    """An event about one tracked request (``rid`` is the internal, never reused id)."""

    __slots__ = ()
    rid: int

    if TYPE_CHECKING:  # how a request event of any class is made (each class's named tuple says it exactly)
        def __new__(cls, rid: int) -> Self: ...


class StageEvent(RequestEvent):
    """A runtime report about a request at one stage; stale if that is not its current stage."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = RUNTIME
    stage: int
    #: the replica of ``stage`` whose runtime sent the report (the last field: the others stay positional)
    replica: int

    if TYPE_CHECKING:  # how a stage report of any class is made (each class's named tuple says it exactly)
        def __new__(cls, rid: int, stage: int, *, replica: int = 0) -> Self: ...


class _AtStage(NamedTuple):
    """The fields of a stage report that adds none of its own."""

    rid: int
    stage: int
    replica: int = 0


class _OfRequest(NamedTuple):
    """The field of a request event that adds none of its own."""

    rid: int


class _NoFields(NamedTuple):
    """An engine event with no fields."""


# -- client calls -----------------------------------------------------------------------


class _Submit(NamedTuple):
    rid: int
    n: int = 1
    companions: int = 0
    #: the client's own id for the request (as vLLM's ``request_id``; ``None``: none given). Nothing in the lifecycle
    #: reads it: a trace carries it so that two runs of one workload pair their requests by it (ORCH-INV-303),
    #: whatever order each run submitted them in. The last field: the fields above stay positional.
    request_id: str | None = None


class Submit(_Submit, RequestEvent):
    """The client submits a request (``n`` samples, ``companions`` CFG companions)."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = CLIENT


class _Abort(NamedTuple):
    rid: int
    call_id: int = 0
    parent: int | None = None


class Abort(_Abort, RequestEvent):
    """The client (or a parent, for its dependents) asks to abort the request.

    ``call_id`` names the client's abort call, answered by an ``AbortAnswered`` of the same id; ``parent`` is
    ``None`` for a client's call (always, in a trace) and the parent's id for the abort a parent fans out to its
    dependent, whose answer is owed to that parent, never to the client.
    """

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = CLIENT


# -- runtime reports about one request at one stage ----------------------------------------


class Scheduled(_AtStage, StageEvent):
    """The stage scheduler moved the request into its running set."""

    __slots__ = ()


class Preempted(_AtStage, StageEvent):
    """The AR scheduler evicted the request (its KV freed); it is queued again."""

    __slots__ = ()


class AwaitGrammar(_AtStage, StageEvent):
    """Parked until its structured-output grammar is compiled."""

    __slots__ = ()


class AwaitRemoteKVs(_AtStage, StageEvent):
    """Parked until its KV cache arrives from a remote producer."""

    __slots__ = ()


class AwaitStreamingReq(_AtStage, StageEvent):
    """Parked until the next part of a streaming input request arrives."""

    __slots__ = ()


class AwaitChunk(_AtStage, StageEvent):
    """vLLM-Omni async chunk: parked until the next input chunk from upstream arrives."""

    __slots__ = ()


class InputReady(_AtStage, StageEvent):
    """What a parked request waited for has arrived; it goes back to the queue."""

    __slots__ = ()


class _StageOutput(NamedTuple):
    rid: int
    stage: int
    tokens: int = 1
    replica: int = 0


class StageOutput(_StageOutput, StageEvent):
    """The stage produced ``tokens`` new tokens (AR) or denoising steps (diffusion)."""

    __slots__ = ()


class _StageFinished(NamedTuple):
    rid: int
    stage: int
    stop: StopKind = StopKind.STOP
    replica: int = 0


class StageFinished(_StageFinished, StageEvent):
    """The stage finished the request normally (stop, length, repetition, prompt ignored)."""

    __slots__ = ()


class StageFailed(_AtStage, StageEvent):
    """The stage failed this request only."""

    __slots__ = ()


class StageAborted(_AtStage, StageEvent):
    """The stage ended the request itself, as aborted (vLLM's ``pause_scheduler(mode="abort")``): no abort was
    sent for it; it ends ``abort`` with its prefix, never ``error``."""

    __slots__ = ()


class ReplicaLost(_AtStage, StageEvent):
    """The replica this request was bound to at ``stage`` (``replica``) died."""

    __slots__ = ()


class AbortDone(_AtStage, StageEvent):
    """The physical abort at ``stage`` succeeded."""

    __slots__ = ()


class AbortFailed(_AtStage, StageEvent):
    """The physical abort at ``stage`` failed: nothing may be committed."""

    __slots__ = ()


# -- internal fan-out ------------------------------------------------------------------------


class Admit(_OfRequest, RequestEvent):
    """Admission of a held (``PENDING``) request once the engine resumes."""

    __slots__ = ()


class _ChildEnded(NamedTuple):
    rid: int
    outcome: ReqState


class ChildEnded(_ChildEnded, RequestEvent):
    """One child of this ``n>1`` parent reached the terminal state ``outcome``."""

    __slots__ = ()


class _CompanionEnded(NamedTuple):
    rid: int
    ok: bool


class CompanionEnded(_CompanionEnded, RequestEvent):
    """One CFG companion of this parent ended: ``ok`` when it finished normally."""

    __slots__ = ()


class EngineFailed(_OfRequest, RequestEvent):
    """The engine died: every open request fails (fatal)."""

    __slots__ = ()


class ShutdownAbort(_OfRequest, RequestEvent):
    """The engine shuts down: every open request ends as aborted."""

    __slots__ = ()


# -- the engine's control plane -------------------------------------------------------------


class _Control(NamedTuple):
    call_id: int
    method: ControlMethod
    level: int = 1
    tags: frozenset[str] = frozenset()


class Control(_Control, Event):
    """The client calls a control RPC (sleep, wake_up, pause/resume_scheduler)."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = CLIENT


class _RpcDone(NamedTuple):
    call_id: int


class RpcDone(_RpcDone, Event):
    """Every worker answered the control RPC ``call_id`` successfully."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = RUNTIME


class _RpcFailed(NamedTuple):
    call_id: int
    error: str = "worker error"


class RpcFailed(_RpcFailed, Event):
    """A worker raised while executing control RPC ``call_id``."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = RUNTIME


class EngineDied(_NoFields, Event):
    """A stage lost its last live replica: the engine is dead."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = RUNTIME


class Shutdown(_NoFields, Event):
    """The client shuts the engine down (orchestrator first, then the runtimes)."""

    __slots__ = ()
    ORIGIN: ClassVar[Origin] = CLIENT


REQUEST_EVENTS: tuple[type[RequestEvent], ...] = (
    Submit, Abort, Scheduled, Preempted, AwaitGrammar, AwaitRemoteKVs, AwaitStreamingReq,
    AwaitChunk, InputReady, StageOutput, StageFinished, StageAborted, StageFailed, ReplicaLost, AbortDone,
    AbortFailed, Admit, ChildEnded, CompanionEnded, EngineFailed, ShutdownAbort,
)
ENGINE_EVENTS: tuple[type[Event], ...] = (Control, RpcDone, RpcFailed, EngineDied, Shutdown)
#: A runtime's reports about one request at one stage (the one list of them: the rest derive from it).
STAGE_REPORTS: tuple[type[StageEvent], ...] = tuple(e for e in REQUEST_EVENTS if issubclass(e, StageEvent))
