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
"""

from __future__ import annotations

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
