"""Pictures of the lifecycle as self-contained HTML pages (no network resource; pure: each returns a string).

- ``page``: ``render_page(title, sections)``, ``Section``, and the escaping every page uses (``esc``,
  ``script_json``);
- ``trace``: ``render_trace(report, steps, rules)``, a checked trace with a lane per request and each
  violation with its rule (``omni-fsm view TRACE -o PAGE.html``, ``omni_fsm.cli.view``).
"""

from __future__ import annotations

from omni_fsm.view.page import Section, esc, render_page, script_json
from omni_fsm.view.trace import RuleText, render_trace, trace_sections

__all__ = ["RuleText", "Section", "esc", "render_page", "render_trace", "script_json", "trace_sections"]
