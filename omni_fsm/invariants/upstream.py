"""Upstream vLLM's request-status transitions (AR-INV-001), independent of this project's table.

Two views of one relation:

- ``VLLM_MOVES``: every assignment of ``Request.status`` vLLM v1's scheduler may make, over vLLM's
  own status names (each ``FINISHED_*`` apart). The vLLM binding's contract test records every
  assignment the real scheduler makes and judges it with ``vllm_move_allowed``; this encoding
  was checked that way against the versions in ``CHECKED_AGAINST``. It is tight the other way too:
  each move is one the contract test saw vLLM make (its table per version), or one read in vLLM's
  source and driven through vLLM's own scheduler by a test (``tests/runtimes/vllm/witnesses.py``);
  a move added that is neither fails ``tests/runtimes/vllm/test_upstream_encoding.py``.
- ``UPSTREAM``: the same relation as an AR runtime *reports* it (every ``FINISHED_*`` is one
  ``FINISHED``; a resumable request's turn that ends and resumes is reported as a wait for
  streamed input, never as an end). The monitor judges the AR sub-states a runtime reports
  against it, so a table that drifts from upstream is caught rather than mirrored.

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
FINISHED = "FINISHED"  # any FINISHED_* status, as reported

#: vLLM's final statuses
FINISHED_STOPPED, FINISHED_LENGTH_CAPPED, FINISHED_REPETITION = "FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED", \
    "FINISHED_REPETITION"  # fmt: skip
FINISHED_ABORTED, FINISHED_IGNORED, FINISHED_ERROR = "FINISHED_ABORTED", "FINISHED_IGNORED", "FINISHED_ERROR"
VLLM_FINISHED = frozenset({FINISHED_STOPPED, FINISHED_LENGTH_CAPPED, FINISHED_REPETITION, FINISHED_ABORTED,
                           FINISHED_IGNORED, FINISHED_ERROR})  # fmt: skip
#: the vLLM versions whose scheduler the binding's contract test checked this encoding against
CHECKED_AGAINST = ("0.32.0", "0.33.0")

#: the statuses a request is created in (``Request.__init__``: WAITING, then the grammar wait if it has one)
VLLM_ENTRY = frozenset({WAITING})
#: statuses a stop check on generated tokens ends a request (or a resumable request's turn) in
TURN_ENDS = frozenset({FINISHED_STOPPED, FINISHED_LENGTH_CAPPED, FINISHED_REPETITION})
#: statuses a request is ended in from outside its tokens, whatever its status: an abort (``finish_requests``), or
#: an error (a grammar that does not compile, a remote KV load that failed, tokens a grammar rejects)
ENDED_BY_CALL = frozenset({FINISHED_ABORTED, FINISHED_ERROR})
#: status -> statuses vLLM's scheduler may move it to (any request); vLLM 0.32 never sets FINISHED_IGNORED
VLLM_MOVES: dict[str, frozenset[str]] = {
    WAITING: frozenset({RUNNING, REMOTE_KVS, GRAMMAR, *ENDED_BY_CALL}),
    GRAMMAR: frozenset({WAITING, *ENDED_BY_CALL}),
    # a load that ends puts a request that had been preempted back as PREEMPTED (0.32, seen by the contract test)
    REMOTE_KVS: frozenset({WAITING, PREEMPTED, *ENDED_BY_CALL}),
    STREAMING: frozenset({WAITING, *ENDED_BY_CALL}),
    RUNNING: frozenset({PREEMPTED, *ENDED_BY_CALL, *TURN_ENDS}),
    # a preempted request's KV may be loaded again from a connector (0.32, seen by the contract test); with
    # asynchronous scheduling it may stop on the tokens of a batch in flight when it was preempted (seen too)
    PREEMPTED: frozenset({RUNNING, REMOTE_KVS, *ENDED_BY_CALL, *TURN_ENDS}),
}
#: moves only a resumable request (a streaming-input session) makes: its turn ended and, in the same call, it
#: waits for its next input, or takes the input already queued
VLLM_RESUMABLE_MOVES: dict[str, frozenset[str]] = dict.fromkeys(TURN_ENDS, frozenset({STREAMING, WAITING}))
#: a final status overwritten in the same call: a grammar that rejects the tokens a stop check already ended the
#: request on turns the finish into an error (read in vLLM 0.32's source, ``Scheduler.update_from_output``; driven
#: through it with a grammar that rejects the last token: tests/runtimes/vllm/test_upstream_paths.py)
VLLM_FINAL_MOVES: dict[str, frozenset[str]] = dict.fromkeys(TURN_ENDS, frozenset({FINISHED_ERROR}))


def vllm_move_allowed(src: object, dst: object, resumable: bool = False) -> bool:
    """Return whether vLLM may assign status ``dst`` to a request in ``src`` (``None``: being created).

    Statuses are vLLM's ``RequestStatus`` members or their names.
    """
    old, new = _name(src), _name(dst)
    if old is None:
        return new in VLLM_ENTRY
    if new in VLLM_MOVES.get(old, frozenset()) or new in VLLM_FINAL_MOVES.get(old, frozenset()):
        return True
    return resumable and new in VLLM_RESUMABLE_MOVES.get(old, frozenset())


def _name(status: object) -> str | None:
    return None if status is None else str(getattr(status, "name", status))


def _reported(status: str) -> str:
    return FINISHED if status in VLLM_FINISHED else status


def _reported_moves() -> dict[str, frozenset[str]]:
    """Return ``VLLM_MOVES`` as a runtime reports it: each final status is one ``FINISHED``, which nothing leaves;
    a turn that ends and resumes (``RUNNING or PREEMPTED -> TURN_ENDS -> STREAMING or WAITING``) is a move to
    ``STREAMING`` (then ``STREAMING -> WAITING``)."""
    moves = {src: {_reported(d) for d in dsts} for src, dsts in VLLM_MOVES.items()}
    for src, dsts in VLLM_MOVES.items():
        if dsts & TURN_ENDS and VLLM_RESUMABLE_MOVES:  # a turn may end here, and the session resume
            moves[src].add(STREAMING)
            moves[STREAMING].add(WAITING)
    return {src: frozenset(dsts) for src, dsts in moves.items()}


#: status -> statuses upstream vLLM may move it to, as a runtime reports them (a request enters as WAITING)
UPSTREAM: dict[str, frozenset[str]] = _reported_moves()

#: Differences vLLM-Omni documents: (from, to) -> why.
OMNI_DOCUMENTED: dict[tuple[str, str], str] = {
    (RUNNING, CHUNK): "async chunk: a stage runs on the chunks it has, then waits for the next",
    (CHUNK, WAITING): "the next input chunk arrived",
    (CHUNK, FINISHED): "abort or failure while waiting for a chunk",
}


def allowed(src: str, dst: str) -> bool:
    """Return whether moving an AR request from reported status ``src`` to ``dst`` is upstream-aligned."""
    return dst in UPSTREAM.get(src, frozenset()) or (src, dst) in OMNI_DOCUMENTED
