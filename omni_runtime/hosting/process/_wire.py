"""What crosses the pipe between a ``ProcessRuntime`` and its child: one command, then one reply.

Each command names one ``StageRuntime`` call; the reply carries the reports that call produced, in
order, and either the call's result or the text of the exception it raised. ``seq`` pairs a reply
with its command, so a reply meant for an interrupted call is never taken for another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from omni_fsm import ControlMethod
from omni_runtime.core import protocol as rp
from omni_runtime.core.prompts import StageInput


@attrs.frozen(slots=True)
class Command:
    """Base of every command the parent sends (``seq``: 0, 1, 2, ... per child)."""

    seq: int


@attrs.frozen(slots=True)
class AddRequest(Command):
    """Call ``add_request(req_id, stage_input)``."""

    req_id: int
    stage_input: StageInput


@attrs.frozen(slots=True)
class AbortRequests(Command):
    """Call ``abort_requests(abort_id, req_ids)``."""

    abort_id: int
    req_ids: tuple[int, ...]


@attrs.frozen(slots=True)
class FeedInput(Command):
    """Call ``feed_input(req_id, part, last)`` (a ``TypeError`` in the child if its runtime takes no streamed input)."""

    req_id: int
    part: StageInput
    last: bool


@attrs.frozen(slots=True)
class Control(Command):
    """Call ``control(call_id, method, level, tags)``."""

    call_id: int
    method: ControlMethod
    level: int
    tags: frozenset[str]


@attrs.frozen(slots=True)
class Step(Command):
    """Call ``step()``."""


@attrs.frozen(slots=True)
class Shutdown(Command):
    """Call ``shutdown()``, answer, and exit."""


@attrs.frozen(slots=True)
class Reply:
    """The answer to command ``seq``: its ``reports`` in order, and ``result`` or ``error`` (the exception's text).

    The child answers ``seq=-1`` once, before any command: ``error`` set if it could not build its runtime.
    """

    seq: int
    reports: tuple[rp.Report, ...] = ()
    result: Any = None
    error: str | None = None
    trace: str | None = None  #: the child's traceback, with ``error``


def describe(exc: BaseException) -> str:
    """Return ``exc`` as one line: ``TypeName: message``."""
    return f"{type(exc).__name__}: {exc}"


def as_tuple(req_ids: Sequence[int]) -> tuple[int, ...]:
    """Return ``req_ids`` as a tuple of plain ints (what pickles the same on every side)."""
    return tuple(int(r) for r in req_ids)
