"""Recording a trace from an engine: ``Engine(pipeline, trace="run.jsonl")`` (or ``AsyncEngine``).

The engine writes the header (the pipeline's shape; ``AsyncEngine`` names its loop) when it is made, every
lifecycle step as it happens (before the ``on_step`` hook, if any), and the end marker when it shuts down,
which is when a writer given a path puts the file there (``omni_fsm.trace.TraceWriter``). ``omni-fsm check``
judges it. A trace that cannot be written is the hook's failure: the engine dies of it, naming it.
"""

from __future__ import annotations

import os

from omni_fsm.trace import TraceWriter
from omni_runtime.core.pipeline import Pipeline
from omni_runtime.core.translation import StepHook
from omni_runtime.errors import ConfigError

#: what ``trace=`` takes: a path, or a ``TraceWriter`` that has written nothing yet (``None``: no trace)
TraceTarget = str | os.PathLike[str] | TraceWriter | None


def open_trace(trace: TraceTarget, pipeline: Pipeline, loop: str | None) -> TraceWriter | None:
    """Return the writer of ``trace`` with the header written (``None``: no trace); ``ConfigError`` for anything
    else, or a writer that wrote its header already."""
    if trace is None:
        return None
    if isinstance(trace, TraceWriter):
        writer = trace
    elif isinstance(trace, str | os.PathLike):
        writer = TraceWriter(trace)
    else:
        raise ConfigError(f"trace is a path or an omni_fsm.trace.TraceWriter, not {type(trace).__name__}")
    try:
        writer.header(pipeline.kinds, pipeline.final, pipeline.slots, loop=loop)
    except BaseException:
        if writer is not trace:
            writer.close()
        raise
    return writer


def recording(writer: TraceWriter | None, on_step: StepHook | None) -> StepHook | None:
    """Return the step hook that writes each step to ``writer`` (if any), then calls ``on_step`` (if any)."""
    if writer is None:
        return on_step
    step = writer.step
    if on_step is None:
        return step
    hook = on_step

    def both(event, outputs):  # type: ignore[no-untyped-def]
        step(event, outputs)
        hook(event, outputs)

    return both


def finish_trace(writer: TraceWriter | None, complete: bool) -> None:
    """The engine shut down: write the end marker (``complete``: every request ended), else keep the trace so far
    without it; a writer given a path puts the file there now."""
    if writer is None:
        return
    if complete:
        writer.end()
    else:
        writer.keep_incomplete()
