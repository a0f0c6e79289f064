"""Runs a ``Spec``: the core (``core.Lifecycle``), row selection for any table (``selection``) and the
``transitions`` reference machine (``reference``). It decides nothing of its own: every decision is
read from the ``Spec`` it is given (tests/fsm/test_architecture.py checks that it compares no state or event type)."""
