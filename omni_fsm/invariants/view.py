"""What the monitor keeps per request: the ``View`` of it the history has shown so far."""

from __future__ import annotations

from typing import Any

import attrs

from omni_fsm.invariants import upstream as up
from omni_fsm.spec.vocabulary import Role


@attrs.define(slots=True)
class View:
    """What the history has shown about one request so far."""

    role: Role = Role.CLIENT
    parent: int = -1
    children: tuple[int, ...] = ()  #: n>1 parent: child ids in sample order
    open_children: int = 0
    companions: int = 0
    companions_done: int = 0
    stage: int = -1  #: last stage dispatched to
    forwarded_to: int = -1  #: a forward was just made to this stage
    finished_at: int = -1  #: the runtime reported the request finished at this stage
    done_at: int = -1  #: ... and finished normally (a ``StageFinished``: stop, length, repetition, prompt ignored)
    ignored_at: int = -1  #: its prompt was ignored at this stage (it, or for a parent one of its samples)
    generated: int = 0  #: tokens the runtime reported at the current stage
    status: str = up.WAITING  #: AR status at the current stage
    last_emit_stage: int = -1
    sample_stages: tuple[int, ...] = ()  #: n>1 parent: last stage messaged, per sample
    terminals: int = 0
    abort_requested: bool = False
    abort_sent: int = -1  #: stage a physical abort was sent to (-1: none pending)
    abort_ok: bool = False
    abort_answered: bool = False  #: its open abort got its (ok) answer: another answer to it is one too many
    committed: bool = False  #: its abort was committed: it is over, whatever it is told later
    slot: int = -1  #: stage whose slot it holds
    released: bool = False
    while_sleeping: bool = False  #: submitted while the engine slept
    calls: frozenset[int] = frozenset()  #: the client's abort calls of it not answered yet (kept once released)
    parent_asked: bool = False  #: its parent aborted it and is owed that answer
    replica: int = 0  #: the replica of its stage it was last dispatched to

    def snapshot(self) -> tuple[Any, ...]:
        """Return the view as a hashable tuple, in ``VIEW_FIELDS`` order."""
        return (self.role, self.parent, self.children, self.open_children, self.companions,
                self.companions_done, self.stage, self.forwarded_to, self.finished_at, self.done_at, self.ignored_at,
                self.generated,
                self.status, self.last_emit_stage, self.sample_stages, self.terminals, self.abort_requested,
                self.abort_sent, self.abort_ok, self.abort_answered, self.committed, self.slot, self.released,
                self.while_sleeping, self.calls, self.parent_asked, self.replica)

    @property
    def over(self) -> bool:
        """Return whether the request is over for the client (terminal, committed abort, or dropped)."""
        return self.released or self.terminals > 0 or self.committed

    def settle(self) -> None:
        """Forget what no rule reads once the request's state is dropped (bounded memory)."""
        keep = (self.role, self.parent, self.terminals, self.calls)
        self.__init__()  # type: ignore[misc]
        self.role, self.parent, self.terminals, self.calls, self.released = (*keep, True)


#: The order of ``View.snapshot()``'s fields (the explorer reads snapshots by these names).
VIEW_FIELDS = tuple(f.name for f in attrs.fields(View))
