"""TOML read with line numbers: every error from a specs file names ``FILE:LINE``.

``tomllib`` gives values, not positions; ``Lines`` finds the line of the n-th ``[[array]]`` table
(and of a key in it) in the text, and ``Fields`` reads one table with typed accessors whose
errors point there. Used by ``omni_fsm.registry`` for ``specs/``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import attrs

from omni_fsm.errors import MalformedInput


class Lines:
    """Finds the line of the n-th ``[[array]]`` table of a TOML text, and of a key inside it."""

    def __init__(self, text: str, array: str) -> None:
        self.lines = text.splitlines()
        self.array = array
        header = re.compile(rf"^\s*\[\[\s*{re.escape(array)}\s*\]\]")
        self.starts = [n for n, line in enumerate(self.lines, 1) if header.match(line)]

    def of(self, index: int, key: str | None = None) -> int:
        """Return the line of table ``index`` (or of ``key`` in it); 1 if it cannot be told."""
        if index >= len(self.starts):
            return 1
        start = self.starts[index]
        if key is None:
            return start
        end = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.lines) + 1
        pattern = re.compile(rf'^\s*(?:"?{re.escape(key)}"?\s*=|\[\s*{re.escape(self.array)}\.{re.escape(key)}\s*\])')
        return next((n for n in range(start, end) if pattern.match(self.lines[n - 1])), start)


def parse(path: Path, shown: str) -> tuple[dict[str, Any], str]:
    """Return the parsed TOML at ``path`` and its text; ``MalformedInput`` names ``shown`` and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MalformedInput(shown, 0, f"cannot read: {exc.strerror}") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:  # ``lineno`` only from Python 3.14: else read it from the message
        where = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = getattr(exc, "lineno", None) or (int(where.group(1)) if where else 0)
        reason = str(exc)[: where.start()].strip() if where else str(exc)
        raise MalformedInput(shown, line, f"not valid TOML: {reason}") from None


@attrs.define
class Fields:
    """Typed access to one TOML table; every error names the file and line of the field."""

    data: Mapping[str, Any]
    path: str
    lines: Lines | None
    index: int
    what: str
    anchor: str | None = None  #: an inline table: errors point at the line of its key

    def line(self, key: str | None = None) -> int:
        key = self.anchor or key
        return self.lines.of(self.index, key) if self.lines is not None else 1

    def fail(self, key: str | None, reason: str) -> MalformedInput:
        return MalformedInput(self.path, self.line(key), f"{self.what}: {reason}")

    def only(self, allowed: Collection[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.fail(key, f"unknown field {key!r} (allowed: {', '.join(sorted(allowed))})")

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"{key!r} must be a non-empty string")
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if key in self.data else None

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, f"{key!r} must be an integer")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"{key!r} must be a list of non-empty strings")
        return tuple(value)

    def table(self, key: str) -> Mapping[str, Any]:
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, f"{key!r} must be a table")
        return value

    def tables(self, key: str) -> list[Mapping[str, Any]]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(key, f"{key!r} must be an array of tables ([[{key}]])")
        return value
