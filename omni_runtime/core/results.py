"""A request's result, as the list form of ``generate`` returns it: what vLLM's ``RequestOutput`` says of one prompt.

Built from the client messages of one request (the terminal last), per sample of the request's last stage: what
the terminal (one sample) or each sample's end (``n>1``) carries, else what its partial messages added up to (a
sample that never reached its end: the request was aborted or failed first). No I/O, no asyncio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from omni_fsm import Outcome, StageKind
from omni_runtime.core.commands import ClientMessage
from omni_runtime.errors import RequestRefused


@attrs.frozen(slots=True)
class RequestResult:
    """One request's result: ids, outcome, and per sample (index ``i`` of an ``n>1`` request) what it made.

    ``token_ids[i]`` is what an AR last stage generated (empty for a diffusion stage, whose sample is ``data[i]``);
    ``data[i]`` what the stage's output adapter rendered; ``texts[i]`` its text (``None``: the stage makes no
    text); ``finish_reasons[i]`` vLLM's string (``stop``, ``length``, ``abort``, ...) and ``stop_reasons[i]`` the
    stop string or token id. ``error`` is the terminal's; ``messages`` every client message, the terminal last.
    """

    rid: int
    request_id: str | None
    outcome: Outcome
    token_ids: tuple[tuple[int, ...], ...]
    texts: tuple[str | None, ...]
    finish_reasons: tuple[str | None, ...]
    stop_reasons: tuple[str | int | None, ...]
    data: tuple[Any, ...]
    error: str | None
    messages: tuple[ClientMessage, ...]

    @property
    def finished(self) -> bool:
        """Return whether the request ended as ``finished`` (not aborted, failed or fatal)."""
        return self.outcome is Outcome.FINISHED


def request_result(messages: Sequence[ClientMessage], n: int, kinds: Sequence[StageKind]) -> RequestResult:
    """Return the result of one request of ``n`` samples from its messages (the terminal last) in a pipeline of
    stages of ``kinds``. Raises ``ValueError`` if the last message is not a terminal."""
    end = messages[-1] if messages else None
    if end is None or not end.finished or end.outcome is None:
        raise ValueError("a request's result needs its messages up to its terminal")
    tokens = kinds[end.stage] is StageKind.AR
    samples = [_sample(messages, end, index, tokens) for index in ((-1,) if n == 1 else range(n))]
    data = tuple(s[0] for s in samples)
    return RequestResult(end.rid, end.request_id, end.outcome, tuple(d if tokens else () for d in data),
                         tuple(s[1] for s in samples), tuple(s[2] for s in samples), tuple(s[3] for s in samples),
                         data, end.error, tuple(messages))  # fmt: skip


def _sample(messages: Sequence[ClientMessage], end: ClientMessage, index: int,
            tokens: bool) -> tuple[Any, str | None, str | None, str | int | None]:  # fmt: skip
    """Return (data, text, finish reason, stop reason) of sample ``index`` (-1: the only one) at the last stage."""
    own = [m for m in messages if m.stage == end.stage and m.sample == index]
    last = own[-1] if own and (own[-1].finished or own[-1].stage_final) else None
    if last is not None and last.data is not None:
        return last.data, last.text, last.reason, last.stop_reason
    parts = [m for m in own if not (m.finished or m.stage_final)]
    texts = [m.text for m in parts if m.text is not None]
    made = tuple(t for m in parts if m.data for t in m.data) if tokens else None
    reason = (last or end).reason
    return made, "".join(texts) if texts else None, reason, None if last is None else last.stop_reason


def as_batch(prompt: Any, request_id: str | None, request_ids: Sequence[str | None] | None) -> Sequence[Any] | None:
    """Return ``generate``'s prompts as a batch (a list or tuple given), else ``None`` (one prompt, or none);
    ``RequestRefused`` for the id keyword of the other form (``request_ids`` goes with a list, ``request_id`` with
    one prompt). The sync and the asyncio engine both ask this."""
    if isinstance(prompt, list | tuple):
        if request_id is not None:
            raise RequestRefused("a list of prompts takes request_ids=[...] (one per prompt), not request_id")
        return prompt
    if request_ids is not None:
        raise RequestRefused("one prompt takes request_id=..., not request_ids (that is for a list of prompts)")
    return None
