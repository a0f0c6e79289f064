"""``omni-run``: run a pipeline on a runtime under a random workload; check every step.

Every (event, outputs) step of the lifecycle goes to ``omni_fsm``'s invariant ``Monitor`` and to
a trace (``omni-fsm check`` reads it). Exit codes: ``EXIT_CODES`` (also in ``--help``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from omni_fsm import StageKind
from omni_fsm.cli.interrupt import interruptible
from omni_runtime import registry
from omni_runtime.apps.workload import DemoReport, RunFailed, WorkloadOptions, replica_deaths, run_demo
from omni_runtime.core.pipeline import Pipeline, custom_resources, example_pipeline, load_pipeline
from omni_runtime.core.protocol import RuntimeFactory, StageRuntime, build_runtimes
from omni_runtime.engines.async_engine import EVENT, POLL
from omni_runtime.engines.host import STALL_TIMEOUT_S
from omni_runtime.errors import ConfigError, OmniRuntimeError, OptionError, PipelineError
from omni_runtime.registry import load_factory

RUNTIMES = ("sim", "vllm", "diffusers", "ray")
#: runtime -> the packaged example pipeline ``omni-run`` runs when given none (a factory's: the simulator's)
EXAMPLE_FOR = {"sim": "pipeline", "vllm": "vllm_pipeline", "diffusers": "diffusion_pipeline", "ray": "ray_pipeline"}


CLEAN, VIOLATIONS, BAD_INPUT, RUN_FAILED, STALLED = 0, 1, 2, 3, 4  #: the exit codes (and INTERRUPTED, 130)
EXIT_CODES = """exit codes:
  0    clean: every invariant holds over the whole run
  1    invariant violations
  2    bad input (the pipeline file, an option, the runtime factory) or a trace that could not be written;
       no new trace is written
  3    the run failed (the engine died, a wait gave up); the trace so far is kept without its end marker
       (check it with: omni-fsm check --allow-incomplete TRACE)
  4    a replica stalled: it said it was busy and reported nothing for --stall-timeout seconds (it is lost,
       its requests failed); the run may have ended (then its trace is whole) or failed (then as 3)
  130  interrupted (Ctrl-C, SIGTERM); the trace so far is kept as for 3, if the run had started"""

#: A run that fails before it starts, or whose trace could not be written, writes no trace.
_NO_NEW_TRACE = " (no new trace written; {trace} keeps what it held before)"
#: A run that fails or is interrupted once started keeps its trace so far, without the end marker.
_INCOMPLETE = " (the trace so far is in {trace}, incomplete: check it with omni-fsm check --allow-incomplete {trace})"


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Option defaults in the help, and the exit codes' table as written."""


def _seconds(text: str) -> float | None:
    """Return the argparse type of ``--stall-timeout``: seconds >= 0, where 0 is no bound (``None``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0 (0: no bound), got {text!r}")
    return value or None


def _integer(text: str) -> int:
    """Return the argparse type of a count: any integer (``WorkloadOptions`` judges its range)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _rate(text: str) -> float:
    """Return the argparse type of a rate: any number (``WorkloadOptions`` judges its range)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number within [0, 1], got {text!r}") from None


def _runtime_name(text: str) -> str:
    """Return the argparse type of ``--runtime``: a name of ``RUNTIMES``, or a factory's ``package.module:factory``
    (loaded once the options are read)."""
    if text in RUNTIMES or ":" in text:
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(map(repr, RUNTIMES))}, "
                                     "or name a factory: package.module:factory)")  # fmt: skip


def _argument_error(parser: argparse.ArgumentParser, exc: OptionError) -> NoReturn:
    """Exit as argparse does, naming the options ``exc`` blames (their ``dest`` is the field's name)."""
    flags = ["--" + name.replace("_", "-") for name in exc.names]
    if len(flags) == 1:
        parser.error(f"argument {flags[0]}: {exc.reason}")
    parser.error(f"{' + '.join(flags)} {exc.reason}")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(prog="omni-run", description=__doc__.splitlines()[0], epilog=EXIT_CODES,
                                formatter_class=_Formatter)  # fmt: skip
    # SUPPRESS: no pipeline given leaves the attribute unset (the example depends on --runtime)
    p.add_argument("pipeline", nargs="?", default=argparse.SUPPRESS,
                   help="pipeline TOML file (default: the example that ships with the package, "
                        "examples/pipeline.toml, or examples/vllm_pipeline.toml with --runtime vllm)")  # fmt: skip
    p.add_argument("--runtime", type=_runtime_name, default="sim", metavar="{sim,vllm,diffusers,ray,PKG.MOD:FACTORY}",
                   help="stage runtime: the simulator; real vLLM engines (AR stages only), one process per "
                        "replica, on the model in --model; diffusers for the diffusion stages (AR stages on the "
                        "simulator); each replica in a Ray actor (the cluster at RAY_ADDRESS, else a local one: "
                        "docs/scale-out.md); or your own, the runtime factory "
                        "factory(spec, stage, replica, rpc_fails) importable as PKG.MOD:FACTORY from the current "
                        "directory (see docs/runtime.md)")  # fmt: skip
    p.add_argument("--model", default=None,
                   help="--runtime vllm: the model directory (default: the tiny random-weight Llama, built locally "
                        "once into the user's cache)")  # fmt: skip
    p.add_argument("--requests", type=_integer, default=300, help="client requests to submit (>= 0)")
    p.add_argument("--concurrency", type=_integer, default=32, help="requests in flight at most (>= 1)")
    p.add_argument("--abort-rate", type=_rate, default=0.2, help="share of requests aborted or cancelled, in [0, 1]")
    p.add_argument("--fault-rate", type=_rate, default=0.05, help="rate of each injected fault, in [0, 1]")
    p.add_argument("--parallel-rate", type=_rate, default=0.15, help="share of requests with n=2, in [0, 1]")
    p.add_argument("--companion-rate", type=_rate, default=0.15,
                   help="share of requests with one CFG companion; with --parallel-rate at most 1")  # fmt: skip
    p.add_argument("--replica-deaths", type=_integer, default=None,
                   help="replicas that die during the run, at most one per stage of several replicas "
                        "(none given: 1 if there is such a stage)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="random seed (any integer)")
    p.add_argument("--loop", choices=(EVENT, POLL), default=EVENT, help="the driver's loop")
    p.add_argument("--trace", default="omni-run.trace.jsonl", help="where to write the run's trace")
    p.add_argument("--stall-timeout", type=_seconds, default=STALL_TIMEOUT_S, metavar="SECONDS",
                   help="a replica that says it is busy and reports nothing this long while it holds requests is "
                        "lost, its requests failed (exit 4); 0: no bound")  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="run even when the trace's estimated size exceeds the free space on its disk")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``omni-run``; return the exit code (a bad option exits 2 through argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = WorkloadOptions(
            requests=args.requests, concurrency=args.concurrency, abort_rate=args.abort_rate,
            fault_rate=args.fault_rate, parallel_rate=args.parallel_rate, companion_rate=args.companion_rate,
            replica_deaths=args.replica_deaths, seed=args.seed, loop=args.loop, stall_timeout_s=args.stall_timeout,
        )  # fmt: skip
    except OptionError as exc:
        _argument_error(parser, exc)
    try:
        given = vars(args).get("pipeline")
        example = EXAMPLE_FOR.get(args.runtime, EXAMPLE_FOR["sim"])
        pipeline = load_pipeline(example_pipeline(example) if given is None else given)
    except PipelineError as exc:
        print(f"omni-run: {exc}", file=sys.stderr)
        return 2
    try:
        replica_deaths(pipeline, options)  # judges --replica-deaths against the pipeline before anything runs
    except OptionError as exc:
        _argument_error(parser, exc)
    if args.model is not None and args.runtime != "vllm":
        parser.error("argument --model: only --runtime vllm runs a model")
    factory = None
    if args.runtime not in RUNTIMES:
        try:
            factory = load_factory(args.runtime)
        except OmniRuntimeError as exc:
            print(f"omni-run: {exc}", file=sys.stderr)
            return 2
    if not args.force:
        refused = _too_big(pipeline, options.requests, args.trace)
        if refused:
            print(f"omni-run: {refused}", file=sys.stderr)
            return BAD_INPUT
    progress = None if args.no_progress else _progress_bar(options.requests)
    before = _identity(args.trace)

    def why() -> str:  # the writer replaces the file in one step: a new one means the trace (so far) was written
        if _identity(args.trace) == before:
            return _NO_NEW_TRACE.format(trace=args.trace)
        return "" if _whole(args.trace) else _INCOMPLETE.format(trace=args.trace)

    def run() -> int:
        runtimes = None
        try:
            if factory is not None:
                runtimes = _built(pipeline, args.runtime, factory)
            elif args.runtime == "diffusers":  # diffusion stages on diffusers, AR stages on the simulator
                runtimes = registry.runtimes(pipeline, {StageKind.AR: "sim", StageKind.DIFFUSION: "diffusers"})
            elif args.runtime == "vllm":
                runtimes = registry.runtimes(pipeline, "vllm", model_dir=args.model)
            elif args.runtime == "ray":  # a local Ray, when none is set, offers what the placements ask for
                runtimes = registry.runtimes(pipeline, "ray", resources=custom_resources(pipeline))
        except (OmniRuntimeError, OSError) as exc:
            print(f"omni-run: {exc}", file=sys.stderr)
            return 2
        return _run(pipeline, options, args.trace, progress, runtimes)

    return interruptible("omni-run", run, why)


def _built(pipeline: Pipeline, name: str, factory: RuntimeFactory[StageRuntime]) -> list[list[StageRuntime]]:
    """Return ``factory``'s runtimes for ``pipeline``; ``ConfigError`` (one line) for whatever the factory raised."""
    try:
        return build_runtimes(pipeline, factory)
    except ConfigError as exc:
        raise ConfigError(f"--runtime={name}: {exc}") from None
    except Exception as exc:  # the factory is the user's code: what it raised is its message, not a traceback
        raise ConfigError(f"--runtime={name}: the factory raised {type(exc).__name__}: {exc}") from None


#: a trace's bytes per request, calibrated on omni-run's default workload (its abort, fault, n=2 and companion
#: rates) on the simulator: one-stage pipelines of 500 requests each, AR at max_tokens 8 and 32 (1561 and 3169
#: bytes per request), diffusion at 4 and 16 steps (1096 and 2084), give the per-token and per-step slopes and
#: each kind's base; the request's own lines (submit, terminal) are taken out of the base once per stage past the
#: first. It overestimates the example pipeline (3086 against 2600 measured): a refusal errs on the safe side.
_TRACE_BYTES_REQUEST, _TRACE_BYTES_AR, _TRACE_BYTES_TOKEN = 500, 525, 67
_TRACE_BYTES_DIFFUSION, _TRACE_BYTES_STEP = 270, 82


def trace_bytes(pipeline: Pipeline, requests: int) -> int:
    """Return the estimated size of the trace of ``requests`` requests of the default workload on ``pipeline``."""
    per_request = _TRACE_BYTES_REQUEST + sum(
        _TRACE_BYTES_AR + _TRACE_BYTES_TOKEN * s.max_tokens if s.kind is StageKind.AR
        else _TRACE_BYTES_DIFFUSION + _TRACE_BYTES_STEP * s.steps for s in pipeline.stages)  # fmt: skip
    return requests * per_request


def _free_bytes(folder: str) -> int:
    """Return the bytes free on the disk of ``folder`` (the indirection tests replace)."""
    return shutil.disk_usage(folder).free


def _too_big(pipeline: Pipeline, requests: int, trace: str) -> str:
    """Return why the trace at ``trace`` would not fit on its disk, in one line (``""``: it would, or it goes to a FIFO
    or a device, or the disk cannot be asked)."""
    if os.path.exists(trace) and not os.path.isfile(trace):
        return ""
    folder = os.path.dirname(os.path.abspath(trace))
    try:
        free = _free_bytes(folder)
    except OSError:
        return ""  # a folder that does not exist: writing the trace says so
    need = trace_bytes(pipeline, requests)
    if need <= free:
        return ""
    return (f"the trace of {requests} requests would take about {_size(need)} and {folder} has {_size(free)} free; "
            f"run fewer --requests, put --trace elsewhere, or --force")  # fmt: skip


def _size(count: int) -> str:
    """Return ``count`` bytes for a reader: ``290.0 GB``."""
    if count < 1000:
        return f"{count} bytes"
    scaled, power = float(count) / 1000, 0
    while scaled >= 1000 and power < 2:
        scaled, power = scaled / 1000, power + 1
    return f"{scaled:.1f} {('KB', 'MB', 'GB')[power]}"


def _identity(path: str) -> tuple[int, int, int] | None:
    """Return what tells one file at ``path`` from the next (``None``: none there)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def _whole(path: str) -> bool:
    """Return whether the trace at ``path`` ends with its end marker (the line ``TraceWriter.end`` writes)."""
    try:
        with open(path, "rb") as trace:
            trace.seek(max(0, os.fstat(trace.fileno()).st_size - 64))
            return trace.read().rstrip().endswith(b'{"end":true}')
    except OSError:
        return False


def _run(pipeline: Pipeline, options: WorkloadOptions, trace: str, progress: Callable[[int], None] | None,
         runtimes: Any = None) -> int:  # fmt: skip
    try:
        report = asyncio.run(_until_terminated(run_demo(pipeline, options, trace, progress, runtimes)))
    except asyncio.CancelledError:  # SIGTERM cancelled the run: every ``finally`` on the way ran
        raise KeyboardInterrupt from None
    except RunFailed as exc:  # the run started, then failed: its trace so far is kept
        print(f"omni-run: the run failed: {exc}{_INCOMPLETE.format(trace=trace)}", file=sys.stderr)
        return STALLED if exc.stalled else RUN_FAILED
    except OmniRuntimeError as exc:
        print(f"omni-run: {exc}{_NO_NEW_TRACE.format(trace=trace)}", file=sys.stderr)
        return 2
    except OSError as exc:  # the trace file could not be written
        print(f"omni-run: {trace}: {exc.strerror or exc}{_NO_NEW_TRACE.format(trace=trace)}", file=sys.stderr)
        return 2
    print(render(report, trace))
    if report.violations:
        return VIOLATIONS
    return STALLED if report.faults.get("replicas_stalled") else CLEAN


async def _until_terminated(run: Coroutine[Any, Any, DemoReport]) -> DemoReport:
    """Await ``run``; SIGTERM cancels it once, as ``asyncio.run`` does on Ctrl-C (no exception lands inside a
    task, and a second SIGTERM does not cut its clean-up short). Outside the main thread SIGTERM is left alone."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    previous = signal.getsignal(signal.SIGTERM)

    def terminate() -> None:
        if not task.cancelling():
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (RuntimeError, ValueError):  # not the main thread: no signal handler can be installed here
        return await run
    try:
        return await run
    finally:
        loop.remove_signal_handler(signal.SIGTERM)  # (that leaves SIGTERM at its default action)
        signal.signal(signal.SIGTERM, previous)  # the caller's handler again (``interruptible``'s)


def _progress_bar(total: int, every: float = 5.0) -> Callable[[int], None]:
    """Return the progress display: a bar on a terminal; in a log, a line every ``every`` seconds and at the end."""
    width = 40
    on_terminal = sys.stderr.isatty()
    next_line = [time.monotonic() + every]

    def show(done: int) -> None:
        if not on_terminal:  # a log, not a screen
            now = time.monotonic()
            if now >= next_line[0] or done >= total:
                next_line[0] = now + every
                print(f"progress: {done}/{total} requests", file=sys.stderr, flush=True)
            return
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


def render(report: DemoReport, trace: str) -> str:
    """Return the run's summary as text."""
    lines = [f"omni-run: {report.requests} requests on {report.pipeline} ({report.seconds:.2f} s)"]
    lines.append("outcomes by finish reason: " + _pairs(report.outcomes))
    for name, counts in report.stages.items():
        lines.append(f"stage {name}: " + _pairs(counts))
    lines.append("late events dropped: " + _pairs(report.dropped))
    lines.append("faults: " + _pairs(report.faults))
    if report.dropped.get("after_finished"):
        lines.append(f"runtime protocol broken: {report.dropped['after_finished']} report(s) after the runtime's own "
                     "Finished of the request (dropped)")  # fmt: skip
    lines.append(f"state after drain: {_pairs(report.held)}")
    for prompt, text in report.samples:
        lines.append(f"text: {prompt!r} -> {text!r}")
    if report.violations:
        lines.append(f"invariants: {len(report.violations)} VIOLATION(S)")
        lines.extend(f"  {v}" for v in report.violations[:20])
    else:
        lines.append(f"invariants: all {report.checks} checks hold over {report.steps} steps")
    lines.append(f"trace: {trace} (check it with: omni-fsm check {trace})")
    return "\n".join(lines)


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in counts.items()) or "none"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
