"""Upstream vLLM's request-status transitions, written from vLLM v1's scheduler (0.32).

Independent of this project's table: AR-INV-001 judges the AR sub-states a runtime reports
against this relation, so a table that drifts from upstream is caught rather than mirrored.
Omni-specific differences are listed apart (``OMNI_DOCUMENTED``), each with its reason.
"""

from __future__ import annotations

WAITING = "WAITING"
GRAMMAR = "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR"
REMOTE_KVS = "WAITING_FOR_REMOTE_KVS"
STREAMING = "WAITING_FOR_STREAMING_REQ"
CHUNK = "WAITING_FOR_CHUNK"  # vLLM-Omni
RUNNING = "RUNNING"
PREEMPTED = "PREEMPTED"
FINISHED = "FINISHED"  # any FINISHED_* status

#: status -> statuses upstream vLLM may move it to (a request enters as WAITING).
UPSTREAM: dict[str, frozenset[str]] = {
    WAITING: frozenset({RUNNING, REMOTE_KVS, GRAMMAR, FINISHED}),
    GRAMMAR: frozenset({WAITING, FINISHED}),
    REMOTE_KVS: frozenset({WAITING, FINISHED}),
    STREAMING: frozenset({WAITING, FINISHED}),
    RUNNING: frozenset({PREEMPTED, STREAMING, FINISHED}),
    PREEMPTED: frozenset({RUNNING, FINISHED}),
}

#: Differences vLLM-Omni documents: (from, to) -> why.
OMNI_DOCUMENTED: dict[tuple[str, str], str] = {
    (RUNNING, CHUNK): "async chunk: a stage runs on the chunks it has, then waits for the next",
    (CHUNK, WAITING): "the next input chunk arrived",
    (CHUNK, FINISHED): "abort or failure while waiting for a chunk",
}


def allowed(src: str, dst: str) -> bool:
    """Return whether moving an AR request from status ``src`` to ``dst`` is upstream-aligned."""
    return dst in UPSTREAM.get(src, frozenset()) or (src, dst) in OMNI_DOCUMENTED
