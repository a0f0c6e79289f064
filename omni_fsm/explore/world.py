"""What the explorer lets happen: the event families, the bound, and the steps enabled in a state.

A step is an event, or a short macro of events applied back to back. A family's steps are listed
from its records' and views' snapshots (rids relative to the family), the engine-wide steps from
the engine's snapshot. Which steps are *progress* (what liveness may use) is decided here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from omni_fsm.engine.core import fanout
from omni_fsm.errors import ConfigError
from omni_fsm.spec import events as ev
from omni_fsm.spec.policy import STAGE_LIVE
from omni_fsm.spec.record import ENGINE_FIELDS, RECORD_FIELDS, Record
from omni_fsm.spec.vocabulary import LIVE, ControlMethod, ReqState, StageKind, StopKind

if TYPE_CHECKING:  # only a type here: the explorer builds the scratch core (tests swap its class there)
    from omni_fsm.engine.core import Lifecycle

FAMILIES: dict[str, tuple[type[ev.Event], ...]] = {
    "submit": (ev.Submit,),
    "schedule": (ev.Scheduled, ev.Preempted),
    "park": (ev.AwaitGrammar, ev.AwaitRemoteKVs, ev.AwaitStreamingReq, ev.AwaitChunk, ev.InputReady),
    "output": (ev.StageOutput,),
    "finish": (ev.StageFinished,),
    "abort": (ev.Abort, ev.AbortDone, ev.AbortFailed),
    "abort_race": (),  # reports arriving while a physical abort is in flight (else abort + result are one step)
    "failure": (ev.StageFailed, ev.ReplicaLost),
    "engine_abort": (ev.StageAborted,),  # the engine ends a request itself (pause in abort mode)
    "death": (ev.EngineDied,),
    "shutdown": (ev.Shutdown,),
    "control": (ev.Control, ev.RpcDone, ev.RpcFailed),
    "late": (),  # duplicates and reports for ended requests: must be dropped
    "illegal": (),  # runtime reports the table has no row for: must fail only that request
}
#: Every family but ``abort_race``: the default bound must finish in under a minute.
DEFAULT_FAMILIES: frozenset[str] = frozenset(FAMILIES) - {"abort_race"}
#: Events a fair engine (and its operator) always eventually produce: what liveness may use.
PROGRESS: frozenset[type[ev.Event]] = frozenset(
    {ev.Scheduled, ev.InputReady, ev.StageOutput, ev.StageFinished, ev.AbortDone, ev.Control, ev.RpcDone}
)
#: the stage reports a late copy of which the family "late" sends (outputs and finishes carry fields: made apart)
_STAGE_REPORTS = tuple(e for e in ev.STAGE_REPORTS if e not in (ev.StageOutput, ev.StageFinished))
_CONTROL_IDS = {m: i + 1 for i, m in enumerate(ControlMethod)}
#: One step of the search: an event, or a short macro of events applied back to back.
Step = ev.Event | tuple[ev.Event, ...]
#: A family's part of a state: its records' and views' snapshots, by rid relative to the family.
Family = tuple[tuple[tuple[int, tuple[Any, ...]], ...], tuple[tuple[int, tuple[Any, ...]], ...]]


@attrs.frozen
class Bound:
    """What to explore: how many requests, the pipeline's shape, and which event families."""

    requests: int = 3
    stages: int = 2
    final_stages: int = 1  #: the last stage, plus the first ``final_stages - 1`` ones
    n: int = 1
    companions: int = 0
    capacity: int = 2
    max_tokens: int = 2  #: outputs per request and stage
    kinds: tuple[StageKind, ...] = ()  #: default: every stage AR
    families: frozenset[str] = DEFAULT_FAMILIES

    def pipeline(self) -> tuple[tuple[StageKind, ...], tuple[bool, ...]]:
        """Return (stage kinds, final-output flags)."""
        if self.stages < 1:
            raise ConfigError("stages must be at least 1")
        kinds = self.kinds or (StageKind.AR,) * self.stages
        if len(kinds) != self.stages:
            raise ConfigError(f"{len(kinds)} stage kinds given for {self.stages} stages")
        if not 1 <= self.final_stages <= self.stages:
            raise ConfigError("final_stages must be between 1 and the number of stages")
        final = tuple(i == self.stages - 1 or i < self.final_stages - 1 for i in range(self.stages))
        return kinds, final

    @property
    def block(self) -> int:
        """Return the number of internal ids one family uses."""
        return 1 + fanout(self.n, self.companions)


# -- the steps enabled in a state ------------------------------------------------------------------
_REC_STATE, _REC_STAGE, _REC_TOKENS = (RECORD_FIELDS.index(f) for f in ("state", "stage", "tokens"))
_ENG_RPCS = ENGINE_FIELDS.index("pending_rpcs")


def family_events(bound: Bound, stop_kinds: tuple[StopKind, ...], eng: tuple[Any, ...], family: Family,
                  lc: Lifecycle) -> list[Step]:
    """Return the steps one family (its records and views, rids relative) can take over engine snapshot ``eng``.

    ``lc`` is the explorer's scratch core: it answers whether the table has a row for a runtime report.
    """
    b, fams = bound, bound.families
    recs, views = family
    if not views:
        return [ev.Submit(0, b.n, b.companions)] if "submit" in fams else []
    out: list[Step] = []
    live = {off for off, _ in recs}
    for off, snap in recs:
        state, stage, tokens = snap[_REC_STATE], snap[_REC_STAGE], snap[_REC_TOKENS]
        if state in _UNBOUND:
            if "abort" in fams:
                out.append(ev.Abort(off))
            continue
        atomic_abort = "abort_race" not in fams and state is not ReqState.ABORTING
        out.extend(cls(off, stage) for cls in _STAGE_REPORTS
                   if _family_of(cls) in fams and not (atomic_abort and cls in _ABORT_RESULTS))
        if "output" in fams and tokens < b.max_tokens:
            out.append(ev.StageOutput(off, stage, 1))
        out.extend(ev.StageFinished(off, stage, k) for k in stop_kinds)
        if "abort" in fams and atomic_abort:  # the abort and its physical result, one step
            out.extend((ev.Abort(off), result(off, stage)) for result in _ABORT_RESULTS)
        elif "abort" in fams:
            out.append(ev.Abort(off))
        if "late" in fams and stage > 0:
            out.append(ev.StageFinished(off, stage - 1))
    if "late" in fams:
        for off, _ in views:
            if off not in live:
                out.append(ev.StageOutput(off, 0, 1))
                out.append(ev.AbortDone(off, 0))
    legal: list[Step] = []
    illegal: dict[int, Step] = {}  # every illegal report fails its request alike: one per request
    for step in out:
        if _illegal(lc, eng, recs, step):
            illegal.setdefault(step.rid, step)  # type: ignore[union-attr]
        else:
            legal.append(step)
    return legal + list(illegal.values()) if "illegal" in fams else legal


def _illegal(lc: Lifecycle, eng: tuple[Any, ...], recs: Any, event: Step) -> bool:
    """Return whether the table has no row for this runtime report (it would fail the request)."""
    if not isinstance(event, ev.StageEvent) or event.ORIGIN != ev.RUNTIME:  # a macro step is no event
        return False
    snap = dict(recs).get(event.rid)
    if snap is None or snap[_REC_STAGE] != event.stage:
        return False  # late or stale: dropped, not illegal
    lc.engine.load(eng)
    rec = Record(event.rid)
    rec.load(snap)
    return lc.table.select(rec, event, lc.engine) is None


def engine_events(bound: Bound, eng: tuple[Any, ...]) -> list[Step]:
    """Return the engine-wide steps enabled over engine snapshot ``eng``."""
    fams = bound.families
    out: list[Step] = []
    pending = dict(eng[_ENG_RPCS])
    if "control" in fams and not pending:  # a control call and its result, one at a time
        for method, cid in _CONTROL_IDS.items():
            out.append((ev.Control(cid, method), ev.RpcDone(cid)))
            out.append((ev.Control(cid, method), ev.RpcFailed(cid)))
    if "death" in fams:
        out.append(ev.EngineDied())
    if "shutdown" in fams:
        out.append(ev.Shutdown())
    return out


#: Live states not bound to a stage: only the client can act on them (the rest is internal).
_UNBOUND = LIVE - STAGE_LIVE - {ReqState.NEW}
_ABORT_RESULTS = (ev.AbortDone, ev.AbortFailed)


def _family_of(cls: type[ev.Event]) -> str:
    for name, members in FAMILIES.items():
        if cls in members:
            return name
    raise KeyError(cls)


def is_progress(step: Step) -> bool:
    """Return whether every event of ``step`` is progress (in ``PROGRESS``)."""
    if isinstance(step, ev.Event):
        return type(step) in PROGRESS
    return all(type(e) in PROGRESS for e in step)
