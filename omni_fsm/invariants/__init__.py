"""The invariants of both contracts as checks over observable histories (see ``specs/``).

- ``checks``: the named checks (``CHECKS``), each with its invariant, and ``Violation``.
- ``view``: what is kept per request; ``judge``: the facts the rules share and how they report.
- ``rules_routing``, ``rules_lifecycle``, ``rules_failure``, ``rules_shutdown``, ``rules_ar``: the
  rules, one module per contract section; ``rules``: which rule judges what, and when.
- ``monitor``: ``Monitor`` runs the rules over a history, step by step (``check_history``).
- ``upstream``: vLLM's request-status transitions (AR-INV-001); ``differential``: the checks over
  two histories (ORCH-INV-303); ``payload_rules``: the runtime checks over engine records of stage payloads
  (AR-INV-300..303, 305).
"""

from __future__ import annotations

from omni_fsm.invariants.differential import DIFFERENTIAL_CHECKS, DifferentialCheck, same_client_streams
from omni_fsm.invariants.monitor import CHECKS, CheckInfo, Monitor, View, Violation, check_history
from omni_fsm.invariants.payload_rules import RUNTIME_CHECKS, RuntimeCheck

__all__ = ["CHECKS", "DIFFERENTIAL_CHECKS", "RUNTIME_CHECKS", "CheckInfo", "DifferentialCheck", "Monitor",
           "RuntimeCheck", "View", "Violation", "check_history", "same_client_streams"]  # fmt: skip
