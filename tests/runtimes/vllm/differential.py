"""AR-INV-001 differentially: the upstream scheduler and an Omni scheduler on the same program, call by call.

``facts_of(program, setup, scheduler_mixin)`` runs a contract program (``contract.execute``) and records, after
every ``schedule()`` and ``update_from_output()`` call, each tracked request's status, KV block ids and computed
tokens, the pool's free blocks, and the prefix-cache hits found in that call; and every status move as it
happens. ``differences(upstream, omni)`` returns the first call at which the two differ (``[]``: identical step
by step). The Omni scheduler runs with a chunk processor that asks for every token update, so its own work runs
on every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from omni_runtime.runtimes.vllm._config import free_blocks
from omni_runtime.runtimes.vllm.omni_scheduler import OmniSchedulingMixin
from tests.runtimes.vllm import contract
from tests.runtimes.vllm.chunk_processors import TokenUpdates

#: the documented differences between the Omni scheduler and vLLM's (docs/vllm.md, "The Omni scheduler"): none
#: in request-state or KV facts; its chunk queue is not scheduler state
DOCUMENTED_DIFFERENCES: tuple[str, ...] = ()


class OmniWithProcessor(OmniSchedulingMixin):
    """The Omni scheduler with a token-update chunk processor on (its extra work runs on every step)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chunk_processor = TokenUpdates()


class PreemptsOldest(OmniWithProcessor):
    """FAULTY: schedules the running queue oldest last, so under KV pressure it preempts the oldest request
    instead of the newest. Every move it makes is an upstream move: only a side-by-side comparison sees it."""

    def schedule(self) -> Any:
        self.running = self.running[::-1]  # type: ignore[has-type]
        return super().schedule()  # type: ignore[misc]


@attrs.frozen
class Recorded:
    """One program's run: per scheduler call, its facts; per request, its moves; and the contract's verdict."""

    calls: list[tuple[Any, ...]]
    moves: dict[int, list[tuple[Any, Any]]]
    chunks: int
    broken: list[str]


def _snapshot(what: str, scheduler: Any, hits: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    manager = scheduler.kv_cache_manager
    requests = tuple(sorted((rid, r.status.name, tuple(map(tuple, manager.get_block_ids(rid))), r.num_computed_tokens)
                            for rid, r in scheduler.requests.items()))  # fmt: skip
    facts = (what, requests, free_blocks(scheduler)[0], tuple(hits))
    hits.clear()
    return facts


def facts_of(program: Sequence[contract.Op], setup: contract.Setup, scheduler_mixin: type | None) -> Recorded:
    """Run ``program`` on vLLM's scheduler (``scheduler_mixin`` in front of it, ``None``: vLLM's own)."""
    calls: list[tuple[Any, ...]] = []
    hits: list[tuple[Any, ...]] = []

    def observe(run: Any) -> None:
        scheduler = run.runtime.scheduler
        schedule, update = scheduler.schedule, scheduler.update_from_output
        computed = scheduler.kv_cache_manager.get_computed_blocks

        def scheduled() -> Any:
            out = schedule()
            calls.append(_snapshot("schedule", scheduler, hits))
            return out

        def updated(so: Any, mro: Any) -> Any:
            out = update(so, mro)
            calls.append(_snapshot("update", scheduler, hits))
            return out

        def computed_blocks(request: Any) -> Any:
            found = computed(request)
            hits.append((request.request_id, *found[1:]))  # (tokens found in the prefix cache, ...)
            return found

        scheduler.schedule, scheduler.update_from_output = scheduled, updated
        scheduler.kv_cache_manager.get_computed_blocks = computed_blocks

    run = contract.execute(program, setup, scheduler_mixin, observe=observe)
    chunks = len(getattr(run.runtime.scheduler, "chunks", ()))
    return Recorded(calls, run.moves, chunks, run.broken)


def differences(upstream: Recorded, omni: Recorded) -> list[str]:
    """Return where the two runs differ: the first differing scheduler call, and any request whose moves differ."""
    problems = []
    for i, (a, b) in enumerate(zip(upstream.calls, omni.calls, strict=False)):
        if a != b:
            problems.append(f"AR-INV-001 call {i} ({a[0]}): upstream {a[1:]} != omni {b[1:]}")
            break
    if len(upstream.calls) != len(omni.calls):
        problems.append(f"AR-INV-001: upstream made {len(upstream.calls)} scheduler calls, omni {len(omni.calls)}")
    for rid in sorted(upstream.moves.keys() | omni.moves.keys()):
        if upstream.moves.get(rid) != omni.moves.get(rid):
            problems.append(f"AR-INV-001 request {rid}: upstream moved {upstream.moves.get(rid)}, "
                            f"omni {omni.moves.get(rid)}")  # fmt: skip
    return problems
