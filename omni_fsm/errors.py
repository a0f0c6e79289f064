"""The one exception hierarchy of ``omni_fsm``."""

from __future__ import annotations


class OmniFsmError(Exception):
    """Base of every error ``omni_fsm`` raises."""


class LifecycleError(OmniFsmError):
    """The embedding program asked for a transition the table does not allow.

    Nothing changed. ``rid`` is ``None`` for an engine-wide call.
    """

    def __init__(self, rid: int | None, state: object, event: object, why: str = "no transition") -> None:
        self.rid, self.state, self.event = rid, state, event
        who = "engine" if rid is None else f"request {rid}"
        super().__init__(f"{who} in state {getattr(state, 'name', state)}: {why} for {event!r}")


class ConfigError(OmniFsmError, ValueError):
    """Arguments that describe no valid pipeline, bound or table (the caller's bug; nothing was built)."""


class InternalError(OmniFsmError):
    """The core reached a situation its own table says cannot happen (a bug here)."""


class MalformedInput(OmniFsmError):
    """Input from outside (a trace, a config) is malformed: ``path:line: reason``."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path, self.line, self.reason = path, line, reason
        super().__init__(f"{path}:{line}: {reason}")
