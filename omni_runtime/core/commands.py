"""Commands: what the sans-IO orchestrator asks its driver to do, and the client's messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from omni_fsm import ControlMethod, EngineState, Outcome
from omni_runtime.core.prompts import StageInput


@attrs.frozen(slots=True)
class Command:
    """Base of every orchestrator command."""


@attrs.frozen(slots=True)
class ClientMessage:
    """One message to the client of request ``rid``.

    ``finished`` marks the one terminal (with ``outcome`` and ``reason``); ``stage_final`` the end
    of an earlier final-output stage's stream, or of one sample (``sample >= 0``) of an ``n>1``
    request; ``data`` is what the stage's output adapter renders (an abort carries the prefix).
    """

    rid: int
    stage: int
    data: Any = None
    finished: bool = False
    stage_final: bool = False
    outcome: Outcome | None = None
    reason: str | None = None
    sample: int = -1
    cumulative: int = 0
    error: str | None = None
    #: an AR stage's text: the new text of a partial output; the whole text of a terminal or a stage end
    text: str | None = None
    #: what stopped it (a terminal of ``stop``): the stop string or stop token id; ``None``: EOS or length
    stop_reason: str | int | None = None
    #: the client's own id of the request (``submit``'s ``request_id``), on every message of it; ``None``: none given
    request_id: str | None = None


@attrs.frozen(slots=True)
class Dispatch(Command):
    """Send request ``rid`` with ``stage_input`` to ``replica`` of ``stage`` (``src >= 0``: a forward)."""

    rid: int
    stage: int
    replica: int
    stage_input: StageInput
    src: int = -1


@attrs.frozen(slots=True)
class AbortAt(Command):
    """Physically abort ``req_ids`` at ``replica`` of ``stage`` (results come back keyed ``abort_id``)."""

    stage: int
    replica: int
    abort_id: int
    req_ids: Sequence[int]


@attrs.frozen(slots=True)
class Deliver(Command):
    """Emit ``message`` to the client."""

    message: ClientMessage


@attrs.frozen(slots=True)
class CommitAbort(Command):
    """The abort of ``rid`` is committed: the orchestrator dropped its buffers."""

    rid: int


@attrs.frozen(slots=True)
class AbortAnswer(Command):
    """Answer abort call ``call_id`` (for request ``rid``, whose client's own id is ``request_id`` if it was open
    and had one): ``ok=False`` means nothing changed, retry."""

    call_id: int
    rid: int
    ok: bool
    request_id: str | None = None


@attrs.frozen(slots=True)
class RpcCall(Command):
    """Run control RPC ``call_id`` on ``replica`` of ``stage``."""

    call_id: int
    stage: int
    replica: int
    method: ControlMethod
    level: int = 1
    tags: frozenset[str] = frozenset()


@attrs.frozen(slots=True)
class FeedInput(Command):
    """Give ``replica`` of ``stage`` the next part of request ``rid``'s streamed input (``last``: it ends there)."""

    rid: int
    stage: int
    replica: int
    part: StageInput
    last: bool = False


@attrs.frozen(slots=True)
class RpcAnswer(Command):
    """Answer control RPC ``call_id``: ``ok``, or the worker's ``error``."""

    call_id: int
    method: ControlMethod
    ok: bool
    error: str | None = None


@attrs.frozen(slots=True)
class EngineChanged(Command):
    """The engine's control-plane state changed (``DEAD``: no more work)."""

    state: EngineState


@attrs.frozen(slots=True)
class ReportAfterFinished(Command):
    """Log it: runtime ``stage``/``replica`` reported ``what`` about request ``rid`` after its own ``Finished`` of it
    (it broke its protocol; the report was dropped, and counted in ``counters()['after_finished']``)."""

    stage: int
    replica: int
    rid: int
    what: str


@attrs.frozen(slots=True)
class StopOrchestrator(Command):
    """The orchestrator has stopped: deliver what is queued, then stop the loop."""


@attrs.frozen(slots=True)
class StopRuntimes(Command):
    """Shut every runtime down (always after ``StopOrchestrator``)."""
