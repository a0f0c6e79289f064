"""The browser harness of the project's HTML pages (``omni-fsm view``, the text-to-image report): Debian's headless
Chromium (``make test`` installs it) driven by Playwright with ``executable_path``; missing either, the test is
unavailable (skipped on a developer's machine, a failure under CI=true)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.unavailable import unavailable

CHROMIUM = "/usr/bin/chromium"
#: as root on a closed network: no sandbox, and none of Chromium's background connections
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


@contextmanager
def chromium() -> Iterator[Any]:
    """Launch one headless Chromium (closed on exit)."""
    if shutil.which(CHROMIUM) is None:
        unavailable(f"{CHROMIUM} (Debian's chromium package: make test installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Opened:
    """A page opened from a file, with every console error, page error and request it made."""

    def __init__(self, browser: Any, html: Path) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.goto(html.as_uri(), wait_until="load")
