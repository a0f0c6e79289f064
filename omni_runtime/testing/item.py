"""The pytest item the plugin adds for ``--omni-runtime``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

from omni_fsm import StageKind
from omni_runtime.testing._machine import ConformanceError, KindRefused

#: Where a seeded run keeps its examples when the active profile keeps none (Hypothesis' own default).
DEFAULT_DATABASE = ".hypothesis/examples"


class ConformanceItem(pytest.Item):
    """Runs the conformance kit against the factory named on the command line.

    ``draw_seed`` ``None`` (the default): the same examples every run (derandomized), with no example
    database, whatever the active Hypothesis profile says; a seed: examples drawn from it, with the
    profile's example database, or Hypothesis' default one (``.hypothesis/examples``) where the profile
    has none (a CI profile). A failure says which of the two it was.
    """

    def __init__(self, *, spec: str, may_die: bool = False, kinds: tuple[StageKind, ...] = tuple(StageKind),
                 draw_seed: int | None = None, may_fail: bool = True, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.spec = spec
        self.may_die = may_die
        self.may_fail = may_fail
        self.kinds = kinds
        self.draw_seed = draw_seed

    def run_settings(self) -> dict[str, Any]:
        """Return the Hypothesis settings the item runs the kit with (``check_runtime``'s keywords)."""
        if self.draw_seed is None:
            return {"derandomize": True, "database": None}
        database = settings().database
        if database is None:  # a profile without one (CI's): the seed still turns the database on
            database = DirectoryBasedExampleDatabase(DEFAULT_DATABASE)
        return {"draw_seed": self.draw_seed, "database": database}

    def how_drawn(self) -> str:
        """Return how the examples were drawn, so that a failure can be run again."""
        if self.draw_seed is None:
            return "examples derandomized (the same every run; --omni-runtime-seed=random draws others)"
        return f"examples drawn with --omni-runtime-seed={self.draw_seed} (pass it again to draw the same)"

    def runtest(self) -> None:
        from omni_runtime.testing.kit import check_runtime, load_factory

        try:
            check_runtime(load_factory(self.spec), may_die=self.may_die, may_fail=self.may_fail, kinds=self.kinds,
                          **self.run_settings())  # fmt: skip
        except Exception as exc:
            exc.add_note(self.how_drawn())
            raise

    def repr_failure(self, excinfo, style=None):  # type: ignore[no-untyped-def]
        if isinstance(excinfo.value, KindRefused):  # a usage error, not a broken protocol: its one line
            return f"runtime {self.spec}: {excinfo.value}"
        if isinstance(excinfo.value, ConformanceError):  # its notes: Hypothesis's failing steps, then how drawn
            notes = getattr(excinfo.value, "__notes__", None) or [self.how_drawn()]
            return "\n".join([f"runtime {self.spec} breaks its protocol: {excinfo.value}", *notes])
        return super().repr_failure(excinfo)

    def reportinfo(self):  # type: ignore[no-untyped-def]
        return self.path, None, self.name
