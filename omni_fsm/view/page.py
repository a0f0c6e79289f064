"""A self-contained HTML page: ``render_page(title, sections)`` returns the whole document as a string.

Pure: no I/O, no network resource at all (inline CSS and JS; a Content-Security-Policy that lets the page
load nothing). Every string a section did not build itself goes through ``esc``; data for the page's
script goes through ``script_json``, which can never close the ``<script>`` element it sits in.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

#: The page may load nothing: inline styles and scripts only, no fetch, no image, no frame, no form target.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")
DATA_ID = "page-data"  #: the id of the ``<script type="application/json">`` that holds the page's data

BASE_STYLE = """
:root { --fg: #1d2330; --muted: #5b6478; --line: #d9dde5; --bg: #fafbfc; --bad: #b3261e; --badbg: #fdecea;
        --ok: #1e6b34; --okbg: #e8f5ec; --mark: #fff3bf; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 14px 20px; border-bottom: 1px solid var(--line); background: #fff; position: sticky; top: 0;
         z-index: 2; }
header h1 { margin: 0 0 6px; font-size: 18px; }
nav a { margin-right: 14px; color: var(--muted); text-decoration: none; }
nav a:hover { text-decoration: underline; }
main { padding: 8px 20px 40px; }
[id] { scroll-margin-top: 100px; }  /* a link's target is not hidden under the sticky header */
section { margin: 18px 0; }
section > h2 { font-size: 16px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: #fff; border: 1px solid var(--line); padding: 8px; overflow-x: auto; }
table.facts td, table.facts th { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
.muted { color: var(--muted); }
"""


@attrs.frozen
class Section:
    """One titled part of a page: ``body`` is HTML its maker built (every outside string through ``esc``)."""

    anchor: str  #: the section's id, for links (letters, digits, ``-``)
    title: str  #: plain text (escaped by ``render_page``)
    body: str

    def __attrs_post_init__(self) -> None:
        if not self.anchor or not all(c.isascii() and (c.isalnum() or c == "-") for c in self.anchor):
            raise ValueError(f"section anchor must be letters, digits and '-', got {self.anchor!r}")


def esc(value: object) -> str:
    """Return ``value``'s text with ``& < > " '`` escaped: safe in element content and in quoted attributes."""
    return html.escape(str(value), quote=True)


def script_json(data: object) -> str:
    """Return ``data`` as JSON safe inside ``<script>``: no ``<``, ``>`` or ``&`` (so never ``</script>``)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(title: str, sections: Sequence[Section], *, style: str = "", script: str = "",
                data: Mapping[str, Any] | None = None, subtitle: str = "") -> str:
    """Return a whole HTML document: ``title``, a link per section, the sections, then ``data`` and ``script``.

    ``style`` and ``script`` are the caller's own CSS and JS (not escaped: never put outside strings there);
    ``data`` is embedded as JSON (``script_json``) in the element whose id is ``DATA_ID``.
    """
    if "</" in style or "</" in script:
        raise ValueError("style and script must not contain '</'")
    nav = " ".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    body = "\n".join(f'<section id="{s.anchor}">\n<h2>{esc(s.title)}</h2>\n{s.body}\n</section>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{esc(title)}</title>",
        f"<style>{BASE_STYLE}{style}</style>",
        "</head>",
        "<body>",
        f"<header><h1>{esc(title)}</h1>" + (f'<div class="muted">{esc(subtitle)}</div>' if subtitle else "")
        + f"<nav>{nav}</nav></header>",
        f"<main>\n{body}\n</main>",
    ]
    if data is not None:
        parts.append(f'<script type="application/json" id="{DATA_ID}">{script_json(data)}</script>')
    if script:
        parts.append(f"<script>{script}</script>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


__all__ = ["BASE_STYLE", "CSP", "DATA_ID", "Section", "esc", "render_page", "script_json"]
