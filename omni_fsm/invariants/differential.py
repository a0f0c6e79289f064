"""Differential checks: one invariant judged over two histories of the same workload.

ORCH-INV-303 says that the event-driven and the polling orchestration loop differ in cadence
only: routing, ordering and terminal contracts hold identically on both. The history checks
(``CHECKS``) judge each run on its own; ``same_client_streams`` judges the pair: what every
client request saw, message by message, must be the same on both runs. A history is what an
``on_step`` hook receives, step by step: ``(event, observations)``. Streams are matched by the
client's own request id (``Submit.request_id``) where the client gave one, so the two runs may
submit in any order; a request without one is matched by the engine's id, which agrees only if
both runs submit in the same order (ids are assigned in submission order).

An ``n>1`` request's samples may run on different replicas, so the interleaving of their
messages in the parent's stream is arbitrary; each sample's stream is compared on its own, and
the parent's terminal with the parent's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from omni_fsm.spec import events as ev
from omni_fsm.spec import observations as ob

Step = tuple[Any, Sequence[ob.Observation]]
#: a client request across runs: its own ``request_id`` where the client gave one, else the engine's id
Request = str | int
Stream = tuple[Request, int]  #: (client request, sample index; -1: the request's own messages; ABORTS)
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

    Messages (``Emitted``) go to the stream of their request and sample; answers to the client's abort calls
    (``AbortAnswered``; a parent's answer for its dependent reaches no client) to their request's stream
    ``(request, ABORTS)``, each call named by its place among that
    request's abort calls (``call_id`` 0 for the first call answered, 1 for the next, ...): the engine numbers calls
    across all requests, so two runs that abort two requests in the other order number the same calls apart.
    A request the client named (``Submit.request_id``) is keyed by that name, and its messages carry ``rid`` -1:
    two runs that submit in another order give the same request other engine ids.
    """
    streams: dict[Stream, list[ob.Observation]] = {}
    calls: dict[int, dict[int, int]] = {}  #: request -> its abort call ids, in the order first answered
    named: dict[int, str] = {}  #: engine id -> the client's own request id, from its ``Submit``
    for event, observations in history:
        if isinstance(event, ev.Submit) and event.request_id is not None:
            named[event.rid] = event.request_id
        for o in observations:
            if isinstance(o, ob.Emitted):
                request = named.get(o.rid, o.rid)
                streams.setdefault((request, -1 if o.finished else o.sample), []).append(_unnamed(o, request))
            elif isinstance(o, ob.AbortAnswered) and o.parent is None:  # a parent's answer never reaches a client
                if o.call_id is not None:
                    own = calls.setdefault(o.rid, {})
                    o = o._replace(call_id=own.setdefault(o.call_id, len(own)))
                request = named.get(o.rid, o.rid)
                streams.setdefault((request, ABORTS), []).append(_unnamed(o, request))
    return streams


def _unnamed(o: Any, request: Request) -> ob.Observation:
    """Return ``o`` without the engine's id where the request has the client's own (runs may number it apart)."""
    made: ob.Observation = o._replace(rid=-1) if isinstance(request, str) else o
    return made


def same_client_streams(first: Iterable[Step], second: Iterable[Step]) -> list[str]:
    """Return a problem for each stream the two histories show differently (none: the same)."""
    a, b = client_streams(first), client_streams(second)
    problems = []
    for stream in sorted(a.keys() | b.keys(), key=lambda s: (isinstance(s[0], str), str(s[0]), s[1])):
        left, right = a.get(stream, []), b.get(stream, [])
        if left == right:
            continue
        rid, sample = stream
        part = f" sample {sample}" if sample >= 0 else " abort answers" if sample == ABORTS else ""
        where = f"request {rid!r}{part}"
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
