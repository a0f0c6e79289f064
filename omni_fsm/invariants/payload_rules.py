"""Runtime checks: the token-only output payload rules (AR-INV-300..303, 305), judged over engine records.

The history checks (``CHECKS``) read the orchestrator's observations; these read what a runtime adapter
recorded of a real engine's stage payloads, plain data with no engine imported here (the vLLM binding's tests
record them: ``tests/runtimes/vllm/payload_probe.py``). A *run* is one workload's record:

- ``tokens``: request -> sampled ids; ``logprobs``: request -> per-step top-k logprob rows;
- ``payloads``: request -> per output, ``None`` or ``{key: [shape, digest]}``;
- ``outputs``: ``[request, new tokens, has a tensor payload, finished]`` per output, in order;
- ``processor_calls``: ``[request, tokens, payload keys, end of stream]`` per chunk-processor call, in order;
- ``chunks``: ``[request, eof]`` per chunk queued; ``counts``: the payload builder's counts and threads.

Each check returns its problems as lines naming the invariant (``[]``: it holds).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

Run = Mapping[str, Any]
HIDDEN, CONDITIONING = "hidden_states", "prefill_conditioning"


@attrs.frozen
class RuntimeCheck:
    """A named check over engine records, and the invariant it implements."""

    name: str
    invariant: str
    doc: str
    run: Callable[..., list[str]]


def _keyed(run: Run, key: str) -> dict[str, list[Any]]:
    return {rid: [p.get(key) if p else None for p in ps] for rid, ps in run["payloads"].items()}


def hidden_left_out(token_only: Run, with_hidden: Run) -> list[str]:
    """AR-INV-300: the token-only run sends no hidden states; its tokens, logprobs and conditioning equal the run
    that sends them (the same workload)."""
    problems = []
    for rid, payloads in token_only["payloads"].items():
        if any(p and HIDDEN in p for p in payloads):
            problems.append(f"AR-INV-300 request {rid}: a token-only stage sent hidden states")
    if not any(p and HIDDEN in p for ps in with_hidden["payloads"].values() for p in ps):
        problems.append("AR-INV-300: the run with hidden states sent none (nothing was compared)")
    for what in ("tokens", "logprobs"):
        if token_only[what] != with_hidden[what]:
            problems.append(f"AR-INV-300: {what} differ when hidden states are left out of the payload")
    if _keyed(token_only, CONDITIONING) != _keyed(with_hidden, CONDITIONING):
        problems.append("AR-INV-300: prefill conditioning differs when hidden states are left out")
    return problems


def token_updates_reach_processor(run: Run, requires_token_updates: bool, excluded: Collection[str]) -> list[str]:
    """AR-INV-301: the processor is called for exactly the outputs with a tensor payload, with a finish, or (only
    when it declares ``requires_token_updates``) with sampled ids; never for a request final at this stage; a
    finished request's chunks end with one ``eof`` chunk, an unfinished (aborted) one's with none."""
    problems = []
    wanted = [[rid, n, has] for rid, n, has, fin in run["outputs"]
              if rid not in excluded and (has or fin or (n > 0 and requires_token_updates))]  # fmt: skip
    got = [[rid, len(tokens), bool(keys)] for rid, tokens, keys, _ in run["processor_calls"]]
    if got != wanted:
        at = next((i for i, (a, b) in enumerate(zip(got, wanted, strict=False)) if a != b), min(len(got), len(wanted)))
        problems.append(f"AR-INV-301: processor call {at}: got {got[at:at + 1]}, the rule wants {wanted[at:at + 1]} "
                        f"(requires_token_updates={requires_token_updates})")  # fmt: skip
    finished = {rid for rid, _, _, fin in run["outputs"] if fin and rid not in excluded}
    for rid, chunks in itertools.groupby(sorted(run["chunks"], key=lambda c: c[0]), key=lambda c: c[0]):
        eofs = [eof for _, eof in chunks]
        if rid in excluded:
            problems.append(f"AR-INV-301 request {rid}: final at this stage, yet {len(eofs)} chunk(s) queued")
        elif rid in finished and (eofs.count(True) != 1 or not eofs[-1]):
            problems.append(f"AR-INV-301 request {rid}: its chunks end {eofs}: one eof, last, is owed")
        elif rid not in finished and True in eofs:
            problems.append(f"AR-INV-301 request {rid}: an eof, but the request did not finish")
    missing = finished - {rid for rid, eof in run["chunks"] if eof}
    if missing:
        problems.append(f"AR-INV-301: requests {sorted(missing)} finished without an end of stream")
    return problems


def no_empty_payloads(run: Run, sends_something: bool) -> list[str]:
    """AR-INV-302: no request gets an empty payload; a stage with neither hidden states nor conditioning to send
    builds no payload at all, and says so in its counts (skipped, none built)."""
    problems = []
    payloads = [p for ps in run["payloads"].values() for p in ps]
    if any(p is not None and not p for p in payloads):
        problems.append("AR-INV-302: an empty per-request payload was built")
    counts = run["counts"]
    if not sends_something:
        if any(p is not None for p in payloads) or counts["built"]:
            problems.append(f"AR-INV-302: nothing to send, yet {counts['built']} payload(s) built")
        if not counts["skipped"]:
            problems.append("AR-INV-302: the skipped payloads were not counted")
    return problems


def payloads_read_safe_inputs(inline: Run, background: Run, overwrite: Mapping[str, Any] | None) -> list[str]:
    """AR-INV-303: inline and background construction give the same payloads and tokens; the background one ran
    on another thread, the connector was collected on the runner's thread in both; with the next step run before
    the background thread read anything (``overwrite``), the snapshot still gave the inline payloads."""
    problems = []
    if inline["payloads"] != background["payloads"] or inline["tokens"] != background["tokens"]:
        problems.append("AR-INV-303: background construction gave other payloads or tokens than inline")
    for name, run in (("inline", inline), ("background", background)):
        counts = run["counts"]
        if set(counts["connector_threads"]) != {counts["runner_thread"]}:
            problems.append(f"AR-INV-303: {name}: connector output collected off the runner's thread")
    counts = background["counts"]
    if not counts["background"] or counts["runner_thread"] in counts["builder_threads"]:
        problems.append("AR-INV-303: background construction did not run on a thread of its own")
    if overwrite is not None:
        if overwrite["offsets_before"] == overwrite["offsets_after"]:
            problems.append("AR-INV-303: the next step did not change the offsets (nothing was overwritten)")
        if not overwrite["background_equals_inline"]:
            problems.append("AR-INV-303: background construction read inputs the next step overwrote")
    return problems


#: the worker execution modes (AR-INV-305): materialization x compilation x process
MODES = (("inline", "background"), ("eager", "compiled"), ("in-process", "stage-process"))


def worker_modes_covered(documented: Mapping[tuple[str, ...], str | None],
                         verdicts: Mapping[tuple[str, ...], Sequence[str]],
                         cells: Iterable[tuple[str, ...]] | None = None) -> list[str]:  # fmt: skip
    """AR-INV-305: every cell of ``MODES`` (or of ``cells``) is documented; a runnable one (reason ``None``) was run
    and broke nothing, one not runnable here says why."""
    problems = []
    for cell in itertools.product(*MODES) if cells is None else cells:
        if cell not in documented:
            problems.append(f"AR-INV-305: mode {'/'.join(cell)} is neither run nor listed as not runnable")
        elif documented[cell] is None and cell not in verdicts:
            problems.append(f"AR-INV-305: mode {'/'.join(cell)} is runnable but was not run")
        elif documented[cell] is None:
            problems += [f"AR-INV-305: mode {'/'.join(cell)}: {p}" for p in verdicts[cell]]
        elif not (documented[cell] or "").strip():
            problems.append(f"AR-INV-305: mode {'/'.join(cell)} is listed not runnable without a reason")
    return problems


def _checks(entries: Iterable[RuntimeCheck]) -> dict[str, RuntimeCheck]:
    return {c.name: c for c in entries}


RUNTIME_CHECKS: dict[str, RuntimeCheck] = _checks([
    RuntimeCheck("hidden_left_out", "AR-INV-300",
                 "a token-only stage sends no hidden states; tokens, logprobs and conditioning are unchanged",
                 hidden_left_out),
    RuntimeCheck("token_updates_reach_processor", "AR-INV-301",
                 "the chunk processor is called per its trigger; final-stage requests excluded; one eof per stream",
                 token_updates_reach_processor),
    RuntimeCheck("no_empty_payloads", "AR-INV-302",
                 "no empty per-request payload is built; with nothing to send none is built, and that is counted",
                 no_empty_payloads),
    RuntimeCheck("payloads_read_safe_inputs", "AR-INV-303",
                 "inline and background construction agree, also after the next step overwrote the runner's "
                 "buffers; connector collection stays on the runner's thread", payloads_read_safe_inputs),
    RuntimeCheck("worker_modes_covered", "AR-INV-305",
                 "every worker execution mode is run against vLLM or listed as not runnable with its reason",
                 worker_modes_covered),
])  # fmt: skip

__all__ = ["MODES", "RUNTIME_CHECKS", "RuntimeCheck", "hidden_left_out", "no_empty_payloads",
           "payloads_read_safe_inputs", "token_updates_reach_processor", "worker_modes_covered"]  # fmt: skip
