"""The rules of ORCH-INV-001..099 (dependency direction: the orchestrator owns cross-stage routing).

ORCH-INV-001: a request is forwarded only after its stage reported it finished.
ORCH-INV-002: a forward goes to the next stage of the pipeline description, never elsewhere.
Handles ``Forwarded``; the request-state (ORCH-INV-100) and companion (ORCH-INV-204) rules about
a forward are called from here.
"""

from __future__ import annotations

from omni_fsm.invariants.checks import NEXT_LOGICAL_STAGE, ROUTE_AFTER_FINISH
from omni_fsm.invariants.judge import Judge
from omni_fsm.invariants.rules_failure import companions_done
from omni_fsm.invariants.rules_lifecycle import working_view
from omni_fsm.spec import observations as ob


def on_forwarded(j: Judge, o: ob.Forwarded) -> None:
    view = working_view(j, o.rid, "forwarded to stage", o.dst)
    if view is None:
        return
    if view.finished_at != o.src:
        j.fail(ROUTE_AFTER_FINISH, o.rid, f"forwarded from stage {o.src} before that stage finished it")
    if o.dst != o.src + 1 or o.dst >= len(j.kinds):
        j.fail(NEXT_LOGICAL_STAGE, o.rid, f"forwarded {o.src} -> {o.dst}; the next stage is {o.src + 1}")
    companions_done(j, o, view)
    view.forwarded_to = o.dst  # the request's input adapter for that stage (AR-INV-002)
