"""Observations: what the lifecycle core (or an orchestrator around it) tells the world.

They are the core's outputs (commands for a driver to carry out) and, together with the input
events, the observable history that the invariants judge and that traces record. None of them
names a state of the core.
"""

from __future__ import annotations

import attrs

from omni_fsm.spec.vocabulary import ControlMethod, EngineState, FinishReason, Outcome, Role


@attrs.frozen
class Observation:
    """Base of everything the core reports."""


@attrs.frozen
class Submitted(Observation):
    """A record is tracked: a client request, or a child / companion the core spawned."""

    rid: int
    role: Role = Role.CLIENT
    parent: int = -1
    n: int = 1
    companions: int = 0


@attrs.frozen
class Dispatched(Observation):
    """Work for ``rid`` is sent to ``stage`` (by the orchestrator: nobody else routes), bound to ``replica``.

    The core binds no replica (it says 0); an orchestrator around it names the replica it chose.
    """

    rid: int
    stage: int
    replica: int = 0


@attrs.frozen
class Forwarded(Observation):
    """The orchestrator routes ``rid`` from ``src`` to ``dst`` through the input adapter."""

    rid: int
    src: int
    dst: int


@attrs.frozen
class Emitted(Observation):
    """A message to the client for client request ``rid``.

    ``finished`` marks the request's one terminal; ``stage_final`` marks the end of one
    final-output stage's stream (not terminal); ``sample`` is the child index for ``n>1``.
    ``cumulative`` is the number of tokens generated at ``stage`` so far (for an abort: the
    prefix it carries).
    """

    rid: int
    stage: int
    tokens: int = 0
    cumulative: int = 0
    finished: bool = False
    stage_final: bool = False
    outcome: Outcome | None = None
    reason: FinishReason | None = None
    sample: int = -1


@attrs.frozen
class AbortRequested(Observation):
    """The abort of ``rid`` is accepted: the client's call ``call_id`` (``parent`` is ``None``), or the abort the
    parent ``parent`` fans out to its dependent (``call_id`` is ``None``), is owed an ``AbortAnswered``."""

    rid: int
    call_id: int | None = None
    parent: int | None = None


@attrs.frozen
class AbortSent(Observation):
    """Physical abort asked of ``stage`` for ``rid``."""

    rid: int
    stage: int


@attrs.frozen
class AbortCommitted(Observation):
    """The abort state of ``rid`` is committed (its record is about to be dropped)."""

    rid: int


@attrs.frozen
class AbortAnswered(Observation):
    """The abort caller of ``rid`` is told the outcome (``ok=False``: not aborted; retry, or it ended otherwise).

    The caller is the client's call ``call_id`` when ``parent`` is ``None``, else the parent ``parent`` that
    aborted its dependent ``rid`` (``call_id`` is then ``None``): such an answer never reaches the client.
    """

    rid: int
    ok: bool
    call_id: int | None = None
    parent: int | None = None


@attrs.frozen
class SlotTaken(Observation):
    rid: int
    stage: int


@attrs.frozen
class SlotFreed(Observation):
    rid: int
    stage: int


@attrs.frozen
class Dropped(Observation):
    """An event was dropped: ``why`` is ``unknown`` (id not tracked) or ``stale`` (wrong stage)."""

    rid: int
    event: str
    why: str


@attrs.frozen
class Rejected(Observation):
    """A runtime report the lifecycle has no transition for: the request fails with ``error``."""

    rid: int
    event: str


@attrs.frozen
class Released(Observation):
    """No state is kept for ``rid`` any more."""

    rid: int


@attrs.frozen
class RpcSent(Observation):
    call_id: int
    method: ControlMethod


@attrs.frozen
class RpcAnswered(Observation):
    """The caller of ``call_id`` gets its result: ``ok``, or the worker's ``error``."""

    call_id: int
    method: ControlMethod
    ok: bool
    error: str | None = None


@attrs.frozen
class EngineChanged(Observation):
    state: EngineState


@attrs.frozen
class OrchestratorStopped(Observation):
    pass


@attrs.frozen
class RuntimesStopped(Observation):
    pass
