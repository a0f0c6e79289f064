"""The conformance kit's pytest hooks: the plugin pytest loads in every run (the ``pytest11`` entry point, named
``omni_runtime.testing`` so that ``-p omni_runtime.testing`` finds it loaded). It imports nothing beyond pytest's
own: the kit (``omni_runtime.testing``, which needs Hypothesis, the ``dev`` extra) is imported only when
``--omni-runtime`` is given, so a pytest run without it works where Hypothesis is not installed.
"""

from __future__ import annotations


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
        from omni_runtime.testing import load_factory, parse_kinds, parse_seed
        from omni_runtime.testing._plugin import ConformanceItem

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
