"""ORCH-INV-303 negative: a polling loop that changes more than cadence is caught by the differential check.

The fault: each polling round steps every runtime twice before their reports reach the
orchestrator, so an abort keyed to a request's k-th output reaches the runtime later than on the
event-driven loop. Each run on its own keeps every history invariant (the monitor passes both);
only the comparison of the two runs shows that the loops no longer give the same messages.
"""

from __future__ import annotations

import pytest
from helpers import run_loop

from omni_fsm.invariants import same_client_streams
from omni_runtime import AsyncEngine


class LaggingPollEngine(AsyncEngine):
    """Polls like ``AsyncEngine``, but its host steps every runtime twice in each round before taking reports."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        step_runtimes = self.host.step_runtimes

        def step_twice() -> bool:
            busy = step_runtimes()
            return step_runtimes() or busy  # the fault: a second step before the reports are taken

        self.host.step_runtimes = step_twice  # the driver's own poll loop (and its crash handler) runs unchanged


WORKLOAD = [(1, 0, 3), (1, 0, 1)]  #: (n, companions, abort at message k)
SEED = 0


@pytest.mark.covers("ORCH-INV-303")
def test_poll_loop_that_steps_ahead_of_its_reports_is_caught():
    _, event_history = run_loop("event", WORKLOAD, SEED)
    _, lagging_history = run_loop("poll", WORKLOAD, SEED, engine_class=LaggingPollEngine)  # its monitor passes
    problems = same_client_streams(event_history, lagging_history)
    assert problems and all(p.startswith("ORCH-INV-303: ") for p in problems), problems


def test_the_faithful_poll_loop_passes_the_same_workload():
    _, event_history = run_loop("event", WORKLOAD, SEED)
    _, poll_history = run_loop("poll", WORKLOAD, SEED)
    assert same_client_streams(event_history, poll_history) == []
