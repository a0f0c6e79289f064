"""What the simulator does besides its plain work: sub-state behaviour and injected faults."""

from __future__ import annotations

import attrs


@attrs.frozen
class SimConfig:
    """Rates are per request (or per report, for the report-stream faults); all default to off.

    Contract-legal behaviour: ``preempt``, ``park``, ``chunk_wait``, ``prompt_ignored``,
    ``no_output``, ``stage_fail``, ``abort_fail`` (reported truthfully), ``rpc_error``, replica and
    engine death. Contract-breaking report-stream faults (the orchestrator tolerates them, the
    conformance kit flags them): ``delay``, ``duplicate``, ``reorder``. A historic scheduler bug,
    for tests that re-inject it (nothing can repair it: the sync engine's watchdog ends the wait,
    the monitor names the requests left without a terminal): ``parked_needs_free_slot``.
    """

    preempt: float = 0.0  #: AR: preempted once mid-generation
    park: float = 0.0  #: AR: waits for a grammar / remote KVs before running
    chunk_wait: float = 0.0  #: AR: runs, then waits for an input chunk once
    prompt_ignored: float = 0.0  #: AR: prompt too long: finishes from the queue with nothing generated
    no_output: float = 0.0  #: the stage finishes the request with no output
    stage_fail: float = 0.0  #: the stage fails the request (request-scoped)
    abort_fail: float = 0.0  #: the first physical abort of a request fails (and it keeps running)
    rpc_error: float = 0.0  #: a control RPC raises in a worker
    delay: float = 0.0  #: a report is delivered 1-3 steps late
    duplicate: float = 0.0  #: a report is delivered twice
    reorder: float = 0.0  #: a report is delivered after the rest of its step's reports
    replica_deaths: tuple[tuple[int, int, int], ...] = ()  #: (stage, replica, at step)
    engine_death: tuple[int, int, int] | None = None  #: (stage, replica, at step)
    #: AR, B4 (vllm#53130) re-injected: a parked or chunk-waiting request resumes only while a slot is
    #: free, though it holds its own; once parked requests hold every slot nothing runs again
    parked_needs_free_slot: bool = False

    @classmethod
    def legal(cls, rate: float = 0.05) -> SimConfig:
        """Return every contract-legal behaviour and fault at ``rate`` (no report-stream faults)."""
        return cls(preempt=rate, park=rate, chunk_wait=rate, prompt_ignored=rate / 2, no_output=rate / 2,
                   stage_fail=rate / 2, abort_fail=rate, rpc_error=rate)  # fmt: skip

    @classmethod
    def faulty(cls, rate: float = 0.05) -> SimConfig:
        """Return ``legal(rate)`` plus delayed, duplicated and reordered reports."""
        return attrs.evolve(cls.legal(rate), delay=rate, duplicate=rate, reorder=rate)

    @property
    def breaks_stream(self) -> bool:
        """Return whether the report stream itself is faulty (delays, duplicates, reordering)."""
        return bool(self.delay or self.duplicate or self.reorder)
