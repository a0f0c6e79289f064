"""The named checks: each invariant's check name, what it judges, and the violation it reports.

``CHECKS`` maps a check's name to the invariant it implements (the registry in ``specs/`` names
checks by these names); the monitor reports a ``Violation`` under one of them.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Violation:
    """One broken invariant: which, for which request, at which step, and why."""

    invariant: str
    check: str
    rid: int | None
    step: int
    message: str

    def __str__(self) -> str:
        who = "engine" if self.rid is None else f"request {self.rid}"
        return f"{self.invariant} ({self.check}) at step {self.step}, {who}: {self.message}"


@attrs.frozen
class CheckInfo:
    """A named check and the invariant it implements."""

    name: str
    invariant: str
    doc: str


CHECKS: dict[str, CheckInfo] = {}


def _check(invariant: str, name: str, doc: str) -> str:
    CHECKS[name] = CheckInfo(name, invariant, doc)
    return name


ROUTE_AFTER_FINISH = _check("ORCH-INV-001", "routing_only_after_stage_finish",
                            "the orchestrator forwards a request only after its stage reported it finished")
NEXT_LOGICAL_STAGE = _check("ORCH-INV-002", "forward_to_next_logical_stage",
                            "a forward goes to the next stage of the pipeline description, never elsewhere")
NO_WORK_AFTER_TERMINAL = _check("ORCH-INV-100", "no_work_after_terminal",
                                "nothing is dispatched, forwarded or scheduled for a request after its terminal")
ONE_TERMINAL = _check("ORCH-INV-101", "one_terminal_per_request",
                      "every submitted client request gets exactly one terminal message")
STAGE_ORDER = _check("ORCH-INV-102", "client_messages_in_stage_order",
                     "the client's messages come in stage order, the terminal last")
FINISH_REASON = _check("ORCH-INV-103", "terminal_has_finish_reason",
                       "every terminal carries an outcome and a finish reason from the closed set")
DEPENDENTS_INVISIBLE = _check("ORCH-INV-104", "dependents_never_client_visible",
                              "children and companions never appear to the client as requests")
PARENT_AFTER_CHILDREN = _check("ORCH-INV-105", "parent_terminal_after_last_child",
                               "an n>1 parent's terminal comes after its last child ended, never before")
ANSWERS_CORRELATED = _check("ORCH-INV-106", "answers_reach_their_callers",
                            "each RPC or abort answer matches its own call, once")
LATE_EVENTS_DROPPED = _check("ORCH-INV-107", "late_events_dropped",
                             "a report for an ended request is dropped: never acted on, never fatal")
ADMISSION = _check("ORCH-INV-108", "admission_follows_control_plane",
                   "no admission while paused or sleeping; a submit while sleeping ends as error")
SLOTS = _check("ORCH-INV-109", "slots_within_capacity",
               "slots are taken at the dispatched stage, once, never beyond capacity")
ABORT_PREFIX = _check("ORCH-INV-200", "ar_abort_delivers_prefix",
                      "an AR abort at a final-output stage delivers the generated prefix")
DIFFUSION_WHOLE = _check("ORCH-INV-201", "diffusion_abort_no_partial",
                         "diffusion emits no partial output; its abort carries nothing")
COMMIT_AFTER_PHYSICAL = _check("ORCH-INV-202", "abort_commit_after_physical_abort",
                               "abort state is committed only after the physical abort succeeded")
PARALLEL_ABORT = _check("ORCH-INV-203", "parallel_abort_reaches_children",
                        "a parent's abort reaches every child; the parent goes with its last child")
COMPANION_GATE = _check("ORCH-INV-204", "companions_gate_parent",
                        "no forward before every companion is done; a lost companion fails the parent")
RPC_ERRORS = _check("ORCH-INV-205", "rpc_errors_propagate",
                    "a worker's RPC exception reaches its caller and ends no request")
REQUEST_SCOPED = _check("ORCH-INV-206", "failure_is_request_scoped",
                        "a request-scoped failure ends only that request (and its dependents)")
LAST_FINAL_TERMINAL = _check("ORCH-INV-207", "only_last_final_message_terminal",
                             "with several final-output stages only the last message is terminal")
NO_STATE_AFTER_TERMINAL = _check("ORCH-INV-208", "no_state_after_terminal",
                                 "after a request's terminal no state is kept for it")
ABORT_ENDS = _check("ORCH-INV-209", "abort_ends_request",
                    "after an abort request: no more output, and the request ends once aborted physically")
FATAL_REACHES_ALL = _check("ORCH-INV-210", "fatal_reaches_every_request",
                           "when the engine dies every open request gets one fatal terminal")
SHUTDOWN_ENDS_ALL = _check("ORCH-INV-211", "shutdown_ends_every_request",
                           "shutdown ends every open request as aborted")
SHUTDOWN_ORDER = _check("ORCH-INV-300", "orchestrator_stops_first",
                        "the orchestrator stops before any runtime, and nothing happens after")
AR_UPSTREAM = _check("AR-INV-001", "ar_status_follows_upstream",
                     "accepted AR status changes follow upstream vLLM's RequestStatus transitions")
THROUGH_ADAPTER = _check("AR-INV-002", "stage_input_through_adapter",
                         "a request reaches a later stage only through a forward (its input adapter)")
ASSIGNED_WORK = _check("AR-INV-003", "work_only_where_assigned",
                       "runtime reports are acted on only for the stage the request was assigned to")
CACHE_FREED = _check("AR-INV-200", "terminal_frees_cache",
                     "a request's slot (its KV cache) is freed before its state is dropped")
