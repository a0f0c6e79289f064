"""The rules of ORCH-INV-300..399 (extension points, shutdown ordering, upstream alignment).

ORCH-INV-300: the orchestrator stops before any runtime, and nothing happens after it stopped.
Handles ``OrchestratorStopped`` and ``RuntimesStopped``; :func:`after_stop` judges any other work
(a dispatch, a message). ORCH-INV-303 is judged over two histories (``differential``).
"""

from __future__ import annotations

from omni_fsm.invariants.checks import SHUTDOWN_ORDER
from omni_fsm.invariants.judge import Judge
from omni_fsm.spec import observations as ob


def after_stop(j: Judge, rid: int, what: str) -> None:
    """Judge ``what`` happening to request ``rid``: nothing happens once the orchestrator stopped."""
    if j.stopped:
        j.fail(SHUTDOWN_ORDER, rid, f"{what} after the orchestrator stopped")


def on_orchestrator_stopped(j: Judge, o: ob.OrchestratorStopped) -> None:
    if j.stopped:
        j.fail(SHUTDOWN_ORDER, None, "orchestrator stopped twice or after the runtimes")
    j.stopped = 1


def on_runtimes_stopped(j: Judge, o: ob.RuntimesStopped) -> None:
    if j.stopped != 1:
        j.fail(SHUTDOWN_ORDER, None, "runtimes stopped before the orchestrator")
    j.stopped = 2
