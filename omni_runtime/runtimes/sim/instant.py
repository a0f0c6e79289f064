"""A zero-cost replica: scheduled, one output and finished within one step (benchmarks).

With ``hold=True`` it keeps each request after its output instead of finishing it: requests stay
in flight mid-stage, an output buffered, for as long as a memory benchmark needs them there.
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_fsm import ControlMethod, StageKind
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput

_SCHEDULED = rp.Status.SCHEDULED
_TOKENS = (7,)


class InstantReplica:
    """Does no work: each request is scheduled, emits one output and finishes at the next step."""

    def __init__(self, spec: StageSpec, hold: bool = False) -> None:
        self._hold = hold
        self._held: dict[int, None] = {}  #: ``hold``: requests past their output, never finished
        self._payload = _TOKENS if spec.kind is StageKind.AR else None
        self._final = None if spec.kind is StageKind.AR else {"image": "0"}
        self._queue: dict[int, None] = {}  #: accepted request ids, in order (a dict: O(1) aborts)
        self._sink: rp.ReportSink | None = None
        self.accepted = 0  #: requests accepted so far (a benchmark's hops)

    def bind(self, sink: rp.ReportSink) -> None:
        self._sink = sink

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        self._queue[req_id] = None
        self.accepted += 1

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        sink = self._sink
        assert sink is not None
        for req_id in req_ids:
            self._queue.pop(req_id, None)
            self._held.pop(req_id, None)
            sink(rp.AbortResult(abort_id, req_id, True))

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        assert self._sink is not None
        self._sink(rp.RpcResult(call_id, True))

    def step(self) -> bool:
        queue, self._queue = self._queue, {}
        sink = self._sink
        assert sink is not None
        status, output, finished, payload, final = rp.StatusChanged, rp.Output, rp.Finished, self._payload, self._final
        for req_id in queue:
            sink(status(req_id, 0, _SCHEDULED))
            sink(output(req_id, 1, 1, payload))
            if self._hold:
                self._held[req_id] = None
            else:
                sink(finished(req_id, 2, payload=final))
        return False

    def shutdown(self) -> None:
        self._queue.clear()
        self._held.clear()
