"""TOML read with line numbers: every error from a TOML file names ``FILE:LINE``.

``tomllib`` gives values, not positions; ``Lines`` finds the line of a table in the text (the root,
a ``[table]``, the n-th ``[[array]]`` table) and of a key in it, and ``Fields`` reads one table with
typed accessors whose errors point there. Used by ``omni_fsm.registry`` for ``specs/`` and by
``omni_runtime.core.pipeline`` for pipeline files.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import attrs

from omni_fsm.errors import MalformedInput

#: a ``[table]`` or ``[[array]]`` header line; group 1 is the bracket, group 2 the (dotted, maybe quoted) name
_HEADER = re.compile(r"""\s*(\[\[?)\s*([\w.\-"' ]+?)\s*\]\]?\s*(#.*)?$""")


class Lines:
    """Finds the line of a table of a TOML text, and of a key inside it; lines count from 1 as ``tomllib``'s do."""

    def __init__(self, text: str, array: str | None = None) -> None:
        self.lines = text.split("\n")  # as tomllib counts lines
        self.array = array  #: the table ``of`` looks in
        self.headers: list[tuple[int, str]] = []  #: (line, name without quotes or spaces) of every table header
        for n, line in enumerate(self.lines, 1):
            match = _HEADER.match(line)
            if match:
                self.headers.append((n, re.sub(r"""[\s"']""", "", match.group(2))))

    def of(self, index: int, key: str | None = None) -> int:
        """Return the line of the ``index``-th ``[[array]]`` table (or of ``key`` in it)."""
        return self.find(self.array, index, key)

    def find(self, table: str | None, index: int = 0, key: str | None = None) -> int:
        """Return the line of ``key`` in the ``index``-th ``table`` (``None``: the root), or of the table itself.

        A key is found as ``key = ``, as a dotted ``key.more = `` or as a sub-table header ``[table.key]``;
        a table written without a header of its own (inline, dotted keys) is found as a key of the root.
        """
        if table is None:
            start, body = 1, 1
        else:
            mine = [n for n, name in self.headers if name == table]
            if index >= len(mine):
                return self.find(None, 0, table)
            start = mine[index]
            body = start + 1
        if key is None:
            return start
        own_end = next((n for n, _ in self.headers if n >= body), len(self.lines) + 1)  # its own keys end here
        k = re.escape(key)
        pattern = re.compile(rf"""\s*(?:{k}|"{k}"|'{k}')\s*[=.]""")
        line = next((n for n in range(body, own_end) if pattern.match(self.lines[n - 1])), None)
        if line is not None:
            return line
        sub = key if table is None else f"{table}.{key}"
        for n, name in self.headers:  # a sub-table [table.key] or [table.key.more], before the next table
            if n > start and table is not None and not name.startswith(table + "."):
                break
            if n >= start and (name == sub or name.startswith(sub + ".")):
                return n
        return start


def read(path: Path, shown: str) -> str:
    """Return the UTF-8 text at ``path``; ``MalformedInput`` names ``shown`` and the line (0: the file itself)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MalformedInput(shown, 0, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")  # a byte-order mark some editors write is not part of the text
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise MalformedInput(shown, line, f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def loads(text: str, shown: str) -> dict[str, Any]:
    """Return the parsed TOML ``text``; ``MalformedInput`` names ``shown`` and the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # ``lineno`` only from Python 3.14: else read it from the message
        where = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        at_end = max(1, len(text.splitlines()))  # '(at end of document)'
        line = getattr(exc, "lineno", None) or (int(where.group(1)) if where else at_end)
        reason = str(exc)[: where.start()].strip() if where else str(exc)
        raise MalformedInput(shown, line, f"not valid TOML: {reason}") from None


def parse(path: Path, shown: str) -> tuple[dict[str, Any], str]:
    """Return the parsed TOML at ``path`` and its text; ``MalformedInput`` names ``shown`` and the line."""
    text = read(path, shown)
    return loads(text, shown), text


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
