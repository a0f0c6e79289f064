"""Events: the inputs of the lifecycle core, as frozen, slotted attrs classes.

Each event class says where it comes from (``ORIGIN``), which decides what happens when the
table has no row for it (see ``_table.MISS_POLICY``):

- ``client``: a call of the embedding program (submit, abort, control RPCs, shutdown);
- ``runtime``: a report of a stage runtime (scheduler status, outputs, finishes, failures,
  physical abort and RPC results, death);
- ``internal``: produced by the core itself while handling another event (fan-out to
  children and companions, admission on resume, fatal and shutdown fan-out).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from omni_fsm.spec.vocabulary import ControlMethod, IdentityHashedEnum, ReqState, StopKind


class Origin(IdentityHashedEnum):
    """Where an event comes from: it decides what a missing table row means (``_table.MISS_POLICY``)."""

    CLIENT = "client"
    RUNTIME = "runtime"
    INTERNAL = "internal"


CLIENT, RUNTIME, INTERNAL = Origin.CLIENT, Origin.RUNTIME, Origin.INTERNAL


@attrs.frozen
class Event:
    """Base of every lifecycle event."""

    ORIGIN: ClassVar[Origin] = INTERNAL


@attrs.frozen
class RequestEvent(Event):
    """An event about one tracked request (``rid`` is the internal, never reused id)."""

    rid: int


@attrs.frozen
class StageEvent(RequestEvent):
    """A runtime report about a request at one stage; stale if that is not its current stage."""

    ORIGIN: ClassVar[Origin] = RUNTIME
    stage: int
    #: the replica of ``stage`` whose runtime sent the report (keyword only: the subclasses' fields stay positional)
    replica: int = attrs.field(default=0, kw_only=True)


# -- client calls -----------------------------------------------------------------------


@attrs.frozen
class Submit(RequestEvent):
    """The client submits a request (``n`` samples, ``companions`` CFG companions)."""

    ORIGIN: ClassVar[Origin] = CLIENT
    n: int = 1
    companions: int = 0
    #: the client's own id for the request (as vLLM's ``request_id``; ``None``: none given). Nothing in the lifecycle
    #: reads it: a trace carries it so that two runs of one workload pair their requests by it (ORCH-INV-303),
    #: whatever order each run submitted them in. Keyword only: the fields above stay positional.
    request_id: str | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class Abort(RequestEvent):
    """The client (or a parent, for its dependents) asks to abort the request.

    ``call_id`` names the client's abort call, answered by an ``AbortAnswered`` of the same id; ``parent`` is
    ``None`` for a client's call (always, in a trace) and the parent's id for the abort a parent fans out to its
    dependent, whose answer is owed to that parent, never to the client.
    """

    ORIGIN: ClassVar[Origin] = CLIENT
    call_id: int = 0
    parent: int | None = None


# -- runtime reports about one request at one stage ----------------------------------------


@attrs.frozen
class Scheduled(StageEvent):
    """The stage scheduler moved the request into its running set."""


@attrs.frozen
class Preempted(StageEvent):
    """The AR scheduler evicted the request (its KV freed); it is queued again."""


@attrs.frozen
class AwaitGrammar(StageEvent):
    """Parked until its structured-output grammar is compiled."""


@attrs.frozen
class AwaitRemoteKVs(StageEvent):
    """Parked until its KV cache arrives from a remote producer."""


@attrs.frozen
class AwaitStreamingReq(StageEvent):
    """Parked until the next part of a streaming input request arrives."""


@attrs.frozen
class AwaitChunk(StageEvent):
    """vLLM-Omni async chunk: parked until the next input chunk from upstream arrives."""


@attrs.frozen
class InputReady(StageEvent):
    """What a parked request waited for has arrived; it goes back to the queue."""


@attrs.frozen
class StageOutput(StageEvent):
    """The stage produced ``tokens`` new tokens (AR) or denoising steps (diffusion)."""

    tokens: int = 1


@attrs.frozen
class StageFinished(StageEvent):
    """The stage finished the request normally (stop, length, repetition, prompt ignored)."""

    stop: StopKind = StopKind.STOP


@attrs.frozen
class StageFailed(StageEvent):
    """The stage failed this request only."""


@attrs.frozen
class StageAborted(StageEvent):
    """The stage ended the request itself, as aborted (vLLM's ``pause_scheduler(mode="abort")``): no abort was
    sent for it; it ends ``abort`` with its prefix, never ``error``."""


@attrs.frozen
class ReplicaLost(StageEvent):
    """The replica this request was bound to at ``stage`` (``replica``) died."""


@attrs.frozen
class AbortDone(StageEvent):
    """The physical abort at ``stage`` succeeded."""


@attrs.frozen
class AbortFailed(StageEvent):
    """The physical abort at ``stage`` failed: nothing may be committed."""


# -- internal fan-out ------------------------------------------------------------------------


@attrs.frozen
class Admit(RequestEvent):
    """Admission of a held (``PENDING``) request once the engine resumes."""


@attrs.frozen
class ChildEnded(RequestEvent):
    """One child of this ``n>1`` parent reached the terminal state ``outcome``."""

    outcome: ReqState


@attrs.frozen
class CompanionEnded(RequestEvent):
    """One CFG companion of this parent ended: ``ok`` when it finished normally."""

    ok: bool


@attrs.frozen
class EngineFailed(RequestEvent):
    """The engine died: every open request fails (fatal)."""


@attrs.frozen
class ShutdownAbort(RequestEvent):
    """The engine shuts down: every open request ends as aborted."""


# -- the engine's control plane -------------------------------------------------------------


@attrs.frozen
class Control(Event):
    """The client calls a control RPC (sleep, wake_up, pause/resume_scheduler)."""

    ORIGIN: ClassVar[Origin] = CLIENT
    call_id: int
    method: ControlMethod
    level: int = 1
    tags: frozenset[str] = frozenset()


@attrs.frozen
class RpcDone(Event):
    """Every worker answered the control RPC ``call_id`` successfully."""

    ORIGIN: ClassVar[Origin] = RUNTIME
    call_id: int


@attrs.frozen
class RpcFailed(Event):
    """A worker raised while executing control RPC ``call_id``."""

    ORIGIN: ClassVar[Origin] = RUNTIME
    call_id: int
    error: str = "worker error"


@attrs.frozen
class EngineDied(Event):
    """A stage lost its last live replica: the engine is dead."""

    ORIGIN: ClassVar[Origin] = RUNTIME


@attrs.frozen
class Shutdown(Event):
    """The client shuts the engine down (orchestrator first, then the runtimes)."""

    ORIGIN: ClassVar[Origin] = CLIENT


REQUEST_EVENTS: tuple[type[RequestEvent], ...] = (
    Submit, Abort, Scheduled, Preempted, AwaitGrammar, AwaitRemoteKVs, AwaitStreamingReq,
    AwaitChunk, InputReady, StageOutput, StageFinished, StageAborted, StageFailed, ReplicaLost, AbortDone,
    AbortFailed, Admit, ChildEnded, CompanionEnded, EngineFailed, ShutdownAbort,
)
ENGINE_EVENTS: tuple[type[Event], ...] = (Control, RpcDone, RpcFailed, EngineDied, Shutdown)
#: A runtime's reports about one request at one stage (the one list of them: the rest derive from it).
STAGE_REPORTS: tuple[type[StageEvent], ...] = tuple(e for e in REQUEST_EVENTS if issubclass(e, StageEvent))
