"""The sweep: a set of small bounds, explored one after another, that together let every invariant a ``Spec``
can break fire (``specs/sweep.toml``, read by the command line: ``omni_fsm.cli.sweep.load``; ``sweep`` runs them).

No one bound can: a rule about CFG companions needs companions, one about an ``n>1`` parent's samples two
samples, one about several final-output stages two of them, and each of these multiplies the states of every
other family. So each bound of the sweep is small and aimed: the default bound and an abort-race bound for
what needs several requests, one bound per dependent kind (companions, samples), one with a diffusion stage,
one with two final-output stages. ``reachable_in(bounds)`` is the union of what each can make fire
(``omni_fsm.explore.reach``), with every invariant left out named and why.

Pure, as ``explore`` is: the caller reads the file and prints; ``sweep`` only explores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import attrs

from omni_fsm.explore.explorer import Bound, Report, explore
from omni_fsm.explore.reach import NEEDS, reachable
from omni_fsm.spec.table import SPEC, Spec


@attrs.frozen
class SweepBound:
    """One bound of the sweep: its name, what it is for, the bound, and how many states it has on ``SPEC``."""

    name: str
    why: str
    bound: Bound
    #: the states this bound has on the project's ``SPEC`` (what a partial sweep measures its share against)
    states: int


@attrs.frozen
class SweepReport:
    """What a sweep found and did: each bound's report, in order; the bounds it did not reach when stopped."""

    runs: tuple[tuple[SweepBound, Report], ...]
    not_run: tuple[SweepBound, ...]
    seconds: float

    @property
    def states(self) -> int:
        """Return the distinct states, summed over the bounds explored."""
        return sum(r.states for _, r in self.runs)

    @property
    def edges(self) -> int:
        """Return the steps taken, summed over the bounds explored."""
        return sum(r.edges for _, r in self.runs)

    @property
    def evaluations(self) -> int:
        """Return the core's and the monitor's calls, summed over the bounds explored."""
        return sum(sum(r.evaluations.values()) for _, r in self.runs)

    @property
    def violations(self) -> int:
        """Return the counterexamples found (a liveness one included), summed over the bounds explored."""
        return sum(len(r.violations) + (r.stuck is not None) for _, r in self.runs)

    @property
    def partial(self) -> bool:
        """Return whether some bound was stopped before it had covered every state, or never run."""
        return bool(self.not_run) or any(r.partial for _, r in self.runs)

    @property
    def ok(self) -> bool:
        """Return whether every bound explored held (no invariant broke, liveness held where checked)."""
        return all(r.ok for _, r in self.runs)

    def share(self) -> float:
        """Return the share of the sweep's recorded states (``SweepBound.states``) its runs covered (at most 1)."""
        total = sum(b.states for b, _ in self.runs) + sum(b.states for b in self.not_run)
        covered = sum(min(r.states, b.states) for b, r in self.runs)
        return covered / total if total else 1.0


def reachable_in(bounds: Sequence[Bound]) -> tuple[tuple[str, ...], dict[str, Bound | None]]:
    """Return (the invariants some bound of ``bounds`` can make fire, {every other: the smallest bound that can,
    or ``None`` where no ``Spec`` can break it}): ``reach.reachable`` over a set of bounds."""
    can = sorted({inv for b in bounds for inv in reachable(b)[0]})
    cannot = {inv: (needs.bound() if needs.explorable else None) for inv, needs in sorted(NEEDS.items())
              if inv not in can}  # fmt: skip
    return tuple(can), cannot


def sweep(bounds: Sequence[SweepBound], spec: Spec = SPEC, *, liveness: bool = True, workers: int = 1,
          stop: Callable[[], str | None] | None = None, max_states: int | None = None, first_violation: bool = False,
          on_bound: Callable[[int, SweepBound], None] | None = None,
          on_report: Callable[[int, SweepBound, Report], None] | None = None,
          progress: Callable[[int, int, float], None] | None = None,
          on_phase: Callable[[str], None] | None = None) -> SweepReport:  # fmt: skip
    """Explore each bound in turn on ``spec``; return the sweep's report (pure: no I/O).

    ``stop()`` is asked as ``explore`` asks it; once it gave a reason, the bound it stopped is reported partial
    and the bounds after it are not run. ``max_states`` stops each bound at that many states, ``first_violation``
    at its first violation (the next bounds still run). ``on_bound(i, b)`` is told before bound ``i`` starts,
    ``on_report(i, b, report)`` after it ended; ``progress`` and ``on_phase`` are each bound's ``explore``
    callbacks.
    """
    start = time.perf_counter()
    runs: list[tuple[SweepBound, Report]] = []
    stopped: list[str] = []

    def asked() -> str | None:
        why = None if stop is None else stop()
        if why is not None:
            stopped.append(why)
        return why

    for i, sb in enumerate(bounds):
        if on_bound is not None:
            on_bound(i, sb)
        report = explore(sb.bound, spec, liveness=liveness, workers=workers, stop=asked, progress=progress,
                         on_phase=on_phase, max_states=max_states, first_violation=first_violation)  # fmt: skip
        runs.append((sb, report))
        if on_report is not None:
            on_report(i, sb, report)
        if stopped:  # a limit or a signal: no more bounds
            return SweepReport(tuple(runs), tuple(bounds[i + 1 :]), time.perf_counter() - start)
    return SweepReport(tuple(runs), (), time.perf_counter() - start)


def by_name(bounds: Sequence[SweepBound]) -> Mapping[str, SweepBound]:
    """Return the sweep's bounds by name."""
    return {b.name: b for b in bounds}


__all__ = ["SweepBound", "SweepReport", "by_name", "reachable_in", "sweep"]
