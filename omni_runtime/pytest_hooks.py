"""The conformance kit's pytest plugin as the installed ``pytest11`` entry point names it (``omni_runtime.testing``'s
hooks, ``testing/plugin.py``). Named ``omni_runtime.testing`` there, so that ``-p omni_runtime.testing`` finds it
loaded; it loads no kit and no Hypothesis until ``--omni-runtime`` is given.
"""

from __future__ import annotations

from omni_runtime.testing.plugin import pytest_addoption as pytest_addoption
from omni_runtime.testing.plugin import pytest_collection_modifyitems as pytest_collection_modifyitems
