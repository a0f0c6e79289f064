"""The closed vocabularies of the request lifecycle: states, finish reasons, stage kinds.

Everything that names a lifecycle state lives here; the transition table (``_table.py``)
says how the states connect.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from omni_fsm.errors import ConfigError


class IdentityHashedEnum(enum.Enum):
    """An Enum hashed by identity (members are singletons): a C-level hash on the hot path."""

    __hash__ = object.__hash__


class ReqState(IdentityHashedEnum):
    """Where one request (or one internal child / companion of it) stands.

    The AR sub-states mirror vLLM 0.32's ``RequestStatus`` (plus vLLM-Omni's wait for an input
    chunk); the rest are orchestration states around them.
    """

    NEW = "new"  #: record created by ``submit``; the Submit event decides where it goes
    PENDING = "pending"  #: submitted, admission held (engine paused)
    WAITING = "waiting"  #: dispatched to the current stage, queued, holds no slot
    WAITING_FOR_GRAMMAR = "waiting_for_structured_output_grammar"  #: parked, holds no slot
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"  #: parked, holds no slot (its KV blocks are loading)
    WAITING_FOR_STREAMING_REQ = "waiting_for_streaming_req"  #: parked between turns, keeps its slot
    WAITING_FOR_CHUNK = "waiting_for_chunk"  #: vLLM-Omni async chunk: parked, holds no slot
    RUNNING = "running"  #: scheduled at the current stage, holds a slot
    PREEMPTED = "preempted"  #: AR only: evicted, back in the queue, holds no slot
    STAGE_DONE = "stage_done"  #: stage finished; waits for CFG companions before forwarding
    AWAITING_CHILDREN = "awaiting_children"  #: ``n>1`` parent: its children do the work
    ABORTING_CHILDREN = "aborting_children"  #: ``n>1`` parent aborted: waits for its last child
    ABORTING = "aborting"  #: abort requested; physical abort at the bound stages in flight
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH_CAPPED = "finished_length_capped"
    FINISHED_REPETITION = "finished_repetition"
    FINISHED_IGNORED = "finished_ignored"  #: prompt too long for the model; reason ``length``
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_ERROR = "finished_error"  #: failed for this request only
    FAILED_FATAL = "failed_fatal"  #: failed because the engine died

    def __repr__(self) -> str:
        return f"<{self.name}>"


#: The terminal states: a request in one of them has had its one terminal and is dropped.
TERMINAL: frozenset[ReqState] = frozenset(
    {
        ReqState.FINISHED_STOPPED,
        ReqState.FINISHED_LENGTH_CAPPED,
        ReqState.FINISHED_REPETITION,
        ReqState.FINISHED_IGNORED,
        ReqState.FINISHED_ABORTED,
        ReqState.FINISHED_ERROR,
        ReqState.FAILED_FATAL,
    }
)
#: Every state that is not terminal.
LIVE: frozenset[ReqState] = frozenset(ReqState) - TERMINAL
#: Parked sub-states: waiting for something outside the scheduler (bound to the stage).
PARKED: frozenset[ReqState] = frozenset(
    {
        ReqState.WAITING_FOR_GRAMMAR,
        ReqState.WAITING_FOR_REMOTE_KVS,
        ReqState.WAITING_FOR_STREAMING_REQ,
        ReqState.WAITING_FOR_CHUNK,
    }
)
#: States that occupy one of the current stage's running slots, as vLLM counts ``max_num_seqs``: running, and a
#: streaming-input session parked between turns (it keeps its model-runner slot). A request waiting for its
#: grammar, its remote KVs or an input chunk holds none: vLLM parks any number of them, and counting them was
#: B4 (vllm#53130: once running + parked reached the cap, nothing was admitted again).
HOLDS_SLOT: frozenset[ReqState] = frozenset({ReqState.RUNNING, ReqState.WAITING_FOR_STREAMING_REQ})
#: States in which the request is bound to (dispatched at) its current stage.
BOUND: frozenset[ReqState] = PARKED | {ReqState.RUNNING, ReqState.WAITING, ReqState.PREEMPTED}


class FinishReason(IdentityHashedEnum):
    """The client-visible finish reasons (vLLM's ``FinishReason`` strings)."""

    STOP = "stop"
    LENGTH = "length"
    REPETITION = "repetition"
    ABORT = "abort"
    ERROR = "error"


class Outcome(IdentityHashedEnum):
    """The closed set of client-visible terminal outcomes."""

    FINISHED = "finished"
    ABORTED = "aborted"
    FAILED = "failed"  #: request-scoped
    FATAL = "fatal"  #: the engine died


#: Terminal state -> (outcome, finish reason). Total over ``TERMINAL``.
TERMINAL_OUTCOME: dict[ReqState, tuple[Outcome, FinishReason]] = {
    ReqState.FINISHED_STOPPED: (Outcome.FINISHED, FinishReason.STOP),
    ReqState.FINISHED_LENGTH_CAPPED: (Outcome.FINISHED, FinishReason.LENGTH),
    ReqState.FINISHED_REPETITION: (Outcome.FINISHED, FinishReason.REPETITION),
    ReqState.FINISHED_IGNORED: (Outcome.FINISHED, FinishReason.LENGTH),
    ReqState.FINISHED_ABORTED: (Outcome.ABORTED, FinishReason.ABORT),
    ReqState.FINISHED_ERROR: (Outcome.FAILED, FinishReason.ERROR),
    ReqState.FAILED_FATAL: (Outcome.FATAL, FinishReason.ERROR),
}

#: Severity order used to fold children's outcomes into their ``n>1`` parent's one terminal.
SEVERITY: dict[ReqState, int] = {
    ReqState.FINISHED_STOPPED: 0,
    ReqState.FINISHED_LENGTH_CAPPED: 1,
    ReqState.FINISHED_IGNORED: 1,
    ReqState.FINISHED_REPETITION: 2,
    ReqState.FINISHED_ABORTED: 3,
    ReqState.FINISHED_ERROR: 4,
    ReqState.FAILED_FATAL: 5,
}


class StopKind(IdentityHashedEnum):
    """How a stage reports that it finished a request normally."""

    STOP = "stop"
    LENGTH = "length"
    REPETITION = "repetition"
    IGNORED = "ignored"  #: prompt too long: nothing generated


#: How a stage finished -> the terminal state when that stage ends the request (``IGNORED``: nothing generated):
#: the one source of the finish mapping (the table's last-stage finish rows follow it, a test checks).
STOP_STATE: dict[StopKind, ReqState] = {
    StopKind.STOP: ReqState.FINISHED_STOPPED, StopKind.LENGTH: ReqState.FINISHED_LENGTH_CAPPED,
    StopKind.REPETITION: ReqState.FINISHED_REPETITION, StopKind.IGNORED: ReqState.FINISHED_IGNORED,
}  # fmt: skip
#: How a stage finished -> the finish reason a client sees (that of the terminal state it maps to).
STOP_REASON: dict[StopKind, FinishReason] = {stop: TERMINAL_OUTCOME[state][1] for stop, state in STOP_STATE.items()}


class Role(IdentityHashedEnum):
    """Who a tracked record is: only ``CLIENT`` records are ever seen by the client."""

    CLIENT = "client"
    CHILD = "child"  #: one sample of an ``n>1`` parent
    COMPANION = "companion"  #: a CFG companion of a parent


class StageKind(IdentityHashedEnum):
    """What a stage runs: an autoregressive LLM (``AR``) or a diffusion pipeline."""

    AR = "ar"
    DIFFUSION = "diffusion"


class EngineState(IdentityHashedEnum):
    """The engine's control plane."""

    RUNNING = "running"
    PAUSED = "paused"  #: admission held
    SLEEPING = "sleeping"  #: no admission: submits are refused
    DEAD = "dead"
    STOPPED = "stopped"

    def __repr__(self) -> str:
        return f"<{self.name}>"


#: Engine states it never leaves: no request is admitted again.
ENGINE_TERMINAL: frozenset[EngineState] = frozenset({EngineState.DEAD, EngineState.STOPPED})


class ControlMethod(IdentityHashedEnum):
    """The control RPCs a client can call on every live replica (vLLM's sleep / wake / pause / resume)."""

    SLEEP = "sleep"
    WAKE_UP = "wake_up"
    PAUSE_SCHEDULER = "pause_scheduler"
    RESUME_SCHEDULER = "resume_scheduler"


_STAGE_KIND_BY_VALUE = {kind.value: kind for kind in StageKind}


def stage_kinds(kinds: Iterable[object]) -> tuple[StageKind, ...]:
    """Return ``kinds`` as ``StageKind`` members (``"ar"`` is ``StageKind.AR``); ``ConfigError`` names a bad one."""
    members: list[StageKind] = []
    for i, kind in enumerate(kinds):
        member = kind if isinstance(kind, StageKind) else _STAGE_KIND_BY_VALUE.get(kind) if type(kind) is str else None
        if member is None:
            raise ConfigError(f"stage {i} kind: expected one of {sorted(_STAGE_KIND_BY_VALUE)}, got {kind!r}")
        members.append(member)
    return tuple(members)


def pipeline_shape(kinds: Iterable[object], final: Iterable[bool]) -> tuple[tuple[StageKind, ...], tuple[bool, ...]]:
    """Return a pipeline's stage kinds (as ``stage_kinds``) and final flags; ``ConfigError`` unless there is at
    least one stage and one flag per stage (what the core, the monitor and the trace writer all require)."""
    kinds_t, final_t = stage_kinds(kinds), tuple(final)
    if not kinds_t or len(kinds_t) != len(final_t):
        raise ConfigError("a pipeline needs at least one stage and one 'final' flag per stage")
    return kinds_t, final_t
