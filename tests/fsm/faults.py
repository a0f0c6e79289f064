"""Historic lifecycle bugs (historic-bugs.md) re-injected as faulty variants of the table.

Each function returns a ``Spec`` that differs from ``SPEC`` in exactly the way the bug did.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from omni_fsm import ON_TERMINAL, PARKED, SPEC, Effect, ReqState, Row, Spec
from omni_fsm import events as ev

S = ReqState


def _edit(pick: Callable[[Row], bool], change: Callable[[Row], list[Row]], spec: Spec = SPEC) -> Spec:
    rows: list[Row] = []
    hits = 0
    for row in spec.rows:
        if pick(row):
            hits += 1
            rows.extend(change(row))
        else:
            rows.append(row)
    assert hits, "the fault matched no row: the table changed under it"
    return attrs.evolve(spec, rows=tuple(rows))


def b1_parent_abort_misses_children() -> Spec:
    """vllm#14326: aborting an n>1 parent does not reach its children."""
    return _edit(lambda r: r.source is S.AWAITING_CHILDREN and r.event is ev.Abort,
                 lambda r: [attrs.evolve(r, effects=tuple(e for e in r.effects if e is not Effect.ABORT_CHILDREN))])


def b2_last_child_keeps_parent() -> Spec:
    """vllm#51629: the children end but the parent record is never dropped."""
    return _edit(lambda r: r.event is ev.ChildEnded and "last_child" in r.when,
                 lambda r: [attrs.evolve(r, target=r.source)])


def b4_parked_needs_a_second_slot() -> Spec:
    """vllm#53130: a parked request counts against the cap and needs yet another slot to resume."""
    return _edit(lambda r: r.source in PARKED and r.event is ev.InputReady,
                 lambda r: [attrs.evolve(r, when=(*r.when, "slot_free")), attrs.evolve(r, target=r.source)])


def b5_abort_misses_chunk_wait() -> Spec:
    """vllm-omni#2848: abort removes requests by status and misses the wait for an input chunk."""
    return _edit(lambda r: r.source is S.WAITING_FOR_CHUNK and r.event is ev.Abort,
                 lambda r: [attrs.evolve(r, target=r.source, effects=(Effect.ACK_ABORT,))])


def b6_zombie_after_abort() -> Spec:
    """vllm-omni#3736: after the abort landed, the freed request is put back into the queue."""
    return _edit(lambda r: r.source is S.ABORTING and r.event is ev.AbortDone,
                 lambda r: [attrs.evolve(r, target=S.WAITING)])


def b6_abort_keeps_its_slot() -> Spec:
    """vllm-omni#3774: after exactly max_num_seqs aborts new requests stall: aborts keep slots."""
    return attrs.evolve(SPEC, holds_slot=SPEC.holds_slot | {S.FINISHED_ABORTED})


def b7_terminal_keeps_state() -> Spec:
    """vllm-omni#3312: aborts never drop the per-request state."""
    return attrs.evolve(SPEC, on_terminal=tuple(e for e in ON_TERMINAL if e is not Effect.RELEASE))
