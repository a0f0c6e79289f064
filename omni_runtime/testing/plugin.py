"""The conformance kit's pytest plugin: its options and the item it adds for ``--omni-runtime``.

It imports nothing beyond pytest's own at import: the kit (``kit.py``, which needs Hypothesis, the ``dev`` extra) is
imported only when ``--omni-runtime`` is given, so a pytest run without it works where Hypothesis is not installed.
The plugin imports the kit; the kit never imports the plugin.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni_fsm import StageKind


def pytest_addoption(parser):  # type: ignore[no-untyped-def]
    parser.addoption("--omni-runtime", default=None, help="check this runtime factory (package.module:factory)")
    parser.addoption("--omni-runtime-may-die", action="store_true",
                     help="the runtime may report its own death (a death excuses what it still owes)")  # fmt: skip
    parser.addoption("--omni-runtime-fails-nothing", action="store_true",
                     help="the runtime fails no request the kit gives it (a Failed end fails the kit)")  # fmt: skip
    parser.addoption("--omni-runtime-kinds", default=None,
                     help="comma-separated stage kinds the runtime serves, e.g. 'ar' (default: all)")  # fmt: skip
    parser.addoption("--omni-runtime-seed", default=None, metavar="N|random",
                     help="draw the kit's examples from seed N ('random': a fresh one), with Hypothesis's example "
                          "database on; a failure names the seed (default: the same examples every run, no "
                          "database)")  # fmt: skip


def pytest_collection_modifyitems(session, config, items):  # type: ignore[no-untyped-def]
    spec = config.getoption("--omni-runtime")
    if spec:
        from omni_runtime.testing.item import ConformanceItem
        from omni_runtime.testing.kit import load_factory

        try:
            load_factory(spec)  # a wrong name is a usage error, not a failed test
            kinds = parse_kinds(config.getoption("--omni-runtime-kinds"))
            draw_seed = parse_seed(config.getoption("--omni-runtime-seed"))
        except ValueError as exc:
            import pytest

            raise pytest.UsageError(str(exc)) from None

        items.append(ConformanceItem.from_parent(session, name=f"omni-runtime-conformance[{spec}]", spec=spec,
                                                 may_die=config.getoption("--omni-runtime-may-die"),
                                                 may_fail=not config.getoption("--omni-runtime-fails-nothing"),
                                                 kinds=kinds, draw_seed=draw_seed))  # fmt: skip


def parse_seed(text: str | None) -> int | None:
    """Return the seed ``--omni-runtime-seed`` names (``None``: derandomized; ``random``: a fresh one, drawn now so
    that a failure can name it); ``ValueError`` says what is wrong with ``text``."""
    if text is None:
        return None
    if text.strip() == "random":
        return random.SystemRandom().getrandbits(32)
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"--omni-runtime-seed wants a non-negative integer or 'random', got {text!r}")
    return value


def parse_kinds(text: str | None) -> tuple[StageKind, ...]:
    """Return the stage kinds named in ``text`` (``ar,diffusion``; ``None``: every kind); ``ValueError`` names a bad
    one."""
    from omni_fsm import StageKind

    if text is None:
        return tuple(StageKind)
    by_value = {kind.value: kind for kind in StageKind}
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in by_value]
    if bad or not names:
        known = ", ".join(by_value)
        raise ValueError(f"--omni-runtime-kinds: {bad[0] if bad else text!r} is not a stage kind (known: {known})")
    return tuple(by_value[name] for name in names)
