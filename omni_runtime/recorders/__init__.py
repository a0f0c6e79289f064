"""Recorders: traces of other orchestrators, observed at their edges and written in this project's trace format, so
that ``omni-fsm check`` judges them (vLLM-Omni's first). A recorder runs in its orchestrator's environment and
imports nothing of this package beyond its errors; the trace writer is ``omni_fsm``'s."""
