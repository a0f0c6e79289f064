"""Runs a ``Spec``: the core (``Lifecycle``), the effects it executes, the row selection and the
``transitions`` reference machine. It decides nothing of its own: every decision is read from the spec."""
