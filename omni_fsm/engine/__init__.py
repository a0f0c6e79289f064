"""Runs a ``Spec``: the core (``core.Lifecycle``), row selection for any table (``compiled``) and the
``transitions`` reference machine (``reference``). It decides nothing of its own: every decision is
read from ``omni_fsm.spec`` (tests/fsm/test_architecture.py checks that it compares no state or event type)."""
