"""The floor: what a stage hop costs in CPython when the core's messages pass through its layering, unchecked.

A skeleton of the orchestrator and its lifecycle core that sends exactly the messages the real
ones send for an instant 3-stage request, and does nothing else: no guards, no hooks, no
checks of bad input, no abort or RPC bookkeeping, no adapters beyond concatenating tokens.
Per request: a submit, then per stage a scheduled, an output and a finished report; 10
lifecycle events, 14 observations (submitted, dispatched, slot taken / freed, forwarded,
emitted, released), 3 dispatch commands with their stage inputs, one client message, each
passed as the core passes it (a feed per event, its observations handed to handlers by type).
It is what ``bench/orchestrator.py`` compares the real core with: ``core / floor`` is the price
of everything the real core checks and records. It is a yardstick, not a proven lower bound: a
path with fewer layers (no observation lists, say) passes the same objects faster still.
"""

from __future__ import annotations

import time

NEW, WAITING, RUNNING, DONE = range(4)
STAGES = 3


class _Msg:
    __slots__ = ("rid", "stage", "value")

    def __init__(self, rid: int, stage: int, value: object = None) -> None:
        self.rid, self.stage, self.value = rid, stage, value


def _kinds(names: str) -> list[type[_Msg]]:
    return [type(name, (_Msg,), {"__slots__": ()}) for name in names.split()]


Submit, Scheduled, Output, Finished = _kinds("Submit Scheduled Output Finished")  # events
Submitted, Dispatched, Forwarded, SlotTaken, SlotFreed, Emitted, Released = _kinds(
    "Submitted Dispatched Forwarded SlotTaken SlotFreed Emitted Released")  # observations
Dispatch, Deliver, StageInput, ClientMessage = _kinds("Dispatch Deliver StageInput ClientMessage")  # commands


class Report:
    """A runtime report: kind (an event class), request id, sequence number, payload."""

    __slots__ = ("kind", "payload", "rid", "seq")

    def __init__(self, kind: type[_Msg], rid: int, seq: int, payload: object = None) -> None:
        self.kind, self.rid, self.seq, self.payload = kind, rid, seq, payload


class _Record:
    __slots__ = ("rid", "stage", "state", "tokens")

    def __init__(self, rid: int) -> None:
        self.rid, self.state, self.stage, self.tokens = rid, NEW, 0, 0


class _Route:
    __slots__ = ("result", "seq", "stage")

    def __init__(self) -> None:
        self.stage, self.seq = 0, 0
        self.result: object = None


def _submit(rec: _Record, e: _Msg, out: list[_Msg]) -> None:
    rec.state = WAITING
    out.append(Submitted(rec.rid, 0))
    out.append(Dispatched(rec.rid, 0))


def _scheduled(rec: _Record, e: _Msg, out: list[_Msg]) -> None:
    rec.state = RUNNING
    out.append(SlotTaken(rec.rid, rec.stage))


def _output(rec: _Record, e: _Msg, out: list[_Msg]) -> None:
    rec.tokens += 1


def _finished(rec: _Record, e: _Msg, out: list[_Msg]) -> None:
    out.append(SlotFreed(rec.rid, rec.stage))
    if rec.stage == STAGES - 1:
        rec.state = DONE
        out.append(Emitted(rec.rid, rec.stage, rec.tokens))
        out.append(Released(rec.rid, rec.stage))
    else:
        rec.state, rec.stage, rec.tokens = WAITING, rec.stage + 1, 0
        out.append(Forwarded(rec.rid, rec.stage))
        out.append(Dispatched(rec.rid, rec.stage))


_TABLE = {(NEW, Submit): _submit, (WAITING, Scheduled): _scheduled, (RUNNING, Output): _output,
          (RUNNING, Finished): _finished}  # fmt: skip


class Floor:
    """Routes and lifecycle in one: events in, observations, commands out."""

    def __init__(self) -> None:
        self.records: dict[int, _Record] = {}
        self.routes: dict[int, _Route] = {}
        self.next_rid = 0

    def submit(self, prompt: tuple[int, ...]) -> tuple[int, list[_Msg]]:
        rid = self.next_rid
        self.next_rid += 1
        self.routes[rid] = route = _Route()
        route.result = prompt
        self.records[rid] = _Record(rid)
        return rid, self._feed(Submit(rid, 0))

    def report(self, stage: int, r: Report) -> list[_Msg]:
        route = self.routes.get(r.rid)
        if route is None or route.stage != stage or route.seq != r.seq:
            return []
        route.seq += 1
        if r.kind is Output:
            route.result = r.payload if route.result is None else route.result + r.payload  # type: ignore[operator]
        return self._feed(r.kind(r.rid, stage))

    def _feed(self, e: _Msg) -> list[_Msg]:
        rec = self.records[e.rid]
        out: list[_Msg] = []
        _TABLE[rec.state, e.__class__](rec, e, out)
        commands: list[_Msg] = []
        for o in out:
            handler = _HANDLERS.get(o.__class__)
            if handler is not None:
                handler(self, o, commands)
        return commands


def _dispatched(floor: Floor, o: _Msg, commands: list[_Msg]) -> None:
    route = floor.routes[o.rid]
    route.stage, route.seq = o.stage, 0
    commands.append(Dispatch(o.rid, o.stage, StageInput(o.rid, o.stage, route.result)))
    route.result = None


def _emitted(floor: Floor, o: _Msg, commands: list[_Msg]) -> None:
    commands.append(Deliver(o.rid, o.stage, ClientMessage(o.rid, o.stage, floor.routes[o.rid].result)))


def _released(floor: Floor, o: _Msg, commands: list[_Msg]) -> None:
    del floor.routes[o.rid]
    del floor.records[o.rid]


_HANDLERS = {Dispatched: _dispatched, Emitted: _emitted, Released: _released}


def floor_run(requests: int) -> tuple[float, int]:
    """Run ``requests`` instant 3-stage requests through the floor; return (seconds, hops)."""
    floor = Floor()
    inputs = [[(Report(Scheduled, rid, 0), Report(Output, rid, 1, (7,)), Report(Finished, rid, 2))
               for _ in range(STAGES)] for rid in range(requests)]  # fmt: skip
    hops = 0
    start = time.perf_counter()
    for _ in range(requests):
        rid, todo = floor.submit((1, 2, 3))
        while todo:
            c = todo.pop()
            if c.__class__ is Dispatch:
                hops += 1
                for r in inputs[rid][c.stage]:
                    todo += floor.report(c.stage, r)
    return time.perf_counter() - start, hops
