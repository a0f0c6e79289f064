"""The bound on every wait, counted alike by the synchronous engine and both asyncio loops.

A *round* steps every runtime once (``Host.pump``: the synchronous engine and the polling loop; the
event-driven loop runs such rounds itself, paced like the polling loop, once every runtime is idle and
every report is taken while someone waits). *Progress* is a report the orchestrator took and did not
drop; work given to a runtime starts the count afresh too. A wait gives up with ``NoProgress`` after
more than ``max_idle_rounds`` rounds without progress in which every runtime was idle, and, only when
``max_silent_rounds`` is set, after more than that many rounds without progress in which a runtime said
it was busy (a deadlocked scheduler, B4; off by default because a runtime may work long between
reports). The error names what the orchestrator dropped or holds, which is usually why: reports under
request ids it never gave, reports from a replica their request is not bound to, reports held for a
``seq`` that never came, the engine's death.

Rounds bound a wait; ``StallClock`` bounds a replica's silence by time, on by default (``stall_timeout_s``,
300 s, as vLLM's ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``): a replica whose steps say it is busy while it holds
requests and reports nothing for longer is lost (``ReplicaDied``, as a replica whose step raised), its
requests ending failed with the stall named. Time while the engine is paused or asleep by the client's own
call is not silence, nor time the driver does not step it (the synchronous engine between two waits).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from omni_runtime.errors import ConfigError, NoProgress

if TYPE_CHECKING:
    from omni_runtime.core.orchestrator import Orchestrator


class Watchdog:
    """Counts rounds without progress; says when a wait gives up, and why."""

    __slots__ = ("idle", "max_idle_rounds", "max_silent_rounds", "silent")

    def __init__(self, max_idle_rounds: int, max_silent_rounds: int | None) -> None:
        for name, value in (("max_idle_rounds", max_idle_rounds), ("max_silent_rounds", max_silent_rounds)):
            if value is None and name == "max_silent_rounds":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} is an integer >= 0, not {value!r}")
        self.max_idle_rounds, self.max_silent_rounds = max_idle_rounds, max_silent_rounds
        self.idle = self.silent = 0

    def reset(self) -> None:
        """Something moved: count afresh."""
        self.idle = self.silent = 0

    def round(self, progressed: bool, busy: bool) -> str | None:
        """Count one round (``busy``: a runtime said it has work left); return why a wait gives up now (the
        count then starts afresh), else ``None``."""
        if progressed:
            self.idle = self.silent = 0
            return None
        if busy:
            self.idle, self.silent = 0, self.silent + 1
            limit = self.max_silent_rounds
            if limit is not None and self.silent > limit:
                self.reset()
                return f"a runtime says it is busy but reported nothing for {limit} rounds"
            return None
        self.idle += 1
        if self.idle > self.max_idle_rounds:
            self.reset()
            return f"the runtimes are idle and the answer never came ({self.max_idle_rounds} rounds without a report)"
        return None


class StallClock:
    """Per replica, since when its steps say it is busy and it reported nothing; says when that passed the bound."""

    __slots__ = ("since", "stall_timeout_s", "stopped_at")

    def __init__(self, stall_timeout_s: float | None, replicas: Sequence[int]) -> None:
        number = isinstance(stall_timeout_s, int | float) and not isinstance(stall_timeout_s, bool)
        if stall_timeout_s is not None and not (number and stall_timeout_s > 0):
            raise ConfigError(f"stall_timeout_s is a number of seconds > 0 or None, not {stall_timeout_s!r}")
        self.stall_timeout_s = stall_timeout_s  #: ``None``: no bound
        self.since: list[list[float | None]] = [[None] * n for n in replicas]  #: ``None``: not silent now
        self.stopped_at: float | None = None  #: since when no driver steps the replicas (``stop``)

    def silent(self, stage: int, replica: int) -> bool:
        """A step of the replica said it is busy: return whether it has reported nothing for longer than the bound."""
        if self.stall_timeout_s is None:
            return False
        row, now = self.since[stage], time.monotonic()
        since = row[replica]
        if since is None:
            row[replica] = now
            return False
        return now - since > self.stall_timeout_s

    def stop(self) -> None:
        """No driver steps the replicas from now (the synchronous engine's wait ended): the time does not count."""
        if self.stall_timeout_s is not None:
            self.stopped_at = time.monotonic()

    def go(self) -> None:
        """A driver steps the replicas again: the time since ``stop`` is no replica's silence."""
        if self.stopped_at is not None:
            gap, self.stopped_at = time.monotonic() - self.stopped_at, None
            for row in self.since:
                for replica, since in enumerate(row):
                    if since is not None:
                        row[replica] = since + gap


def no_progress(why: str, orchestrator: Orchestrator) -> NoProgress:
    """Return the error of a wait that gives up: ``why``, then what the orchestrator dropped or holds."""
    stats, notes = orchestrator.stats, []
    if stats.unknown_ids:
        notes.append(f"reports dropped under request ids the orchestrator never gave: {stats.unknown_ids} (the "
                     f"last: {orchestrator.unknown_id_last})")  # fmt: skip
    if stats.misrouted:
        notes.append(f"reports dropped from a replica their request is not bound to: {stats.misrouted}")
    held = [(rid, route.next_seq) for rid, route in orchestrator.routes.items() if route.held]
    if held:
        more = f", as {len(held) - 1} more requests do" if len(held) > 1 else ""
        notes.append(f"request {held[0][0]} holds reports for a seq that never came (it waits for seq "
                     f"{held[0][1]}{more})")  # fmt: skip
    if orchestrator.death:
        notes.append(f"the engine died: {orchestrator.death}")
    return NoProgress("; ".join([f"no progress: {why}", *notes]))
