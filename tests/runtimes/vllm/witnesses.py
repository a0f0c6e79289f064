"""Where each move of the upstream encoding (``omni_fsm.invariants.upstream``) comes from: made by vLLM in the contract
test (the table of moves seen, per vLLM version, in ``data/``), or read in vLLM's source and driven through vLLM's
own code by a test named here. A move that is neither is a widening nobody witnessed: ``unaccounted`` names it.

No vLLM import here: the encoding's tightness is checked wherever the tests run (``test_upstream_encoding.py``).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from omni_fsm.invariants import upstream as up

DATA = Path(__file__).resolve().parent / "data"
#: a move: (old status, new status) as vLLM names them; ``"None"``: a request being created
Move = tuple[str, str]
#: a row of a table: (scheduler, old status, new status, whether the request was resumable: a streaming session)
Row = tuple[str, str, str, bool]
#: what a checked-in table's lines say: the scheduler, then the move
TABLE_HEAD = """\
# The request-status moves vLLM {version}'s schedulers made on the contract test's fixed and witness programs
# (tests/runtimes/vllm/test_upstream_contract.py: written when missing, compared on every run; review, commit).
# Each line: scheduler, old status, new status, and "(resumable)" for a move a streaming-input session made.
"""


@attrs.frozen
class Read:
    """A move read in vLLM's (or vLLM-Omni's) source, and the test that drives that path through its own code."""

    source: str  #: the file and function, and what happens there
    test: str  #: the pytest node id (file::function) that makes vLLM take that path
    resumable: bool = False  #: the path is a resumable request's (a streaming-input session's) only


#: Moves the contract test's programs do not make (their stand-ins cannot reach them) but vLLM does, as read in its
#: source; each driven through vLLM's own scheduler by a test (``test_upstream_paths.py``), its inputs substituted.
_PATHS = "tests/runtimes/vllm/test_upstream_paths.py"
_GRAMMAR = (f"{_PATHS}::test_a_grammar_that_rejects_the_last_token_turns_the_finish_into_an_error",
            "vllm/v1/core/sched/scheduler.py Scheduler.update_from_output: after check_stop ended the request, "
            "structured_output_manager.accept_tokens rejects its new tokens: status = FINISHED_ERROR, in the same call")
_REPETITION = ("vllm/v1/core/sched/utils.py check_stop: sampling_params.repetition_detection finds the output's "
               "tail repeating: status = FINISHED_REPETITION (called by update_from_output for running and, with "
               "asynchronous scheduling, preempted requests)")
_ERROR_SET = ("vllm/v1/core/sched/scheduler.py Scheduler.update_from_output: finish_requests(error_req_ids, "
              "FINISHED_ERROR) for grammar compile errors, encoder-cache mismatches, failed KV loads and unavailable "
              "encoder inputs, whatever the request's status (finish_requests takes any unfinished one)")
READ_FROM_SOURCE: dict[Move, Read] = {
    (up.FINISHED_STOPPED, up.FINISHED_ERROR): Read(_GRAMMAR[1], f"{_GRAMMAR[0]}[stop]"),
    (up.FINISHED_LENGTH_CAPPED, up.FINISHED_ERROR): Read(_GRAMMAR[1], f"{_GRAMMAR[0]}[length]"),
    (up.FINISHED_REPETITION, up.FINISHED_ERROR): Read(_GRAMMAR[1], f"{_GRAMMAR[0]}[repetition]"),
    (up.RUNNING, up.FINISHED_REPETITION): Read(_REPETITION, f"{_PATHS}::test_a_repeating_request_ends_as_repetition"),
    (up.PREEMPTED, up.FINISHED_REPETITION): Read(
        _REPETITION, f"{_PATHS}::test_a_preempted_request_ends_as_repetition_on_the_tokens_in_flight"),
    (up.FINISHED_REPETITION, up.WAITING): Read(
        "vllm/v1/core/sched/scheduler.py Scheduler._handle_stopped_request -> _update_request_as_session: a "
        "resumable request's turn that ended (any stop check) takes the input already queued: status = WAITING",
        f"{_PATHS}::test_a_session_whose_turn_ends_by_repetition_resumes", resumable=True),
    (up.FINISHED_REPETITION, up.STREAMING): Read(
        "vllm/v1/core/sched/scheduler.py Scheduler._handle_stopped_request: a resumable request's turn that ended "
        "(any stop check) with no input queued waits for it: status = WAITING_FOR_STREAMING_REQ",
        f"{_PATHS}::test_a_session_whose_turn_ends_by_repetition_resumes", resumable=True),
    (up.RUNNING, up.FINISHED_ERROR): Read(_ERROR_SET, f"{_PATHS}::test_vllm_ends_a_request_in_error_whatever_its_status"
                                                      "[RUNNING]"),
    (up.PREEMPTED, up.FINISHED_ERROR): Read(_ERROR_SET, f"{_PATHS}::test_vllm_ends_a_request_in_error_whatever_its_"
                                                        "status[PREEMPTED]"),
    (up.STREAMING, up.FINISHED_ERROR): Read(_ERROR_SET, f"{_PATHS}::test_vllm_ends_a_request_in_error_whatever_its_"
                                                        "status[WAITING_FOR_STREAMING_REQ]"),
    # the table has it from a streaming session only (vLLM 0.32 drops one stopped in flight; the binding ends it)
    (up.WAITING, up.FINISHED_ERROR): Read(_ERROR_SET, f"{_PATHS}::test_vllm_ends_a_request_in_error_whatever_its_status"
                                                      "[WAITING]"),
}
#: statuses only a resumable request is ever in: a move from one is any request's, witnessed by a resumable one
RESUMABLE_ONLY = frozenset({up.STREAMING})
#: every status vLLM's ``RequestStatus`` names (vLLM-Omni's WAITING_FOR_CHUNK is not vLLM's)
STATUSES = (up.WAITING, up.GRAMMAR, up.REMOTE_KVS, up.STREAMING, up.RUNNING, up.PREEMPTED, *sorted(up.VLLM_FINISHED))

#: vLLM-Omni's documented differences (``upstream.OMNI_DOCUMENTED``), each read in vLLM-Omni 0.30's source and driven
#: by a test through this project's AR simulator, which reproduces vLLM-Omni's asynchronous chunks (vLLM-Omni itself
#: is not installed beside ``make test``).
_OMNI = "tests/runtimes/vllm/test_upstream_encoding.py::test_the_simulator_makes_vllm_omnis_chunk_moves"
OMNI_READ: dict[Move, Read] = {
    (up.RUNNING, up.CHUNK): Read(
        "vllm_omni/core/sched/omni_scheduling_coordinator.py (0.30), the queue pass: a running request whose next "
        "input chunk has not arrived is parked: status = WAITING_FOR_CHUNK", _OMNI),
    (up.CHUNK, up.WAITING): Read(
        "vllm_omni/core/sched/omni_scheduling_coordinator.py (0.30), the queue pass: the chunk arrived, the request "
        "takes its queue's status again (WAITING in the waiting queue)", _OMNI),
    (up.CHUNK, up.FINISHED): Read(
        "vllm_omni/core/sched/omni_ar_scheduler.py (0.30) OmniARScheduler.update_from_output: a stop check ends a "
        "request whose status before the stop was WAITING_FOR_CHUNK (the tokens of a batch in flight when it parked)",
        _OMNI),
}


def encoded() -> tuple[set[Move], set[Move]]:
    """Return the moves the upstream encoding allows vLLM: (any request's: its entry, ``VLLM_MOVES``, the final
    moves; a resumable request's besides: ``VLLM_RESUMABLE_MOVES``), as ``upstream.vllm_move_allowed`` reads them."""
    plain = {("None", s) for s in up.VLLM_ENTRY}
    for table in (up.VLLM_MOVES, up.VLLM_FINAL_MOVES):
        plain |= {(src, dst) for src, dsts in table.items() for dst in dsts}
    resumable = {(src, dst) for src, dsts in up.VLLM_RESUMABLE_MOVES.items() for dst in dsts} - plain
    return plain, resumable


def table_path(version: str) -> Path:
    """Return where the table of moves vLLM ``version`` made is kept."""
    return DATA / f"vllm-{version}-moves.txt"


def format_table(version: str, rows: set[Row]) -> str:
    """Return the table of ``rows``, as the file keeps it."""
    return TABLE_HEAD.format(version=version) + "".join(
        f"{s} {o} -> {n}{' (resumable)' if r else ''}\n" for s, o, n, r in sorted(rows))


def read_table(version: str) -> set[Row] | None:
    """Return the rows of ``version``'s table, or ``None`` if there is none."""
    path = table_path(version)
    if not path.exists():
        return None
    rows = set()
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            scheduler, old, arrow, new, *marker = line.split()
            assert arrow == "->" and marker in ([], ["(resumable)"]), line
            rows.add((scheduler, old, new, bool(marker)))
    return rows


def witnessed() -> tuple[set[Move], set[Move]]:
    """Return the moves some checked vLLM version (``upstream.CHECKED_AGAINST``) was seen to make: (by a request
    that was not resumable, by a resumable one)."""
    rows = {row for version in up.CHECKED_AGAINST for row in read_table(version) or ()}
    return {(o, n) for _, o, n, r in rows if not r}, {(o, n) for _, o, n, r in rows if r}


def unaccounted(plain: set[Move], resumable: set[Move]) -> list[tuple[Move, str]]:
    """Return the moves of an encoding (``plain``: any request's; ``resumable``: a resumable request's only) that
    no checked vLLM was seen to make and no entry of ``READ_FROM_SOURCE`` reads in its source: widenings nobody
    witnessed, each with the kind of request it is allowed for."""
    seen_plain, seen_resumable = witnessed()
    read_plain = {m for m, r in READ_FROM_SOURCE.items() if not r.resumable}
    seen_plain |= {m for m in seen_resumable if m[0] in RESUMABLE_ONLY}
    missing = [(m, "any request") for m in plain if m not in seen_plain and m not in read_plain]
    missing += [(m, "a resumable request") for m in resumable
                if m not in seen_plain | seen_resumable and m not in READ_FROM_SOURCE]  # fmt: skip
    return sorted(missing)


__all__ = ["OMNI_READ", "READ_FROM_SOURCE", "RESUMABLE_ONLY", "STATUSES", "Read", "Row", "encoded", "format_table",
           "read_table", "table_path", "unaccounted", "witnessed"]  # fmt: skip
