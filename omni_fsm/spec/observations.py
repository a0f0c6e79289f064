"""Observations: what the lifecycle core (or an orchestrator around it) tells the world.

They are the core's outputs (commands for a driver to carry out) and, together with the input
events, the observable history that the invariants judge and that traces record. None of them
names a state of the core.

Each is a named tuple of its own class (``value.Value``): cheap to make, immutable, equal only to an observation of
its class with equal fields.
"""

from __future__ import annotations

from typing import NamedTuple

from omni_fsm.spec.value import Value
from omni_fsm.spec.vocabulary import ControlMethod, EngineState, FinishReason, Outcome, Role


class Observation(Value):
    """Base of everything the core reports."""

    __slots__ = ()


class _Submitted(NamedTuple):
    rid: int
    role: Role = Role.CLIENT
    parent: int = -1
    n: int = 1
    companions: int = 0


class Submitted(_Submitted, Observation):
    """A record is tracked: a client request, or a child / companion the core spawned."""

    __slots__ = ()


class _Dispatched(NamedTuple):
    rid: int
    stage: int
    replica: int = 0


class Dispatched(_Dispatched, Observation):
    """Work for ``rid`` is sent to ``stage`` (by the orchestrator: nobody else routes), bound to ``replica``.

    The core binds no replica (it says 0); an orchestrator around it names the replica it chose.
    """

    __slots__ = ()


class _Forwarded(NamedTuple):
    rid: int
    src: int
    dst: int


class Forwarded(_Forwarded, Observation):
    """The orchestrator routes ``rid`` from ``src`` to ``dst`` through the input adapter."""

    __slots__ = ()


class _Emitted(NamedTuple):
    rid: int
    stage: int
    tokens: int = 0
    cumulative: int = 0
    finished: bool = False
    stage_final: bool = False
    outcome: Outcome | None = None
    reason: FinishReason | None = None
    sample: int = -1


class Emitted(_Emitted, Observation):
    """A message to the client for client request ``rid``.

    ``finished`` marks the request's one terminal; ``stage_final`` marks the end of one
    final-output stage's stream (not terminal); ``sample`` is the child index for ``n>1``.
    ``cumulative`` is the number of tokens generated at ``stage`` so far (for an abort: the
    prefix it carries).
    """

    __slots__ = ()


class _AbortRequested(NamedTuple):
    rid: int
    call_id: int | None = None
    parent: int | None = None


class AbortRequested(_AbortRequested, Observation):
    """The abort of ``rid`` is accepted: the client's call ``call_id`` (``parent`` is ``None``), or the abort the
    parent ``parent`` fans out to its dependent (``call_id`` is ``None``), is owed an ``AbortAnswered``."""

    __slots__ = ()


class _AbortSent(NamedTuple):
    rid: int
    stage: int


class AbortSent(_AbortSent, Observation):
    """Physical abort asked of ``stage`` for ``rid``."""

    __slots__ = ()


class _AbortCommitted(NamedTuple):
    rid: int


class AbortCommitted(_AbortCommitted, Observation):
    """The abort state of ``rid`` is committed (its record is about to be dropped)."""

    __slots__ = ()


class _AbortAnswered(NamedTuple):
    rid: int
    ok: bool
    call_id: int | None = None
    parent: int | None = None


class AbortAnswered(_AbortAnswered, Observation):
    """The abort caller of ``rid`` is told the outcome (``ok=False``: not aborted; retry, or it ended otherwise).

    The caller is the client's call ``call_id`` when ``parent`` is ``None``, else the parent ``parent`` that
    aborted its dependent ``rid`` (``call_id`` is then ``None``): such an answer never reaches the client.
    """

    __slots__ = ()


class _SlotTaken(NamedTuple):
    rid: int
    stage: int


class SlotTaken(_SlotTaken, Observation):
    """``rid`` takes a running slot of ``stage``."""

    __slots__ = ()


class _SlotFreed(NamedTuple):
    rid: int
    stage: int


class SlotFreed(_SlotFreed, Observation):
    """``rid`` frees its running slot of ``stage``."""

    __slots__ = ()


class _Dropped(NamedTuple):
    rid: int
    event: str
    why: str


class Dropped(_Dropped, Observation):
    """An event was dropped: ``why`` is ``unknown`` (id not tracked) or ``stale`` (wrong stage)."""

    __slots__ = ()


class _Rejected(NamedTuple):
    rid: int
    event: str


class Rejected(_Rejected, Observation):
    """A runtime report the lifecycle has no transition for: the request fails with ``error``."""

    __slots__ = ()


class _Released(NamedTuple):
    rid: int


class Released(_Released, Observation):
    """No state is kept for ``rid`` any more."""

    __slots__ = ()


class _RpcSent(NamedTuple):
    call_id: int
    method: ControlMethod


class RpcSent(_RpcSent, Observation):
    """The control RPC ``call_id`` (``method``) is sent to the stages."""

    __slots__ = ()


class _RpcAnswered(NamedTuple):
    call_id: int
    method: ControlMethod
    ok: bool
    error: str | None = None


class RpcAnswered(_RpcAnswered, Observation):
    """The caller of ``call_id`` gets its result: ``ok``, or the worker's ``error``."""

    __slots__ = ()


class _EngineChanged(NamedTuple):
    state: EngineState


class EngineChanged(_EngineChanged, Observation):
    """The engine's control-plane state is now ``state``."""

    __slots__ = ()


class _OrchestratorStopped(NamedTuple):
    pass


class OrchestratorStopped(_OrchestratorStopped, Observation):
    """The orchestrator stopped (shutdown): it routes nothing more."""

    __slots__ = ()


class _RuntimesStopped(NamedTuple):
    pass


class RuntimesStopped(_RuntimesStopped, Observation):
    """The stage runtimes are told to stop (after the orchestrator)."""

    __slots__ = ()
