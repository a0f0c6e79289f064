"""The text-to-image demo's outputs: each finished request's image as PNG (the standard library's zlib and
struct: no imaging package), and one self-contained HTML report (``omni_fsm.view.page``) with the images embedded
as ``data:`` URIs: per request its prompt, outcome, timings and image; aborted and failed requests marked."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from omni_fsm.view.page import Section, esc, render_page


@attrs.frozen
class RequestRecord:
    """One request of the demo: what was asked, how it ended, when (seconds from the run's start), its image."""

    rid: int
    prompt: str
    negative: str | None
    outcome: str  #: ``finished``, ``aborted`` or ``failed``
    reason: str | None
    submitted: float
    forwarded: float | None  #: when the AR stage handed it to the diffusion stage (``None``: never)
    ended: float
    image: Any = None  #: float (H, W, 3) in [0, 1] for a finished request, else ``None``
    made_from: str = ""  #: the prompt the diffusion stage read (the AR stage's tokens as words)


def png_bytes(image: Any) -> bytes:
    """Return ``image`` (float (H, W, 3) in [0, 1], or uint8) as an 8-bit RGB PNG file's bytes."""
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8:
        pixels = (np.clip(pixels, 0.0, 1.0) * 255).round().astype(np.uint8)
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"an RGB image is (H, W, 3), not {pixels.shape}")
    height, width = pixels.shape[:2]
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))  # filter type 0 on every row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, truecolour, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


STYLE = """
table.requests { border-collapse: collapse; }
table.requests td, table.requests th { border-bottom: 1px solid var(--line); padding: 6px 12px 6px 0;
  text-align: left; vertical-align: middle; }
img.sample { width: 96px; height: 96px; image-rendering: pixelated; border: 1px solid var(--line); }
.outcome { font-weight: 600; padding: 1px 6px; border-radius: 3px; }
.outcome-finished { color: var(--ok); background: var(--okbg); }
.outcome-aborted, .outcome-failed { color: var(--bad); background: var(--badbg); }
.noimage { display: inline-block; width: 96px; text-align: center; color: var(--muted); }
"""


def _ms(start: float | None, end: float | None) -> str:
    return "-" if start is None or end is None else f"{(end - start) * 1000:.0f} ms"


def _row(record: RequestRecord) -> str:
    if record.image is not None:
        uri = "data:image/png;base64," + base64.b64encode(png_bytes(record.image)).decode("ascii")
        picture = f'<img class="sample" src="{uri}" alt="request {record.rid}: {esc(record.made_from)}">'
    else:
        picture = f'<span class="noimage">no image ({esc(record.outcome)})</span>'
    why = f'<br><span class="muted">{esc(record.reason)}</span>' if record.reason else ""
    negative = esc(record.negative) if record.negative is not None else '<span class="muted">(none)</span>'
    made = f'<br><span class="muted">read as: {esc(record.made_from)}</span>' if record.made_from else ""
    return (f'<tr class="request" data-rid="{record.rid}" data-outcome="{esc(record.outcome)}">'
            f"<td>{record.rid}</td><td>{esc(record.prompt)}{made}</td><td>{negative}</td>"
            f'<td><span class="outcome outcome-{esc(record.outcome)}">{esc(record.outcome)}</span>{why}</td>'
            f"<td>{_ms(record.submitted, record.forwarded)}</td><td>{_ms(record.forwarded, record.ended)}</td>"
            f"<td>{_ms(record.submitted, record.ended)}</td><td>{picture}</td></tr>")  # fmt: skip


def render_report(records: Sequence[RequestRecord], violations: Sequence[str], facts: dict[str, str]) -> str:
    """Return the report's HTML: a summary (``facts``, the outcome counts, the monitor's violations), then a row
    per request."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.outcome] = counts.get(record.outcome, 0) + 1
    summary = [*facts.items(), *((f"requests {k}", str(v)) for k, v in sorted(counts.items())),
               ("trace violations", str(len(violations)))]  # fmt: skip
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in summary)
    found = "".join(f"<li>{esc(v)}</li>" for v in violations)
    head = ("<tr><th>id</th><th>prompt</th><th>negative (CFG companion)</th><th>outcome</th><th>AR stage</th>"
            "<th>diffusion stage</th><th>total</th><th>image</th></tr>")  # fmt: skip
    table = f'<table class="requests">{head}{"".join(_row(r) for r in records)}</table>'
    sections = [Section("summary", "Summary", f'<table class="facts">{rows}</table><ul>{found}</ul>'),
                Section("requests", "Requests", table)]  # fmt: skip
    return render_page("Text to image: the demo's requests", sections, style=STYLE,
                       subtitle="AR stage on the simulator, diffusion stage on diffusers")  # fmt: skip
