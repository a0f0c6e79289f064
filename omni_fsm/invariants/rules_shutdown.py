"""The rules of ORCH-INV-300..399 (extension points, shutdown ordering, upstream alignment).

ORCH-INV-300: the orchestrator stops before any runtime, and nothing happens after it stopped.
Handles ``OrchestratorStopped`` and ``RuntimesStopped``; :func:`after_stop` judges every other
observation once the orchestrator stopped (a report dropped aside: nothing is done for it); :func:`at_end`, that a
complete history whose orchestrator stopped also stopped its runtimes. ORCH-INV-303
is judged over two histories (``differential``).
"""

from __future__ import annotations

from omni_fsm.invariants.checks import SHUTDOWN_ORDER
from omni_fsm.invariants.judge import Judge, fact
from omni_fsm.spec import observations as ob

#: what may still be observed once the orchestrator stopped: the stops themselves, and a report dropped
STILL_OBSERVED: tuple[type[ob.Observation], ...] = (ob.OrchestratorStopped, ob.RuntimesStopped, ob.Dropped)


def after_stop(j: Judge, o: ob.Observation) -> None:
    """Judge an observation made once the orchestrator stopped: no work, message, answer or cleanup happens then."""
    if not isinstance(o, STILL_OBSERVED):
        j.fail(SHUTDOWN_ORDER, getattr(o, "rid", None), f"{fact(o)} after the orchestrator stopped")


def on_orchestrator_stopped(j: Judge, o: ob.OrchestratorStopped) -> None:
    if j.stopped:
        j.fail(SHUTDOWN_ORDER, None, "orchestrator stopped after the runtimes" if j.stopped == 2
               else "orchestrator stopped twice")
    j.stopped = 1


def on_runtimes_stopped(j: Judge, o: ob.RuntimesStopped) -> None:
    if j.stopped != 1:
        j.fail(SHUTDOWN_ORDER, None, "runtimes stopped before the orchestrator")
    j.stopped = 2


def at_end(j: Judge) -> None:
    """Judge the end of a complete history: an orchestrator that stopped was followed by its runtimes' stop (a
    shutdown that leaves them running leaks every stage's engine)."""
    if j.stopped == 1:
        j.fail(SHUTDOWN_ORDER, None, "the orchestrator stopped but the runtimes never did (no RuntimesStopped)")
