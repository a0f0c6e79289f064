"""``omni-fsm view``'s pages in a real browser (headless Chromium, driven by Playwright): the demo's trace and an
explorer counterexample load from file:// with no error and no request, a lane per request, the violation shown
with its rule ID on the counterexample and none on the demo. One browser for the module.

Needs Debian's ``chromium`` (``make test`` installs it) and the ``playwright`` package (the dev extra); without
them the tests are skipped on a developer's machine and fail under ``CI=true`` (``tests.unavailable``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omni_fsm.cli import main as cli_main
from omni_fsm.registry import load_registry, packaged_root

from ..browser import Opened, chromium
from .view_traces import cross_failure_counterexample, demo_trace, request_ids


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (launching it is most of a test's time)."""
    with chromium() as launched:
        yield launched


class Loaded:
    """A page of ``omni-fsm view`` opened from file://, with every console error, page error and request seen."""

    def __init__(self, browser: Any, trace: Path) -> None:
        self.html = trace.with_suffix(".html")
        assert cli_main(["view", str(trace), "-o", str(self.html)]) == 0
        opened = Opened(browser, self.html)
        self.page, self.errors, self.requests = opened.page, opened.errors, opened.requests

    def count(self, selector: str, visible: bool = False) -> int:
        return int(self.page.locator(selector + (":visible" if visible else "")).count())


def _opened(browser: Any, trace: Path) -> Iterator[tuple[Loaded, Path]]:
    """Yield ``trace``'s page, loaded, and the trace; close the page after the test."""
    loaded = Loaded(browser, trace)
    yield loaded, trace
    loaded.page.close()


@pytest.fixture
def demo(browser: Any, tmp_path: Path) -> Iterator[tuple[Loaded, Path]]:
    yield from _opened(browser, demo_trace(tmp_path))


@pytest.fixture
def counterexample(browser: Any, tmp_path: Path) -> Iterator[tuple[Loaded, Path]]:
    yield from _opened(browser, cross_failure_counterexample(tmp_path))


def test_the_demo_trace_shows_a_lane_per_request_and_no_violation(demo: tuple[Loaded, Path]) -> None:
    loaded, trace = demo
    rids = request_ids(trace)
    assert len(rids) >= 6
    assert loaded.count(".lane", visible=True) == len(rids)
    assert {int(r) for r in loaded.page.locator(".lane").evaluate_all("els => els.map(e => e.dataset.rid)")} == rids
    assert loaded.count(".violation") == 0 and loaded.page.locator("#no-violations").is_visible()
    assert loaded.count(".item.terminal", visible=True) >= 6  # each client request's one terminal, marked
    loaded.page.fill("#lane-filter", "REQUEST-3")  # omni-run's name for its fourth request: the client's own id
    shown = loaded.page.locator(".lane:visible .client-id").all_inner_texts()
    assert shown and set(shown) == {"request-3"}
    assert loaded.errors == [] and loaded.requests == [loaded.html.as_uri()]


def test_the_counterexample_shows_its_violation_with_rule_id_text_and_lines(
        counterexample: tuple[Loaded, Path]) -> None:  # fmt: skip
    loaded, trace = counterexample
    page = loaded.page
    assert loaded.count(".lane", visible=True) == len(request_ids(trace))
    violation = page.locator('.violation[data-invariant="ORCH-INV-206"]')
    assert violation.count() == 1 and violation.is_visible()
    assert violation.locator(".rule-id").inner_text() == "ORCH-INV-206"
    rule = load_registry(packaged_root()).get("ORCH-INV-206")
    assert rule is not None and violation.locator(".rule-text").inner_text() == rule.statement
    failed = next(n for n, line in enumerate(trace.read_text().splitlines(), 1) if '"stage_failed"' in line)
    assert page.locator(f"#L{failed}").get_attribute("class") == "tl in offending"
    assert loaded.count(".lane.violating", visible=True) == 1
    violation.click()  # marks the lines that show it, in the lanes and in the listing
    assert loaded.count(f'.item.focus[data-line="{failed}"]') == 1 and loaded.count(f"#L{failed}.focus") == 1
    page.check("#lane-only-violations")
    assert loaded.count(".lane", visible=True) == 1 and page.locator("#rid-1").is_visible()
    assert loaded.errors == [] and loaded.requests == [loaded.html.as_uri()]
