"""Historic lifecycle bugs (historic-bugs.md) re-injected into our core: one definition per bug.

Each ``bN_*`` function returns a ``Spec`` that differs from ``SPEC`` in exactly the way the bug
did, except B13, whose fault is in an effect's body: ``b13_empty_terminal_skipped`` switches it
into the effect functions ``SPEC`` carries for one test. ``edit_rows`` is the one table editor the tests share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs
import pytest

from omni_fsm import ON_TERMINAL, PARKED, SPEC, Effect, EngineState, ReqState, Row, Spec
from omni_fsm import events as ev
from omni_fsm.explore.explorer import Bound

S = ReqState

#: The explorer's event families that every historic-bug bound starts from.
SMALL = frozenset({"submit", "schedule", "output", "finish", "abort"})
#: B4 (an admission deadlock) shows at one stage with one slot once requests can park.
B4_BOUND = Bound(requests=1, stages=1, capacity=1, families=SMALL | {"park"})


def edit_rows(pick: Callable[[Row], bool], change: Callable[[Row], list[Row]], spec: Spec = SPEC,
              table: Literal["rows", "engine_rows"] = "rows") -> Spec:  # fmt: skip
    """Return ``spec`` with each row of ``table`` that ``pick`` matches replaced by ``change(row)``."""
    rows: list[Row] = []
    hits = 0
    for row in getattr(spec, table):
        if pick(row):
            hits += 1
            rows.extend(change(row))
        else:
            rows.append(row)
    assert hits, "the fault matched no row: the table changed under it"
    return attrs.evolve(spec, **{table: tuple(rows)})


def _without_effect(effect: Effect) -> Callable[[Row], list[Row]]:
    return lambda r: [attrs.evolve(r, effects=tuple(e for e in r.effects if e is not effect))]


def b1_parent_abort_misses_children() -> Spec:
    """vllm#14326: aborting an n>1 parent does not reach its children."""
    return edit_rows(lambda r: r.source is S.AWAITING_CHILDREN and r.event is ev.Abort,
                     _without_effect(Effect.ABORT_CHILDREN))


def b2_last_child_keeps_parent() -> Spec:
    """vllm#51629: the children end but the parent record is never dropped."""
    return edit_rows(lambda r: r.event is ev.ChildEnded and "last_child" in r.when,
                     lambda r: [attrs.evolve(r, target=r.source)])


def b4_parked_needs_a_second_slot() -> Spec:
    """vllm#53130: a parked request counts against the cap and needs yet another slot to resume."""
    spec = edit_rows(lambda r: r.source in PARKED and r.event is ev.InputReady,
                     lambda r: [attrs.evolve(r, when=(*r.when, "slot_free")), attrs.evolve(r, target=r.source)])
    return attrs.evolve(spec, holds_slot=spec.holds_slot | PARKED)


def b5_abort_misses_chunk_wait() -> Spec:
    """vllm-omni#2848: abort removes requests by status and misses the wait for an input chunk."""
    return edit_rows(lambda r: r.source is S.WAITING_FOR_CHUNK and r.event is ev.Abort,
                     lambda r: [attrs.evolve(r, target=r.source, effects=(Effect.ACK_ABORT,))])


def b6_zombie_after_abort() -> Spec:
    """vllm-omni#3736: after the abort landed, the freed request is put back into the queue."""
    return edit_rows(lambda r: r.source is S.ABORTING and r.event is ev.AbortDone,
                     lambda r: [attrs.evolve(r, target=S.WAITING)])


def b6_abort_keeps_its_slot() -> Spec:
    """vllm-omni#3774: after exactly max_num_seqs aborts new requests stall: aborts keep slots."""
    return attrs.evolve(SPEC, holds_slot=SPEC.holds_slot | {S.FINISHED_ABORTED})


def b7_terminal_keeps_state() -> Spec:
    """vllm-omni#3312: aborts never drop the per-request state."""
    return attrs.evolve(SPEC, on_terminal=tuple(e for e in ON_TERMINAL if e is not Effect.RELEASE))


def b8_commit_before_physical_abort() -> Spec:
    """vllm-omni#6367: an abort of a running request is committed (terminal sent) before the engine aborted."""
    early = (Effect.ACK_ABORT, Effect.SEND_ABORT, Effect.COMMIT_ABORT)
    return edit_rows(lambda r: r.source is S.RUNNING and r.event is ev.Abort,
                     lambda r: [attrs.evolve(r, target=S.FINISHED_ABORTED, effects=early)])


def b9_engine_death_leaves_requests_open() -> Spec:
    """vllm-omni#322: a fatal engine failure does not end the in-flight requests."""
    return edit_rows(lambda r: r.event is ev.EngineDied, _without_effect(Effect.FAIL_ALL_OPEN), table="engine_rows")


def b11_rpc_worker_error_kills_the_engine() -> Spec:
    """vllm-omni#7685: a worker error in a control RPC takes the engine, and every open request, down."""
    return edit_rows(lambda r: r.event is ev.RpcFailed,
                     lambda r: [attrs.evolve(r, target=EngineState.DEAD, effects=(*r.effects, Effect.FAIL_ALL_OPEN))],
                     table="engine_rows")  # fmt: skip


def b13_empty_terminal_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm#19536: the terminal message is skipped when it carries no tokens (a prompt ignored as too long)."""
    real = SPEC.effects[Effect.EMIT_TERMINAL]

    def skip_empty(lc: Any, rec: Any, event: Any, source: Any, out: Any) -> None:
        if rec.tokens:
            real(lc, rec, event, source, out)

    monkeypatch.setitem(SPEC.effects, Effect.EMIT_TERMINAL, skip_empty)


def cross_failure() -> Spec:
    """Not a historic bug: a request's stage failure also fails every other open request (the request's
    failure rows gain the engine-wide fan-out ``FAIL_ALL_OPEN``): ORCH-INV-206, seen only when the explorer
    computes a step on every request, not on its family alone."""
    return edit_rows(lambda r: r.event is ev.StageFailed,
                     lambda r: [attrs.evolve(r, effects=(*r.effects, Effect.FAIL_ALL_OPEN))])


#: ``cross_failure()`` as a module attribute, for ``omni-fsm explore --spec tests.fsm.faults:CROSS_FAILURE``.
CROSS_FAILURE = cross_failure()
