"""Differential checks: one invariant judged over two histories of the same workload.

ORCH-INV-303 says that the event-driven and the polling orchestration loop differ in cadence
only: routing, ordering and terminal contracts hold identically on both. The history checks
(``CHECKS``) judge each run on its own; ``same_client_streams`` judges the pair: what every
client request saw, message by message, must be the same on both runs. A history is what an
``on_step`` hook receives, step by step: ``(event, observations)``. Streams are matched by
request id, so both runs must submit the same requests in the same order (ids are assigned in
submission order).

An ``n>1`` request's samples may run on different replicas, so the interleaving of their
messages in the parent's stream is arbitrary; each sample's stream is compared on its own, and
the parent's terminal with the parent's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from omni_fsm.spec import observations as ob

Step = tuple[Any, Sequence[ob.Observation]]
Stream = tuple[int, int]  #: (client request id, sample index; -1: the request's own messages; ABORTS)
ABORTS = -2  #: the stream of a request's abort answers


@attrs.frozen
class DifferentialCheck:
    """A named check over two histories, and the invariant it implements."""

    name: str
    invariant: str
    doc: str
    run: Callable[[Iterable[Step], Iterable[Step]], list[str]]


def client_streams(history: Iterable[Step]) -> dict[Stream, list[ob.Observation]]:
    """Return every client-visible message of ``history``, per request and sample, in order.

    Messages (``Emitted``) go to the stream of their request and sample; answers to abort calls
    (``AbortAnswered``) to their request's stream ``(rid, ABORTS)``, each call named by its place among that
    request's abort calls (``call_id`` 0 for the first call answered, 1 for the next, ...): the engine numbers calls
    across all requests, so two runs that abort two requests in the other order number the same calls apart.
    """
    streams: dict[Stream, list[ob.Observation]] = {}
    calls: dict[int, dict[int, int]] = {}  #: request -> its abort call ids, in the order first answered
    for _, observations in history:
        for o in observations:
            if isinstance(o, ob.Emitted):
                streams.setdefault((o.rid, -1 if o.finished else o.sample), []).append(o)
            elif isinstance(o, ob.AbortAnswered):
                if o.call_id is not None:
                    own = calls.setdefault(o.rid, {})
                    o = attrs.evolve(o, call_id=own.setdefault(o.call_id, len(own)))
                streams.setdefault((o.rid, ABORTS), []).append(o)
    return streams


def same_client_streams(first: Iterable[Step], second: Iterable[Step]) -> list[str]:
    """Return a problem for each stream the two histories show differently (none: the same)."""
    a, b = client_streams(first), client_streams(second)
    problems = []
    for stream in sorted(a.keys() | b.keys()):
        left, right = a.get(stream, []), b.get(stream, [])
        if left == right:
            continue
        rid, sample = stream
        part = f" sample {sample}" if sample >= 0 else " abort answers" if sample == ABORTS else ""
        where = f"request {rid}{part}"
        at = next((i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y), min(len(left), len(right)))
        shown = [s[at] if at < len(s) else "nothing" for s in (left, right)]
        problems.append(f"ORCH-INV-303: {where}, message {at}: {shown[0]} on one loop, {shown[1]} on the other")
    return problems


DIFFERENTIAL_CHECKS: dict[str, DifferentialCheck] = {
    "same_client_streams": DifferentialCheck(
        "same_client_streams", "ORCH-INV-303",
        "the same workload gives every client request the same messages, in the same order, on both loops",
        same_client_streams,
    ),
}  # fmt: skip

__all__ = ["ABORTS", "DIFFERENTIAL_CHECKS", "DifferentialCheck", "Step", "client_streams", "same_client_streams"]
