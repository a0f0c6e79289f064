"""Which invariants a bound lets fire: per invariant, what a history must contain before it can break.

An exploration judges every edge with every rule, but a rule can only fire on a history that
contains what it speaks of: a rule about CFG companions needs a bound with companions, one about
control RPCs the ``control`` family, one about a failure's scope two requests. ``NEEDS`` says it
per invariant, from the rule's words; ``reachable(bound)`` splits the invariants into those the
bound can make fire and those it cannot, naming for each of these the smallest bound that can
(``Needs.bound()``), or none where no ``Spec`` can break the rule at all (``explorable=False``: the
explorer varies only the table, and such a rule is about what a runtime or a trace gets wrong).
The explorer prints the split; a test runs each named bound on a ``Spec`` that breaks the
invariant and sees it fire.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from omni_fsm.explore.world import Bound
from omni_fsm.spec.vocabulary import StageKind


@attrs.frozen
class Needs:
    """What a bound must allow before an invariant can fire (each field: the least that does)."""

    why: str  #: in words: what the rule speaks of that a history must contain
    families: frozenset[str] = frozenset()  #: event families the breaking history uses (beyond ``BASIC``)
    requests: int = 1
    stages: int = 1
    final_stages: int = 1
    n: int = 1
    companions: int = 0
    diffusion: bool = False  #: a diffusion stage (the last one: a final-output stage, as in image pipelines)
    #: more slot holders than a stage has slots (requests, or a family's samples or companions, beyond capacity)
    beyond_capacity: bool = False
    #: ``False``: no ``Spec`` makes it fire at any bound (only a core, runtime or trace can): ``why`` says why
    explorable: bool = True

    def met_by(self, bound: Bound) -> bool:
        """Return whether ``bound`` allows every history these needs call for (never, if not explorable)."""
        kinds = bound.pipeline()[0]
        holders = bound.requests * max(bound.n, 1 + bound.companions)  # at one stage at once
        return (self.explorable and self.families <= bound.families and bound.requests >= self.requests
                and bound.stages >= self.stages and bound.final_stages >= self.final_stages
                and bound.n >= self.n and bound.companions >= self.companions
                and (not self.diffusion or StageKind.DIFFUSION in kinds)
                and (not self.beyond_capacity or holders > bound.capacity))  # fmt: skip

    def bound(self) -> Bound:
        """Return the smallest bound that meets these needs (the explorer's basic families added, one slot).

        For an entry that is not explorable: the smallest bound whose histories hold what the rule speaks
        of, though no ``Spec`` breaks it there (``met_by`` says no).
        """
        kinds = (*(StageKind.AR,) * (self.stages - 1), StageKind.DIFFUSION) if self.diffusion else ()
        return Bound(requests=self.requests, stages=self.stages, final_stages=self.final_stages, n=self.n,
                     companions=self.companions, capacity=1, max_tokens=1, kinds=kinds,
                     families=BASIC | self.families)  # fmt: skip


#: The families every bound that the explorer names starts from: a request submitted, run, ended.
BASIC: frozenset[str] = frozenset({"submit", "schedule", "output", "finish"})


def _fams(*names: str) -> frozenset[str]:
    return frozenset(names)


#: Per invariant ID, what a history must contain before the invariant can fire.
NEEDS: Mapping[str, Needs] = {
    # -- ORCH-INV-001..099: routing ----------------------------------------------------------------
    "ORCH-INV-001": Needs("a forward and the finish at its stage that must come first: two stages", stages=2),
    "ORCH-INV-002": Needs("a forward, whose destination must be the next stage of the pipeline: two stages",
                          stages=2),
    # -- ORCH-INV-100..199: request state and ordering ------------------------------------------------
    "ORCH-INV-100": Needs("work for a request that ended while its stage still held it: an abort committed "
                          "(the core keeps no ended record live otherwise)", families=_fams("abort")),
    "ORCH-INV-101": Needs("a request that ends: one request, one stage"),
    "ORCH-INV-102": Needs("a request's messages to the client and its terminal: one request, one stage"),
    "ORCH-INV-103": Needs("a finish whose stop kind the terminal's finish reason must carry (a row that ends "
                          "it in another finished state breaks it): one request, one stage"),
    "ORCH-INV-104": Needs("a dependent the engine creates that could reach the client under its own id: a CFG "
                          "companion (an n>1 child's messages always carry its parent's id)", companions=1),
    "ORCH-INV-105": Needs("an n>1 parent and its children: two samples", n=2),
    "ORCH-INV-106": Needs("answers to calls: control RPCs and their results (no request needed; an abort's "
                          "answer is judged too, with abort)", families=_fams("control"), requests=0),
    "ORCH-INV-107": Needs("a runtime report about a request that already ended: the core drops it before the "
                          "table (policy.INTAKE: an id it no longer tracks), which no Spec changes; only a core, "
                          "a driver or a runtime that acts on it breaks the rule (B3, B10): judged on traces and "
                          "runtimes only", families=_fams("late"), explorable=False),
    "ORCH-INV-108": Needs("an admission while the engine is paused or asleep: the control RPCs that pause or "
                          "sleep it", families=_fams("control")),
    "ORCH-INV-109": Needs("more requests holding a stage's slots than its capacity: two requests, one slot",
                          requests=2, beyond_capacity=True),
    # -- ORCH-INV-200..299: failure, cancellation, cleanup ----------------------------------------------
    "ORCH-INV-200": Needs("an abort of an AR request at a final-output stage after it generated",
                          families=_fams("abort")),
    "ORCH-INV-201": Needs("a diffusion stage's output or abort reaching the client: a diffusion stage",
                          diffusion=True),
    "ORCH-INV-202": Needs("an abort, and the physical abort its commit must wait for", families=_fams("abort")),
    "ORCH-INV-203": Needs("the abort of an n>1 parent and its children: two samples, abort",
                          families=_fams("abort"), n=2),
    "ORCH-INV-204": Needs("a CFG companion and the forward it gates: a companion, two stages (its abort and its "
                          "loss break the rule too, with abort or failure)", companions=1, stages=2),
    "ORCH-INV-205": Needs("a worker's exception in a control RPC: control RPCs (no request needed)",
                          families=_fams("control"), requests=0),
    "ORCH-INV-206": Needs("a request-scoped failure and another request it must not end: two requests, failure",
                          families=_fams("failure"), requests=2),
    "ORCH-INV-207": Needs("several final-output stages, of which only the last ends the request: two stages, "
                          "both final-output", stages=2, final_stages=2),
    "ORCH-INV-208": Needs("a request that ends, on any path: one request"),
    "ORCH-INV-209": Needs("an abort request and the physical abort that must end the request",
                          families=_fams("abort")),
    "ORCH-INV-210": Needs("the engine dying while a request is open", families=_fams("death")),
    "ORCH-INV-211": Needs("a shutdown while a request is open", families=_fams("shutdown")),
    # -- ORCH-INV-300..399: shutdown ordering -----------------------------------------------------------
    "ORCH-INV-300": Needs("a shutdown: the orchestrator and the runtimes stopping (no request needed)",
                          families=_fams("shutdown"), requests=0),
    # -- AR-INV: the autoregressive runtime ----------------------------------------------------------------
    "AR-INV-001": Needs("an AR request's sub-states as its runtime reports them: one request at an AR stage"),
    "AR-INV-002": Needs("a request reaching a later stage, through a forward or not: two stages", stages=2),
    "AR-INV-003": Needs("a runtime's report acted on for a stage the request is not assigned to: one request "
                        "(never dispatched there, or moved on)"),
    "AR-INV-200": Needs("a request that ends, on any path, and the slot it held: one request"),
}


def reachable(bound: Bound) -> tuple[tuple[str, ...], dict[str, Bound | None]]:
    """Return (the invariants ``bound`` can make fire, {every other invariant: the smallest bound that can, or
    ``None`` where none can: no ``Spec`` breaks it, ``NEEDS[inv].why`` says why})."""
    can = tuple(sorted(inv for inv, needs in NEEDS.items() if needs.met_by(bound)))
    cannot = {inv: needs.bound() if needs.explorable else None
              for inv, needs in sorted(NEEDS.items()) if not needs.met_by(bound)}  # fmt: skip
    return can, cannot


__all__ = ["BASIC", "NEEDS", "Needs", "reachable"]
