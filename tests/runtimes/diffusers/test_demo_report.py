"""The text-to-image demo (``make demo PIPELINE=text2image``): its trace is clean to ``omni-fsm check``, each
finished request's PNG decodes to its image, and its HTML report, loaded in headless Chromium, shows one drawn
image per finished request and marks the aborted and failed ones, with no console error and no request."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_fsm.cli import main as cli_main
from omni_runtime.apps.text2image import DemoRun, main, run_demo
from omni_runtime.runtimes.diffusers.report import png_bytes
from tests.browser import Opened, chromium


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return run_demo(tmp_path_factory.mktemp("text2image"), requests=12, seed=0)


def _decode_png(data: bytes) -> np.ndarray:
    """Return an 8-bit RGB PNG's pixels (filter type 0 rows, as ``png_bytes`` writes them)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    at, idat = 8, b""
    while at < len(data):
        size, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        body = data[at + 8:at + 8 + size]
        assert int.from_bytes(data[at + 8 + size:at + 12 + size], "big") == zlib.crc32(kind + body)
        idat += body if kind == b"IDAT" else b""
        at += 12 + size
    rows = zlib.decompress(idat)
    assert len(rows) == height * (1 + 3 * width) and all(rows[r * (1 + 3 * width)] == 0 for r in range(height))
    pixels = np.frombuffer(rows, np.uint8).reshape(height, 1 + 3 * width)[:, 1:]
    return pixels.reshape(height, width, 3)


def test_the_demo_has_every_outcome_and_a_clean_trace(demo: DemoRun, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = [r.outcome for r in demo.records]
    assert {"finished", "aborted", "failed"} <= set(outcomes) and demo.violations == []
    assert cli_main(["check", str(demo.trace)]) == 0
    assert "0 violations" in capsys.readouterr().out
    finished = [r for r in demo.records if r.outcome == "finished"]
    assert sorted(p.name for p in demo.images) == sorted(f"request-{r.rid}.png" for r in finished)
    for record in demo.records:
        assert (record.image is None) == (record.outcome != "finished")


def test_each_png_holds_its_requests_image(demo: DemoRun) -> None:
    for record in (r for r in demo.records if r.image is not None):
        pixels = _decode_png((demo.trace.parent / f"request-{record.rid}.png").read_bytes())
        assert pixels.shape == record.image.shape == (16, 16, 3)
        assert np.abs(pixels / 255.0 - record.image).max() <= 0.5 / 255 + 1e-6
        assert pixels.std() > 0  # a picture, not a flat fill


def test_png_bytes_refuses_what_is_not_an_rgb_image() -> None:
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        png_bytes(np.zeros((4, 4)))


def test_the_cli_writes_the_report_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--requests", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "violations=0" in out and (tmp_path / "report.html").is_file() and (tmp_path / "trace.jsonl").is_file()


@pytest.fixture(scope="module")
def page(demo: DemoRun) -> Iterator[tuple[Any, list[str], list[str]]]:
    with chromium() as browser:
        opened = Opened(browser, demo.report)
        yield opened.page, opened.errors, opened.requests


def test_the_report_draws_one_image_per_finished_request(demo: DemoRun, page: Any) -> None:
    loaded, errors, requests = page
    drawn = loaded.eval_on_selector_all(
        "tr.request", "rows => rows.map(r => [Number(r.dataset.rid), r.dataset.outcome, "
        "Array.from(r.querySelectorAll('img')).map(i => [i.complete, i.naturalWidth, i.naturalHeight])])")
    assert [(rid, outcome) for rid, outcome, _ in drawn] == [(r.rid, r.outcome) for r in demo.records]
    for rid, outcome, images in drawn:
        assert images == ([[True, 16, 16]] if outcome == "finished" else []), (rid, outcome, images)
    assert errors == [] and [u for u in requests if not u.startswith(("file:", "data:"))] == []


def test_the_report_marks_aborted_and_failed_requests(demo: DemoRun, page: Any) -> None:
    loaded, _, _ = page
    for record in demo.records:
        row = loaded.locator(f'tr.request[data-rid="{record.rid}"]')
        badge = row.locator(f".outcome-{record.outcome}")
        assert badge.inner_text() == record.outcome
        if record.outcome != "finished":
            assert f"no image ({record.outcome})" in row.inner_text()
            assert badge.evaluate("b => getComputedStyle(b).color") == "rgb(179, 38, 30)"  # --bad
