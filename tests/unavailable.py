"""One rule for what this machine lacks: a test that needs it is skipped on a developer's machine and fails
under ``CI=true``, where everything must run (CI installs everything ``make test`` needs)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def on_ci() -> bool:
    """Return whether this run is CI's (``CI`` set to 1, true or yes)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(message: str, module_level: bool = False) -> NoReturn:
    """Skip the calling test (``module_level``: its module) for want of ``message``; under ``CI=true`` fail."""
    if on_ci():
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message, allow_module_level=module_level)
