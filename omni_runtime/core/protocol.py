"""The runtime protocol: what a pluggable stage runtime (one replica of one stage) implements.

A runtime only *reports*: everything it says goes through the one ``ReportSink`` it is bound
to, and no report has a field naming a stage, a replica or a destination. The sink belongs to
the driver, which stamps the runtime's own stage and replica on each report; a runtime holds no
reference to the orchestrator or to any other stage. So a runtime (a stage client or worker)
cannot route a request to another stage: that is a property of these types (ORCH-INV-001/002,
AR-INV-003), checked in ``tests/runtime/test_routing_shape.py``.

Per-request reports carry ``seq``: 0, 1, 2, ... for each request, in the order the runtime
produced them, so the orchestrator can put delayed or reordered reports back in order and
recognise duplicates.

A runtime is made by a ``RuntimeFactory``, ``factory(spec, stage, replica, rpc_fails)``: the engines' runtimes
(``build_runtimes``), ``omni-run --runtime pkg.mod:factory`` and the conformance kit all call that one signature.
``check_runtimes`` judges the shape of a pipeline's runtimes, ``runtimes[stage][replica]``, where they enter an
engine. How to write a runtime: ``docs/runtime.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from omni_fsm import ControlMethod, IdentityHashedEnum, StageKind, StopKind
from omni_runtime.core.pipeline import Pipeline, StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.errors import ConfigError


@attrs.frozen(slots=True)
class Report:
    """Base of everything a runtime reports."""


@attrs.frozen(slots=True)
class RequestReport(Report):
    """A report about one accepted request (``req_id``: the runtime-level request id)."""

    req_id: int
    seq: int


class Status(IdentityHashedEnum):
    """Scheduler sub-states an AR runtime reports (diffusion uses ``SCHEDULED`` only)."""

    SCHEDULED = "scheduled"
    PREEMPTED = "preempted"
    AWAIT_GRAMMAR = "await_grammar"
    AWAIT_REMOTE_KVS = "await_remote_kvs"
    AWAIT_STREAMING = "await_streaming"
    AWAIT_CHUNK = "await_chunk"
    INPUT_READY = "input_ready"


@attrs.frozen(slots=True)
class StatusChanged(RequestReport):
    """The scheduler moved the request (one of ``Status``)."""

    status: Status


@attrs.frozen(slots=True)
class Output(RequestReport):
    """A partial output: ``tokens`` units of work (tokens or denoising steps), their payload and, for an AR stage
    that detokenizes, the text they add (never past a stop string)."""

    tokens: int
    payload: Any = None
    text: str | None = None


@attrs.frozen(slots=True)
class Finished(RequestReport):
    """The request finished normally at this stage; ``payload`` is a whole-sample result, if any.

    ``stop_reason`` says what stopped it, as vLLM's ``CompletionOutput.stop_reason``: the stop string found in
    the text (the stage ended the engine request itself), or the stop token id sampled; ``None``: EOS or length.
    """

    stop: StopKind = StopKind.STOP
    payload: Any = None
    stop_reason: str | int | None = None


@attrs.frozen(slots=True)
class Aborted(RequestReport):
    """The engine ended the request itself, as aborted (vLLM: ``pause_scheduler(mode="abort")``): its terminal
    is ``abort`` with the tokens generated so far. Not an answer to an abort the orchestrator sent."""


@attrs.frozen(slots=True)
class Failed(RequestReport):
    """The request failed at this stage only."""

    error: str = "stage error"


@attrs.frozen(slots=True)
class AbortResult(Report):
    """The physical abort ``abort_id`` of ``req_id``: ``ok`` only if the request is really gone."""

    abort_id: int
    req_id: int
    ok: bool
    error: str | None = None


@attrs.frozen(slots=True)
class RpcResult(Report):
    """This replica's answer to control RPC ``call_id``; ``error`` is the worker's exception."""

    call_id: int
    ok: bool
    error: str | None = None


@attrs.frozen(slots=True)
class ReplicaDied(Report):
    """This replica is lost; the requests bound to it are gone."""


@attrs.frozen(slots=True)
class EngineDead(Report):
    """The whole engine is unusable (a fatal error no replica survives)."""

#: how ``pause_scheduler`` treats the requests in flight, given as one of its tags (vLLM's ``PauseMode``):
#: ``keep`` them, parked, until resume (the default here); ``wait`` for them to finish; ``abort`` them (each is
#: reported ``Aborted``: vLLM's own default)
PAUSE_MODES: tuple[str, ...] = ("keep", "wait", "abort")


def pause_mode(tags: frozenset[str]) -> str:
    """Return the pause mode named in a ``pause_scheduler`` call's ``tags`` (none: ``keep``).

    Raises ``ValueError`` for two modes or a tag that is not a mode (the RPC's caller gets it as the error).
    """
    modes = sorted(tags)
    unknown = [t for t in modes if t not in PAUSE_MODES]
    if unknown or len(modes) > 1:
        raise ValueError(f"pause_scheduler takes one mode tag of {', '.join(PAUSE_MODES)}, not {', '.join(modes)}")
    return modes[0] if modes else "keep"

ReportSink = Callable[[Report], None]


@runtime_checkable
class StageRuntime(Protocol):
    """One replica of one stage: communication and lifecycle only."""

    def bind(self, sink: ReportSink) -> None:
        """Set the one sink every report goes to (called once, before any other call)."""

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        """Accept a request with its stage input."""

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        """Abort ``req_ids``; report one truthful ``AbortResult`` per id."""

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        """Run a control RPC on this replica's workers; report ``RpcResult`` (errors propagated)."""

    def step(self) -> bool:
        """Do one unit of work, reporting through the sink; return whether work is left."""

    def shutdown(self) -> None:
        """Stop; idempotent. No report follows."""


@runtime_checkable
class StreamingInput(Protocol):
    """A runtime that takes streamed input: a request added with ``StageInput.streaming`` parks between turns
    (``AWAIT_STREAMING``) until ``feed_input`` brings its next part (``last``: the input ends with it)."""

    def feed_input(self, req_id: int, part: StageInput, last: bool) -> None:
        """Add the next part of ``req_id``'s streamed input; report ``INPUT_READY`` when it is taken."""


@runtime_checkable
class DeclaresVocabulary(Protocol):
    """A runtime that knows its model's vocabulary: a prompt's token ids are below ``vocab_size`` (vLLM's
    ``model_config.get_vocab_size()``). The engine refuses a prompt with a larger id at submit, as vLLM does, where
    every replica of stage 0 declares one (the smallest counts)."""

    @property
    def vocab_size(self) -> int:
        """Return how many token ids the model has (ids ``0 .. vocab_size - 1``)."""


def vocab_size(replicas: Sequence[object]) -> int | None:
    """Return the smallest ``vocab_size`` the ``replicas`` declare (``None``: none declares one); ``ConfigError`` for
    one that is not an int >= 1."""
    sizes = [r.vocab_size for r in replicas if isinstance(r, DeclaresVocabulary)]
    bad = [s for s in sizes if s.__class__ is not int or s < 1]
    if bad:
        raise ConfigError(f"a runtime declares vocab_size {bad[0]!r}: an int >= 1 is needed")
    return min(sizes) if sizes else None


_R_co = TypeVar("_R_co", bound=StageRuntime, covariant=True)
_R = TypeVar("_R", bound=StageRuntime)
#: what a ``StageRuntime`` implements (a missing one is named when a runtime is refused)
PROTOCOL_METHODS = ("bind", "add_request", "abort_requests", "control", "step", "shutdown")


class RuntimeFactory(Protocol[_R_co]):
    """Makes one replica's runtime: ``factory(spec, stage, replica, rpc_fails)`` (a function or a class).

    ``spec``: the stage's ``StageSpec`` (its kind, ``max_running``, ``max_tokens``...); ``stage``: its index in the
    pipeline; ``replica``: which of its ``spec.replicas``; ``rpc_fails``: the conformance kit's fault, this replica's
    workers raise in every control RPC (each ``RpcResult`` carries the error); engines pass ``False``. A factory
    that cannot serve ``spec`` (a stage kind it lacks) raises ``ConfigError`` saying so.
    """

    def __call__(self, spec: StageSpec, stage: int, replica: int, rpc_fails: bool, /) -> _R_co: ...


def build_runtimes(pipeline: Pipeline, factory: RuntimeFactory[_R]) -> list[list[_R]]:
    """Return ``factory``'s runtimes for every replica of every stage, ``result[stage][replica]`` (an engine's
    ``runtimes``); ``ConfigError`` names the call that made something that is not a ``StageRuntime``."""
    made: list[list[_R]] = []
    for stage, spec in enumerate(pipeline.stages):
        made.append([])
        for replica in range(spec.replicas):
            runtime = factory(spec, stage, replica, False)
            _require_runtime(runtime, f"factory(<stage {stage} {spec.name!r}>, {stage}, {replica}, False)", "made")
            made[-1].append(runtime)
    return made


def by_kind(factories: Mapping[StageKind, RuntimeFactory[_R]]) -> RuntimeFactory[_R]:
    """Return the factory that makes each replica with the factory of its stage's kind (``ConfigError`` for a kind
    none of them serves): a pipeline whose AR and diffusion stages run on different runtimes."""

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> _R:
        made = factories.get(spec.kind)
        if made is None:
            raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: no runtime is given for it")
        return made(spec, stage, replica, rpc_fails)

    return factory


def check_runtimes(pipeline: Pipeline, runtimes: object) -> None:
    """Check that ``runtimes`` is ``runtimes[stage][replica]`` for ``pipeline``: one list per stage, one
    ``StageRuntime`` per replica. Raises ``ConfigError``, one line naming the position and what it wants."""
    stages = pipeline.stages
    if not _is_list(runtimes):
        raise ConfigError(f"runtimes: expected a list of {len(stages)} lists of replicas (runtimes[stage][replica]), "
                          f"got {_a(runtimes)}")  # fmt: skip
    assert isinstance(runtimes, Sequence)
    flat = [i for i, replicas in enumerate(runtimes) if not _is_list(replicas)]
    if flat:
        i = flat[0]
        hint = " (a flat list of runtimes? build_runtimes(pipeline, factory) makes the nested one)"
        raise ConfigError(f"runtimes[{i}]: expected the list of stage {i}'s replicas, got {_a(runtimes[i])}"
                          + (hint if isinstance(runtimes[i], StageRuntime) else ""))  # fmt: skip
    if len(runtimes) != len(stages):
        raise ConfigError(f"runtimes: expected {len(stages)} stages' lists of replicas (pipeline "
                          f"{pipeline.name!r}), got {len(runtimes)}")  # fmt: skip
    for stage, (spec, replicas) in enumerate(zip(stages, runtimes, strict=True)):
        if len(replicas) != spec.replicas:
            raise ConfigError(f"runtimes[{stage}]: expected {spec.replicas} replica(s) of stage {stage} "
                              f"({spec.name!r}), got {len(replicas)}")  # fmt: skip
        for replica, runtime in enumerate(replicas):
            _require_runtime(runtime, f"runtimes[{stage}][{replica}]", "is")


def check_runtime(runtime: object, where: str) -> None:
    """Raise ``ConfigError`` (one line: ``where`` and the methods it lacks) unless ``runtime`` is a
    ``StageRuntime``."""
    _require_runtime(runtime, where, "is")


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _a(value: object) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _require_runtime(runtime: object, where: str, verb: str) -> None:
    if not isinstance(runtime, StageRuntime):
        lacks = ", ".join(m for m in PROTOCOL_METHODS if not callable(getattr(runtime, m, None)))
        raise ConfigError(f"{where} {verb} {_a(runtime)}, not a StageRuntime (it lacks {lacks})")
