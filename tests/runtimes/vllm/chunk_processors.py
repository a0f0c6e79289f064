"""Chunk processors for the Omni scheduler's tests: each records every call and returns a chunk of what it got."""

from __future__ import annotations

from typing import Any


class TensorTrigger:
    """A processor without the declaration: called on steps with a tensor payload and at the end."""

    requires_token_updates = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], tuple[str, ...], bool]] = []

    def __call__(self, request_id: str, token_ids: list[int], payload: Any, finished: bool) -> Any:
        keys = tuple(sorted(payload)) if isinstance(payload, dict) else ()
        self.calls.append((request_id, tuple(token_ids), keys, finished))
        return (tuple(token_ids), keys) if token_ids or keys else None


class TokenUpdates(TensorTrigger):
    """A processor that declares ``requires_token_updates``: also called on token-only steps."""

    requires_token_updates = True
