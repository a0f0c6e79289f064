"""Benchmark the vLLM binding's observation on vLLM's real scheduler.

One cycle is ``schedule()`` + ``update_from_output()`` of vLLM's v1 ``Scheduler``, and of its
``AsyncScheduler`` (the output a cycle applies is the previous cycle's batch's, as on a GPU), with
256 and with 1,024 running requests (decode steps with churn: each request stops after 20-60 tokens and a new
one, 32 prompt tokens, takes its place, so status assignments happen every cycle). Two schedulers
built alike run the same requests and the same model outputs (made outside the clock):

- bare: vLLM's own ``Request`` objects;
- observed: the binding's (``ObservedRequest``: every status assignment goes through its hook)
  and, after each scheduler call, ``VllmSchedulerRuntime.take_moves()`` (what the moves say).

Cycles are taken in pairs of runs (``--cycles`` cycles bare, then as many observed, the order
swapped every pair; by default 200 pairs of one cycle each, so that both sides of a pair see the
same moment of a noisy machine), at least 11 pairs; each figure is the median over the pairs,
``overhead_ratio`` the larger of two estimates: the median of the pairs' ratios (``pair_ratio``) and
the ratio of the medians (``median_ratio``). The garbage collector
runs between runs, not inside them (it would bill one side for the other's garbage).
``hook_us_per_cycle`` is the time inside the observation itself: the hook calls counted in the
run times the hook's cost measured alone, plus the ``take_moves`` calls timed in the run.

Then the Omni scheduler (``OmniScheduler`` with a chunk processor that asks for every token update and sends
nothing, so its own per-output work runs for every request) against vLLM's ``Scheduler``, fed the same requests and
outputs, alternated pair by pair the same way; ``omni_ratio`` is the Omni cycle time over upstream's (the larger of
the two estimates), the largest over the request counts. ``own_us_per_cycle`` is the Omni scheduler's own work
(its processor hand-off) timed alone, off the cycle clock.

Last line: ``vllm_observer: requests=... bare_ms=... observed_ms=... hook_us_per_cycle=...
overhead_ratio=... omni_ratio=...`` (of the case, request count and scheduler, with the largest ratio; omni_ratio
over every request count).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import attrs

for key, value in {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                   "VLLM_LOGGING_LEVEL": "ERROR"}.items():  # fmt: skip
    os.environ.setdefault(key, value)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

from omni_fsm import StageKind  # noqa: E402
from omni_runtime import simple_pipeline  # noqa: E402
from omni_runtime.core.prompts import StageInput  # noqa: E402
from omni_runtime.runtimes.vllm import RequestPlan, SchedulerOptions, VllmSchedulerRuntime, build_scheduler  # noqa: E402
from omni_runtime.runtimes.vllm._config import block_hasher  # noqa: E402
from omni_runtime.runtimes.vllm.omni_scheduler import OmniScheduler  # noqa: E402

PROMPT = 32
TOKEN = 7  #: every sampled token (never EOS)


def _length(i: int) -> int:
    return 20 + (i * 7919) % 41


class Pair:
    """The bare and the observed scheduler, fed the same requests: after every cycle each side is topped up to
    ``n`` requests (off the clock), and both finish the same requests at the same cycles."""

    def __init__(self, n: int, async_scheduling: bool) -> None:
        options = SchedulerOptions(max_num_seqs=n, num_blocks=n * 8, max_num_batched_tokens=n + 64 * PROMPT,
                                   async_scheduling=async_scheduling)  # fmt: skip
        self.n, self.async_scheduling = n, async_scheduling
        self.pending: dict[str, Any] = {}  #: asynchronous scheduling: the batch in flight, per side
        spec = simple_pipeline([StageKind.AR], [True], max_running=n).stages[0]
        plans = lambda s, rid, inp: RequestPlan(max_tokens=_length(rid))  # the same lengths as the bare requests
        self.runtime = VllmSchedulerRuntime(spec, options, plans=plans)
        self.runtime.bind(lambda report: None)
        self.bare = build_scheduler(options)
        self.hasher = self.runtime._hasher
        self.next_id = {"bare": 0, "observed": 0}
        self.hook_calls = 0  #: status assignments observed inside the timed cycles
        self.take_s = 0.0  #: seconds in take_moves() inside the timed cycles
        self.top_up()

    def top_up(self) -> None:
        """Add requests to each side until it holds ``n`` (off the clock)."""
        for side, scheduler in (("bare", self.bare), ("observed", self.runtime.scheduler)):
            for _ in range(self.n - sum(scheduler.get_request_counts())):
                i = self.next_id[side]
                self.next_id[side] += 1
                tokens = tuple(10 + (i + k) % 900 for k in range(PROMPT))
                if side == "bare":
                    params = SamplingParams(max_tokens=_length(i), temperature=0.0)
                    params.update_from_generation_config({}, eos_token_id=2)
                    scheduler.add_request(Request(str(i), list(tokens), params, None, block_hasher=self.hasher))
                else:
                    self.runtime.add_request(i, StageInput(tokens))
        self.runtime.take_moves()  # the new requests' creation, observed off the clock
        self.runtime._live.clear()  # nothing is reported here: the runtime's own view of its requests is not kept

    def _take(self) -> None:
        self.hook_calls += len(self.runtime._log)
        start = time.perf_counter()
        self.runtime.take_moves()
        self.take_s += time.perf_counter() - start

    @staticmethod
    def _output(so: Any) -> ModelRunnerOutput:
        ids = list(so.num_scheduled_tokens)
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=[[TOKEN]] * len(ids))  # fmt: skip

    def _applied(self, side: str, so: Any, out: ModelRunnerOutput) -> tuple[Any, ModelRunnerOutput] | None:
        """Return the batch whose output a cycle applies: this one, or (asynchronous) the one before it."""
        if not self.async_scheduling:
            return so, out
        before, self.pending[side] = self.pending.get(side), (so, out)
        return before

    def run(self, side: str, cycles: int) -> float:
        """Return the seconds of ``cycles`` cycles of ``side`` (outputs made and requests added off the clock)."""
        observed = side == "observed"
        scheduler = self.runtime.scheduler if observed else self.bare
        spent = 0.0
        for _ in range(cycles):
            start = time.perf_counter()
            so = scheduler.schedule()
            if observed:
                self._take()
            spent += time.perf_counter() - start
            applied = self._applied(side, so, self._output(so))
            if applied is not None:
                start = time.perf_counter()
                scheduler.update_from_output(*applied)
                if observed:
                    self._take()
                spent += time.perf_counter() - start
            self.top_up()
        return spent


def hook_cost_us(runtime: VllmSchedulerRuntime, calls: int = 20_000) -> float:
    """Return the cost of one hook call (an assignment's observation), measured alone."""
    request = next(iter(runtime.scheduler.requests.values()))
    status = request.status
    saved = list(runtime._log)
    for _ in range(1000):  # warm up
        request.status = status
    start = time.perf_counter()
    for _ in range(calls):
        request.status = status
    spent = time.perf_counter() - start
    runtime._log = saved
    return spent / calls * 1e6


def measure(n: int, async_scheduling: bool, pairs: int, cycles: int) -> dict[str, Any]:
    gc.disable()
    try:
        return _measure(n, async_scheduling, pairs, cycles)
    finally:
        gc.enable()


def _measure(n: int, async_scheduling: bool, pairs: int, cycles: int) -> dict[str, Any]:
    pair = Pair(n, async_scheduling)
    for side in ("bare", "observed"):  # warm up: prefill, lazy imports
        pair.run(side, 3)
    bare, observed = [], []
    pair.hook_calls, pair.take_s = 0, 0.0
    observed_cycles = 0
    for k in range(pairs):
        if k % 16 == 0:
            gc.collect()  # collections land between runs, not inside one side's clock
        order = ("observed", "bare") if k % 2 else ("bare", "observed")
        spent = {side: pair.run(side, cycles) for side in order}
        observed_cycles += cycles
        bare.append(spent["bare"] / cycles * 1e3)
        observed.append(spent["observed"] / cycles * 1e3)
    per_call = hook_cost_us(pair.runtime)
    hook_us = (pair.hook_calls * per_call + pair.take_s * 1e6) / observed_cycles
    ratios = [o / b for b, o in zip(bare, observed, strict=True)]
    pair_ratio, median_ratio = statistics.median(ratios), statistics.median(observed) / statistics.median(bare)
    return {"requests": n, "scheduler": type(pair.bare).__name__, "bare_ms": statistics.median(bare),
            "observed_ms": statistics.median(observed), "hook_us_per_cycle": hook_us, "pair_ratio": pair_ratio,
            "median_ratio": median_ratio, "overhead_ratio": max(pair_ratio, median_ratio), "pairs": pairs,
            "cycles": observed_cycles,
            "hook_calls": pair.hook_calls, "hook_call_us": per_call,
            "running": len(pair.runtime.scheduler.running)}  # fmt: skip


class _NoChunks:
    """A chunk processor that asks for every token update and sends nothing: the Omni scheduler's own work only."""

    requires_token_updates = True

    def __call__(self, request_id: str, token_ids: list[int], payload: Any, finished: bool) -> None:
        return None


class OmniPair:
    """vLLM's ``Scheduler`` and the Omni scheduler (``OmniScheduler`` with a token-update chunk processor, so its
    per-output work runs on every request of every cycle), fed the same requests and the same model outputs."""

    def __init__(self, n: int) -> None:
        options = SchedulerOptions(max_num_seqs=n, num_blocks=n * 8, max_num_batched_tokens=n + 64 * PROMPT)
        self.n = n
        self.sides = {"upstream": build_scheduler(options),
                      "omni": build_scheduler(attrs.evolve(options, scheduler_cls=OmniScheduler))}  # fmt: skip
        self.sides["omni"].chunk_processor = _NoChunks()  # type: ignore[attr-defined]
        self.hasher = block_hasher(options.block_size)
        self.next_id = dict.fromkeys(self.sides, 0)
        self.own_s, self.own_cycles = 0.0, 0  #: the Omni scheduler's own work, timed apart (off the cycle clock)
        self.top_up()

    def top_up(self) -> None:
        """Add requests to each side until it holds ``n`` (off the clock)."""
        for side, scheduler in self.sides.items():
            for _ in range(self.n - sum(scheduler.get_request_counts())):
                i = self.next_id[side]
                self.next_id[side] += 1
                params = SamplingParams(max_tokens=_length(i), temperature=0.0)
                params.update_from_generation_config({}, eos_token_id=2)
                tokens = [10 + (i + k) % 900 for k in range(PROMPT)]
                scheduler.add_request(Request(str(i), tokens, params, None, block_hasher=self.hasher))

    def run(self, side: str, cycles: int) -> float:
        """Return the seconds of ``cycles`` cycles of ``side`` (outputs made and requests added off the clock)."""
        scheduler, spent = self.sides[side], 0.0
        for _ in range(cycles):
            start = time.perf_counter()
            so = scheduler.schedule()
            spent += time.perf_counter() - start
            out = Pair._output(so)
            start = time.perf_counter()
            outputs = scheduler.update_from_output(so, out)
            spent += time.perf_counter() - start
            if side == "omni":  # the Omni scheduler's own work, timed alone: its processor hand-off once more
                start = time.perf_counter()
                scheduler.hand_to_processor(outputs)  # type: ignore[attr-defined]
                self.own_s += time.perf_counter() - start
                self.own_cycles += 1
            self.top_up()
        return spent


def measure_omni(n: int, pairs: int, cycles: int) -> dict[str, Any]:
    """Return the Omni scheduler's cycle time against vLLM's, alternated pair by pair as ``measure`` does."""
    gc.disable()
    try:
        pair = OmniPair(n)
        for side in pair.sides:  # warm up: prefill, lazy imports
            pair.run(side, 3)
        times: dict[str, list[float]] = {"upstream": [], "omni": []}
        for k in range(pairs):
            if k % 16 == 0:
                gc.collect()
            for side in ("omni", "upstream") if k % 2 else ("upstream", "omni"):
                times[side].append(pair.run(side, cycles) / cycles * 1e3)
    finally:
        gc.enable()
    ratios = [o / u for u, o in zip(times["upstream"], times["omni"], strict=True)]
    pair_ratio = statistics.median(ratios)
    median_ratio = statistics.median(times["omni"]) / statistics.median(times["upstream"])
    upstream_ms, omni_ms = statistics.median(times["upstream"]), statistics.median(times["omni"])
    calls = pair.sides["omni"].chunk_counts.tokens  # type: ignore[attr-defined]
    return {"requests": n, "upstream_ms": upstream_ms, "omni_ms": omni_ms, "pair_ratio": pair_ratio,
            "median_ratio": median_ratio, "omni_ratio": max(pair_ratio, median_ratio), "chunk_calls": calls,
            "own_us_per_cycle": pair.own_s / max(pair.own_cycles, 1) * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200, help="pairs of runs, at least 11 (default 200)")
    parser.add_argument("--cycles", type=int, default=1, help="cycles per run (default 1)")
    parser.add_argument("--requests", type=int, nargs="+", default=[256, 1024], help="running requests")
    args = parser.parse_args(argv)
    if args.pairs < 11 or args.cycles < 1:
        parser.error("--pairs must be at least 11 and --cycles at least 1")
    results = []
    for n, async_scheduling in itertools.product(args.requests, (False, True)):
        r = measure(n, async_scheduling, args.pairs, args.cycles)
        results.append(r)
        print(f"requests={n} {r['scheduler']}: running={r['running']} pairs={r['pairs']} cycles={r['cycles']} "
              f"bare_ms={r['bare_ms']:.3f} observed_ms={r['observed_ms']:.3f} pair_ratio={r['pair_ratio']:.3f} "
              f"median_ratio={r['median_ratio']:.3f} "
              f"hook_calls={r['hook_calls']} hook_call_us={r['hook_call_us']:.3f} "
              f"hook_us_per_cycle={r['hook_us_per_cycle']:.1f}", flush=True)  # fmt: skip
    omni = []
    for n in args.requests:
        r = measure_omni(n, args.pairs, args.cycles)
        omni.append(r)
        print(f"omni requests={n} Scheduler: upstream_ms={r['upstream_ms']:.3f} omni_ms={r['omni_ms']:.3f} "
              f"pair_ratio={r['pair_ratio']:.3f} median_ratio={r['median_ratio']:.3f} "
              f"chunk_calls={r['chunk_calls']} own_us_per_cycle={r['own_us_per_cycle']:.1f}", flush=True)  # fmt: skip
    worst = max(results, key=lambda r: r["overhead_ratio"])
    print(f"vllm_observer: requests={worst['requests']} bare_ms={worst['bare_ms']:.3f} "
          f"observed_ms={worst['observed_ms']:.3f} hook_us_per_cycle={worst['hook_us_per_cycle']:.1f} "
          f"overhead_ratio={worst['overhead_ratio']:.3f} "
          f"omni_ratio={max(r['omni_ratio'] for r in omni):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
