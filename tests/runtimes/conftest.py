"""The real engines' environment (``real_engines.py``), set for every test of this folder before any imports one."""

from __future__ import annotations

import tests.runtimes.real_engines  # noqa: F401  (the engine environment)
