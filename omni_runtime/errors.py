"""The one exception hierarchy of ``omni_runtime``."""

from __future__ import annotations

from omni_fsm.errors import ConfigError as _FsmConfigError


class OmniRuntimeError(Exception):
    """Base of every error ``omni_runtime`` raises."""


class PipelineError(OmniRuntimeError):
    """A pipeline description is malformed: ``path:line: reason``."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path, self.line, self.reason = path, line, reason
        super().__init__(f"{path}:{line}: {reason}")


class ConfigError(OmniRuntimeError, _FsmConfigError):
    """A library call got an invalid argument (a bad stage, pipeline or workload setting).

    Also an ``omni_fsm.ConfigError`` (one ``except`` catches a bad argument to either package)
    and so a ``ValueError``.
    """


class OptionError(ConfigError):
    """A workload option is invalid: ``names`` are the fields at fault, ``reason`` says why."""

    def __init__(self, names: tuple[str, ...], reason: str) -> None:
        self.names, self.reason = names, reason
        super().__init__(f"WorkloadOptions: {' + '.join(names)}: {reason}")


class EngineNotRunning(OmniRuntimeError):
    """The engine is dead or stopped: it accepts no new work."""


class NoProgress(OmniRuntimeError):
    """A wait gave up: nothing moved for as many rounds as the engine allows (``max_idle_rounds``, or
    ``max_silent_rounds`` for busy runtimes that report nothing). The message says which bound, and what the
    orchestrator dropped or holds meanwhile (reports under request ids it never gave, for instance)."""


class RequestRefused(OmniRuntimeError):
    """The lifecycle does not allow this client call now (nothing changed)."""


class RpcError(OmniRuntimeError):
    """A control RPC failed in a worker; ``error`` is the worker's exception text."""

    def __init__(self, method: str, error: str) -> None:
        self.method, self.error = method, error
        super().__init__(f"{method} failed: {error}")


class RequestFailed(OmniRuntimeError):
    """A request ended as failed (request-scoped or fatal); raised by convenience APIs."""
