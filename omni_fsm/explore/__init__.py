"""The bounded exhaustive explorer (what TLC does for TLA+): every interleaving of the event families a
``Bound`` allows, each state judged by the monitor. ``world`` makes the events, ``search`` walks the states,
``explorer`` holds them together; ``explore(bound, spec)`` is the entry point."""

from omni_fsm.explore.explorer import DEFAULT_FAMILIES, FAMILIES, Bound, Counterexample, Report, explore

__all__ = ["DEFAULT_FAMILIES", "FAMILIES", "Bound", "Counterexample", "Report", "explore"]
