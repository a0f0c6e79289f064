"""The pytest item the plugin adds for ``--omni-runtime``."""

from __future__ import annotations

from typing import Any

import pytest

from omni_fsm import StageKind
from omni_runtime.testing._machine import ConformanceError


class ConformanceItem(pytest.Item):
    """Runs the conformance kit against the factory named on the command line."""

    def __init__(self, *, spec: str, may_die: bool = False, kinds: tuple[StageKind, ...] = tuple(StageKind),
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.spec = spec
        self.may_die = may_die
        self.kinds = kinds

    def runtest(self) -> None:
        from omni_runtime.testing import check_runtime, load_factory

        check_runtime(load_factory(self.spec), may_die=self.may_die, kinds=self.kinds)

    def repr_failure(self, excinfo, style=None):  # type: ignore[no-untyped-def]
        if isinstance(excinfo.value, ConformanceError):
            return f"runtime {self.spec} breaks its protocol: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):  # type: ignore[no-untyped-def]
        return self.path, None, self.name
