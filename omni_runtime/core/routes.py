"""The routing data around the lifecycle's decisions, shared by the orchestrator's client API, its report intake and
its observation -> command translation: each request's route (stage, replica, buffers, report order), the replicas
alive, abort and RPC correlation, the client's own request ids; and the two choices made here, not in the table:
which replica a request is bound to, and the sampling parameters a stage is given.
"""

from __future__ import annotations

from typing import Any

import attrs

from omni_fsm import StageKind
from omni_fsm.engine.core import dependent_id
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import Pipeline
from omni_runtime.core.prompts import Prompt, StageInput
from omni_runtime.errors import EngineNotRunning


class Route:
    """Routing data of one tracked request (client, child or companion)."""

    __slots__ = ("companion", "companions", "error", "feeds", "held", "input_ended", "next_seq", "parent", "prompt",
                 "replica", "result", "stage", "stop_reason", "text")  # fmt: skip

    def __init__(self, prompt: Prompt, parent: int = -1, companion: bool = False) -> None:
        self.prompt = prompt
        self.parent = parent
        self.companion = companion
        self.stage = -1
        self.replica = -1
        self.next_seq = 0
        self.held: dict[int, rp.RequestReport] | None = None  #: reports that arrived early, by seq
        self.result: Any = None  #: accumulated output at the current stage
        self.text: str | None = None  #: accumulated text at the current stage (an AR stage that detokenizes)
        self.stop_reason: str | int | None = None  #: what stopped it at the current stage
        #: (id, result) of each finished CFG companion, in companion (id) order
        self.companions: tuple[tuple[int, Any], ...] = ()
        self.error: str | None = None
        #: a streaming-input request's parts fed before its dispatch (sent right after it)
        self.feeds: list[tuple[StageInput, bool]] = []
        self.input_ended = False  #: a streaming-input request's last part was fed


class Stats:
    """What the orchestrator itself dropped (the lifecycle counts what it dropped)."""

    __slots__ = ("after_finished", "duplicates", "misrouted", "unknown_ids", "unknown_results")

    def __init__(self) -> None:
        #: a per-request report from a replica after its own ``Finished`` of that request (a runtime's protocol break)
        self.after_finished = 0
        self.duplicates = 0  #: a per-request report whose seq was already handled
        self.misrouted = 0  #: a report from a replica the request is not bound to
        self.unknown_ids = 0  #: a per-request report under an id the orchestrator never gave (``str(rid)``, say)
        self.unknown_results = 0  #: an abort result nobody waits for (late or duplicated)

    def as_dict(self) -> dict[str, int]:
        """Return the counters by name."""
        return {name: getattr(self, name) for name in self.__slots__}


#: how many recent stage finishes ``Routing`` keeps (a report after its own ``Finished`` comes soon after)
FINISHES_KEPT = 512


class Rpc:
    """A control RPC in flight: the replicas whose answer it waits for, and the first error one gave."""

    __slots__ = ("error", "waiting")

    def __init__(self, waiting: set[tuple[int, int]]) -> None:
        self.waiting = waiting
        self.error: str | None = None


class ReportInHand:
    """The in-order per-request report being fed to the lifecycle, for the observations it causes: a partial
    ``Emitted`` delivers its payload and text, a ``Dropped`` restores the buffers it changed, a ``Rejected`` names
    it. One is made per orchestrator and filled for each report (``rid`` -1: no report in hand, a client call; the
    other fields are then stale, overwritten by the next report)."""

    __slots__ = ("payload", "report", "result_before", "rid", "route", "state_before", "text", "text_before")

    def __init__(self) -> None:
        self.rid = -1
        self.route: Route | None = None
        self.report: rp.Report | None = None
        self.state_before: Any = None  #: the request's lifecycle state before it (a ``ReqState``; ``None``: none)
        self.result_before: Any = None
        self.text_before: str | None = None
        self.payload: Any = None  #: what a partial output carries to the client
        self.text: str | None = None  #: the text it adds


#: the context of an event no report caused (a client call, an abort result): nothing to deliver, undo or name
NO_REPORT = ReportInHand()


class Routing:
    """Every map the orchestrator keeps beside the lifecycle's records, and the ids it hands out."""

    __slots__ = ("abort_callers", "aborts", "by_request_id", "cleanup_aborts", "death", "ended_request_ids",
                 "finish_count", "finished_at_stage", "finished_rids", "live", "loss_causes", "next_call", "next_rid",
                 "pipeline", "request_ids", "round_robin", "routes", "rpcs", "stats", "unknown_id_last")  # fmt: skip

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.routes: dict[int, Route] = {}
        self.live: list[list[bool]] = [[True] * s.replicas for s in pipeline.stages]
        self.round_robin = [0] * len(pipeline.stages)
        self.next_rid = 0
        self.next_call = 0
        #: request id -> (abort id, stage, replica) of its physical abort in flight (the table sends one at a time)
        self.aborts: dict[int, tuple[int, int, int]] = {}
        self.abort_callers: dict[int, list[int]] = {}  #: rid -> abort call ids waiting
        #: physical aborts sent to release a request that already ended (its feed failed): answered to nobody
        self.cleanup_aborts: dict[int, tuple[int, int]] = {}  #: abort id -> (stage, replica)
        self.rpcs: dict[int, Rpc] = {}
        #: the client's own ids of open client requests that have one, both ways (the core keeps int ids)
        self.request_ids: dict[int, str] = {}
        self.by_request_id: dict[str, int] = {}
        #: the client's own ids of ended requests -> the last to have it: an abort under one is a no-op, not refused
        self.ended_request_ids: dict[str, int] = {}
        #: the latest ``FINISHES_KEPT`` stage finishes, a ring: the request, and (stage, replica, seq) of the
        #: ``Finished`` that ended it there. A report of that replica numbered after it broke the runtime's protocol;
        #: any other late report is only late (ORCH-INV-107), a copy of an earlier one only a duplicate. (Lists, not a
        #: dict: the memory is taken once.)
        self.finished_rids: list[int | None] = [None] * FINISHES_KEPT
        self.finished_at_stage: list[tuple[int, int, int] | None] = [None] * FINISHES_KEPT
        self.finish_count = 0  #: finishes noted so far (the next one's place in the ring, modulo its size)
        self.loss_causes: dict[tuple[int, int], str] = {}  #: (stage, replica) -> why its ``ReplicaDied`` comes
        self.stats = Stats()
        self.death: str | None = None  #: why the engine died, where that is known (named by its fatal terminals)
        self.unknown_id_last: str | None = None  #: the last report under an id never given: what, which id, where

    def note_finish(self, rid: int, stage: int, replica: int, seq: int) -> None:
        """Keep that ``replica``'s ``Finished`` numbered ``seq`` ended ``rid`` at ``stage`` (the oldest kept goes)."""
        at = self.finish_count % FINISHES_KEPT
        self.finish_count += 1
        self.finished_rids[at], self.finished_at_stage[at] = rid, (stage, replica, seq)

    def finished_at(self, rid: int, stage: int) -> tuple[int, int] | None:
        """Return (replica, seq) of the ``Finished`` that ended ``rid`` at ``stage``, if it is among those kept."""
        rids, start = self.finished_rids, 0
        while True:
            try:
                at = rids.index(rid, start)
            except ValueError:
                return None
            kept = self.finished_at_stage[at]
            if kept is not None and kept[0] == stage:
                return kept[1], kept[2]
            start = at + 1

    def call_id(self) -> int:
        """Return a new abort or RPC call id."""
        self.next_call += 1
        return self.next_call

    def pick_replica(self, stage: int, route: Route) -> int:
        """Return the replica of ``stage`` to bind ``route`` to: its parent's, for a companion or sample whose parent
        runs there, else the next live one in turn. ``EngineNotRunning`` when none is live."""
        live = self.live[stage]
        if len(live) == 1 and live[0]:
            return 0
        parent = self.routes.get(route.parent) if route.parent >= 0 else None
        if parent is not None and parent.stage == stage and live[parent.replica]:
            return parent.replica  # companions and samples run next to their parent when they can
        for _ in range(len(live)):
            replica = self.round_robin[stage] % len(live)
            self.round_robin[stage] += 1
            if live[replica]:
                return replica
        raise EngineNotRunning(f"stage {stage} has no live replica")

    def with_sampling(self, stage: int, rid: int, route: Route, stage_input: StageInput) -> StageInput:
        """Return ``stage_input`` with the sampling parameters of an AR ``stage``: the prompt's, with the stage's
        overrides from the pipeline file on top; sample ``i`` of an ``n>1`` request is seeded ``seed + i``."""
        spec = self.pipeline.stages[stage]
        if spec.kind is not StageKind.AR:
            return stage_input
        sampling = route.prompt.sampling
        if spec.sampling:
            sampling = attrs.evolve(sampling, **dict(spec.sampling))
        if route.parent >= 0 and not route.companion:
            sampling = sampling.for_sample(rid - dependent_id(route.parent, 0))
        if stage_input.__class__ is not StageInput:  # a subclass keeps its own fields
            return attrs.evolve(stage_input, sampling=sampling)
        # made directly, not with attrs.evolve (which reads the class's fields each call): once per AR dispatch
        return StageInput(stage_input.token_ids, stage_input.multimodal, stage_input.max_tokens, stage_input.text,
                          sampling, stage_input.streaming)
