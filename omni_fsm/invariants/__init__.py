"""The invariants of both contracts as checks over observable histories (see ``specs/``)."""

from __future__ import annotations

from omni_fsm.invariants._monitor import CHECKS, CheckInfo, Monitor, View, Violation, check_history

__all__ = ["CHECKS", "CheckInfo", "Monitor", "View", "Violation", "check_history"]
