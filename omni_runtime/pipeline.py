"""The pipeline description: stages, their kinds, final-output flags and input adapters.

Loaded from TOML (``load_pipeline``); a malformed file raises ``PipelineError`` as
``FILE:LINE: reason``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from typing import Any

import attrs

from omni_fsm import StageKind
from omni_runtime.adapters import INPUT_ADAPTERS
from omni_runtime.errors import PipelineError


@attrs.frozen
class StageSpec:
    """One logical stage: what it is and how many replicas serve it."""

    name: str
    kind: StageKind
    final: bool = False
    replicas: int = 1
    max_running: int = 4  #: running slots of one replica
    adapter: str = "prompt"  #: input adapter from the previous stage (``prompt`` for stage 0)
    max_tokens: int = 8  #: AR: tokens generated at most (simulator)
    steps: int = 4  #: diffusion: denoising steps (simulator)


@attrs.frozen
class Pipeline:
    """An ordered list of stages; the last one is a final-output stage."""

    stages: tuple[StageSpec, ...]
    name: str = "pipeline"
    capacity: int = 0  #: running slots per stage seen by the lifecycle (0: derived)

    def __attrs_post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a pipeline needs at least one stage")
        if not self.stages[-1].final:
            raise ValueError("the last stage must be a final-output stage")

    @property
    def kinds(self) -> tuple[StageKind, ...]:
        """Return each stage's kind."""
        return tuple(s.kind for s in self.stages)

    @property
    def final(self) -> tuple[bool, ...]:
        """Return each stage's final-output flag."""
        return tuple(s.final for s in self.stages)

    @property
    def slots(self) -> int:
        """Return the lifecycle's capacity: declared, or twice the largest stage's running slots."""
        return self.capacity or 2 * max(s.replicas * s.max_running for s in self.stages)


def simple_pipeline(kinds: Sequence[StageKind], final: Sequence[bool] | None = None, replicas: int = 1,
                    max_running: int = 4, max_tokens: int = 6, steps: int = 3) -> Pipeline:  # fmt: skip
    """Return a pipeline of the given kinds with default adapters (for tests and benchmarks)."""
    final = tuple(final) if final is not None else tuple(i == len(kinds) - 1 for i in range(len(kinds)))
    stages = []
    for i, kind in enumerate(kinds):
        adapter = "prompt" if i == 0 else ("ar2diffusion" if kind is StageKind.DIFFUSION else "ar2ar")
        stages.append(StageSpec(f"s{i}", kind, final[i], replicas, max_running, adapter, max_tokens, steps))
    return Pipeline(tuple(stages))


# -- TOML ----------------------------------------------------------------------------------

_STAGE_KEYS: dict[str, type] = {"name": str, "kind": str, "final": bool, "replicas": int, "max_running": int,
                                "adapter": str, "max_tokens": int, "steps": int}  # fmt: skip


def _locate(text: str, stage: int | None, key: str | None) -> int:
    """Return the line of ``key`` in the ``stage``-th ``[[stages]]`` table (or of the table itself)."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if re.match(r"\s*\[\[\s*stages\s*\]\]", line)]
    if stage is None or stage >= len(headers):
        start, end = 0, len(lines)
        if key is None:
            return 1
    else:
        start = headers[stage]
        end = headers[stage + 1] if stage + 1 < len(headers) else len(lines)
    if key is not None:
        for i in range(start, end):
            if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
                return i + 1
    return start + 1


def load_pipeline(path: str) -> Pipeline:
    """Return the pipeline described by the TOML file at ``path``; raise ``PipelineError``."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PipelineError(path, 0, f"cannot read: {exc.strerror}") from None
    return parse_pipeline(text, path)


def parse_pipeline(text: str, path: str = "<pipeline>") -> Pipeline:
    """Return the pipeline described by TOML ``text``; raise ``PipelineError`` naming ``path``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = int(match.group(1)) if match else max(1, len(text.splitlines()))  # 'at end of document'
        raise PipelineError(path, line, f"invalid TOML: {exc}") from None
    head: dict[str, Any] = doc.get("pipeline", {})
    if not isinstance(head, dict):
        raise PipelineError(path, _locate(text, None, "pipeline"), "'pipeline' must be a table")
    raw = doc.get("stages")
    if not isinstance(raw, list) or not raw:
        raise PipelineError(path, 1, "need at least one [[stages]] table")
    stages = [_stage(text, path, i, entry) for i, entry in enumerate(raw)]
    if not stages[-1].final:
        raise PipelineError(path, _locate(text, len(stages) - 1, "final"), "the last stage must have final = true")
    if stages[0].adapter != "prompt":
        raise PipelineError(path, _locate(text, 0, "adapter"), "stage 0 takes the client's prompt: adapter = 'prompt'")
    capacity = head.get("capacity", 0)
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise PipelineError(path, _locate(text, None, "capacity"), "capacity must be a non-negative integer")
    name = head.get("name", "pipeline")
    return Pipeline(tuple(stages), str(name), capacity)


def _stage(text: str, path: str, i: int, entry: Any) -> StageSpec:
    if not isinstance(entry, dict):
        raise PipelineError(path, _locate(text, i, None), "a stage must be a table")
    for key, value in entry.items():
        want = _STAGE_KEYS.get(key)
        if want is None:
            raise PipelineError(path, _locate(text, i, key), f"unknown stage key {key!r}")
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise PipelineError(path, _locate(text, i, key), f"{key} must be {want.__name__}")
        if want is int and value < 1:
            raise PipelineError(path, _locate(text, i, key), f"{key} must be at least 1")
    if "kind" not in entry:
        raise PipelineError(path, _locate(text, i, None), "stage needs a kind ('ar' or 'diffusion')")
    try:
        kind = StageKind(entry["kind"])
    except ValueError:
        raise PipelineError(path, _locate(text, i, "kind"), f"unknown kind {entry['kind']!r}") from None
    adapter = entry.get("adapter", "prompt" if i == 0 else None)
    if adapter is None:
        raise PipelineError(path, _locate(text, i, None), "a later stage needs an input adapter")
    if adapter not in INPUT_ADAPTERS:
        raise PipelineError(path, _locate(text, i, "adapter"),
                            f"unknown adapter {adapter!r} (known: {', '.join(sorted(INPUT_ADAPTERS))})")  # fmt: skip
    fields = {k: v for k, v in entry.items() if k not in ("kind", "adapter")}
    fields.setdefault("name", f"stage{i}")
    return StageSpec(kind=kind, adapter=adapter, **fields)
