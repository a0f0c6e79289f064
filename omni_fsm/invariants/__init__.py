"""The invariants of both contracts as checks over observable histories (see ``specs/``)."""

from __future__ import annotations

from omni_fsm.invariants.differential import DIFFERENTIAL_CHECKS, DifferentialCheck, same_client_streams
from omni_fsm.invariants.monitor import CHECKS, CheckInfo, Monitor, View, Violation, check_history

__all__ = ["CHECKS", "DIFFERENTIAL_CHECKS", "CheckInfo", "DifferentialCheck", "Monitor", "View", "Violation",
           "check_history", "same_client_streams"]  # fmt: skip
