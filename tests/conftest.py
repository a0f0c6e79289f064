"""Suite-wide settings: Hypothesis profiles and the ``covers`` marker.

Profiles: ``ci`` (derandomized, the default under ``CI=true``), ``dev`` (the default
otherwise) and ``thorough`` (long bug hunts: ``HYPOTHESIS_PROFILE=thorough``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)  # fmt: skip
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=5000, stateful_step_count=200, deadline=None,
                          suppress_health_check=list(HealthCheck))  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):  # type: ignore[no-untyped-def]
    config.addinivalue_line(
        "markers", "covers(*ids): the test checks these invariant IDs (read by the traceability table)"
    )


def pytest_terminal_summary(terminalreporter, config):  # type: ignore[no-untyped-def]
    """Say, last, the order this run used, so that a failure that depends on it can be replayed."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(f"random order: --randomly-seed={seed} replays it; -p no:randomly: file order")
