"""The pipeline description: stages, their kinds, final-output flags and input adapters.

Built in Python (``Pipeline``, ``StageSpec``, ``simple_pipeline``: a bad argument raises ``ConfigError``)
or loaded from TOML (``load_pipeline``: a malformed file raises ``PipelineError`` as ``FILE:LINE: reason``).
Both are judged by the same field and pipeline checks below, so they give the same reasons. The example
pipelines (the checkout's ``examples/``) ship with the package: ``example_pipeline(name)`` is the path of one.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from omni_fsm import StageKind
from omni_fsm.errors import MalformedInput
from omni_fsm.registry import toml_lines  # public: both packages find TOML lines one way
from omni_runtime.core.adapters import ADAPTER_KINDS, INPUT_ADAPTERS
from omni_runtime.core.prompts import SAMPLING_FIELDS, Sampling
from omni_runtime.errors import ConfigError, PipelineError

_STAGE_FIELDS: dict[str, type] = {"name": str, "kind": StageKind, "final": bool, "replicas": int, "max_running": int,
                                  "adapter": str, "max_tokens": int, "steps": int, "sampling": dict,
                                  "placement": dict}  # fmt: skip
_PIPELINE_FIELDS: dict[str, type] = {"name": str, "capacity": int}
_MINIMUM = {"replicas": 1, "max_running": 1, "max_tokens": 1, "steps": 1, "capacity": 0}
_MAXIMUM = {"replicas": 1024}  #: a replica is a runtime made at start: more would only exhaust memory
_TYPE_WORDS = {str: "a string", bool: "true or false", int: "an integer", StageKind: "a StageKind",
               dict: "a table of sampling parameters ([stages.sampling])"}  # fmt: skip
#: the keys only an AR stage reads: a diffusion stage that sets one is refused (it would be ignored silently)
AR_ONLY_KEYS = ("max_tokens", "sampling")
#: ``[stages.placement]``: where a stage's replicas run, for a runtime that places them (``omni_runtime.hosting.ray``):
#: the runtime each replica runs, CPUs and GPUs, custom resources (``{name = amount}``), a node (IP or node id)
PLACEMENT_FIELDS: dict[str, type | tuple[type, ...]] = {"runtime": str, "num_cpus": (int, float),
                                                        "num_gpus": (int, float), "resources": dict, "node": str}


def _field_problem(fields: dict[str, type], key: str, value: Any) -> str | None:
    """Return why ``value`` is not a valid ``key`` of a stage or pipeline (``None``: it is)."""
    want = fields[key]
    if want is dict and isinstance(value, tuple):  # a StageSpec's sampling overrides, as stored
        value = dict(value) if all(isinstance(p, tuple) and len(p) == 2 for p in value) else value
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        word = "a table ([stages.placement])" if key == "placement" else _TYPE_WORDS[want]
        return f"{key} must be {word}, not {value!r}"
    if isinstance(value, int) and want is int and value < _MINIMUM[key]:
        return f"{key} must be at least {_MINIMUM[key]}"
    if isinstance(value, int) and want is int and value > _MAXIMUM.get(key, value):
        return f"{key} must be at most {_MAXIMUM[key]}"
    if isinstance(value, str) and not value.strip():
        return f"{key} must not be empty or blank"
    if key == "adapter" and value not in INPUT_ADAPTERS:
        return f"unknown adapter {value!r} (known: {', '.join(sorted(INPUT_ADAPTERS))})"
    if key == "sampling":
        return _sampling_problem(value)
    if key == "placement":
        return _placement_problem(value)
    return None


def _placement_problem(placement: Any) -> str | None:
    """Return why ``placement`` is not a valid ``[stages.placement]`` table (``None``: it is)."""
    for name, value in placement.items():
        reason = _unknown(name, PLACEMENT_FIELDS, "placement key")
        if reason is not None:
            return reason
        if name == "resources" and isinstance(value, tuple):  # as stored: (name, amount) pairs
            value = dict(value)
        if name in ("runtime", "node"):
            if not isinstance(value, str) or not value.strip():
                return f"placement: {name} must be a non-blank string, not {value!r}"
            continue
        if name == "resources" and not isinstance(value, dict):
            return f"placement: resources must be a table of amounts ({{name = amount}}), not {value!r}"
        for what, amount in (value if name == "resources" else {name: value}).items():
            if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
                return f"placement: {what} must be a number >= 0, not {amount!r}"
    return None


def _sampling_problem(overrides: Any) -> str | None:
    """Return why ``overrides`` are not valid sampling parameters (``None``: they are)."""
    for name in overrides:
        reason = _unknown(name, SAMPLING_FIELDS, "sampling parameter")
        if reason is not None:
            return reason
    try:
        Sampling(**overrides)
    except (TypeError, ValueError) as exc:
        return f"sampling: {str(exc).removeprefix('Sampling.')}"
    return None


def _overrides(value: Any) -> Any:
    """Store sampling overrides (or a placement) as sorted (name, value) pairs (hashable; lists as tuples, tables
    as pairs)."""
    if not isinstance(value, dict):
        return value
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else _overrides(v)) for k, v in value.items()))


def _check_field(fields: dict[str, type], owner: str) -> Callable[[Any, Any, Any], None]:
    """Return an attrs validator that raises ``ConfigError`` naming ``owner`` and the field."""

    def check(instance: Any, attribute: Any, value: Any) -> None:
        reason = _field_problem(fields, attribute.name, value)
        if reason is not None:
            raise ConfigError(f"{owner}: {reason}")

    return check


_stage_field = _check_field(_STAGE_FIELDS, "StageSpec")
_pipeline_field = _check_field(_PIPELINE_FIELDS, "Pipeline")


@attrs.frozen
class StageSpec:
    """One logical stage: what it is and how many replicas serve it."""

    name: str = attrs.field(validator=_stage_field)
    kind: StageKind = attrs.field(validator=_stage_field)
    final: bool = attrs.field(default=False, validator=_stage_field)
    replicas: int = attrs.field(default=1, validator=_stage_field)
    max_running: int = attrs.field(default=4, validator=_stage_field)  #: running slots of one replica
    #: input adapter from the previous stage (``prompt`` for stage 0; see ``ADAPTER_KINDS``)
    adapter: str = attrs.field(default="prompt", validator=_stage_field)
    max_tokens: int = attrs.field(default=8, validator=_stage_field)  #: AR: tokens generated at most (simulator)
    steps: int = attrs.field(default=4, validator=_stage_field)  #: diffusion: denoising steps (simulator)
    #: AR: sampling parameters that override the request's at this stage (``[stages.sampling]``), as (name, value)
    sampling: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_overrides, validator=_stage_field)
    #: where the replicas run, for a runtime that places them (``[stages.placement]``, ``PLACEMENT_FIELDS``), as pairs
    placement: tuple[tuple[str, Any], ...] = attrs.field(default=(), converter=_overrides, validator=_stage_field)


def _as_tuple(stages: Any) -> Any:
    return tuple(stages) if isinstance(stages, list) else stages


@attrs.frozen
class Pipeline:
    """An ordered list of stages; the last one is a final-output stage."""

    stages: tuple[StageSpec, ...] = attrs.field(converter=_as_tuple)
    name: str = attrs.field(default="pipeline", validator=_pipeline_field)
    capacity: int = attrs.field(default=0, validator=_pipeline_field)  #: lifecycle slots per stage (0: derived)

    def __attrs_post_init__(self) -> None:
        problem = _pipeline_problem(self.stages)
        if problem is not None:
            stage, _, reason = problem
            where = "" if stage is None else f"stage {stage} ({self.stages[stage].name!r}): "
            raise ConfigError(f"Pipeline: {where}{reason}")

    @property
    def kinds(self) -> tuple[StageKind, ...]:
        """Return each stage's kind."""
        return tuple(s.kind for s in self.stages)

    @property
    def final(self) -> tuple[bool, ...]:
        """Return each stage's final-output flag."""
        return tuple(s.final for s in self.stages)

    @property
    def slots(self) -> int:
        """Return the lifecycle's capacity: declared, or twice the largest stage's running slots."""
        return self.capacity or 2 * max(s.replicas * s.max_running for s in self.stages)


def custom_resources(pipeline: Pipeline) -> dict[str, float]:
    """Return the custom resources every replica of ``pipeline`` asks for together (its ``[stages.placement]``)."""
    needs: dict[str, float] = {}
    for spec in pipeline.stages:
        for name, amount in dict(dict(spec.placement).get("resources", ())).items():
            needs[name] = needs.get(name, 0.0) + float(amount) * spec.replicas
    return needs


def fitting_adapters(upstream: StageKind | None, kind: StageKind) -> list[str]:
    """Return the input adapters that feed a ``kind`` stage from an ``upstream`` stage (``None``: the prompt)."""
    return [name for name, (source, feeds) in ADAPTER_KINDS.items() if source is upstream and kind in feeds]


def _adapter_problem(i: int, spec: StageSpec, upstream: StageSpec | None) -> str | None:
    """Return why stage ``i``'s adapter does not fit its kind and its upstream stage's kind (``None``: it fits)."""
    fits = fitting_adapters(upstream.kind if upstream else None, spec.kind)
    if spec.adapter in fits:
        return None
    if upstream is None:
        return "stage 0 takes the client's prompt: adapter = 'prompt'"
    route = f"stage {i} (kind {spec.kind.value!r}) from stage {i - 1} (kind {upstream.kind.value!r})"
    if not fits:
        return f"no input adapter can feed {route}"
    return f"adapter {spec.adapter!r} cannot feed {route}: use adapter = {fits[0]!r}"


def _pipeline_problem(stages: Any) -> tuple[int | None, str | None, str] | None:
    """Return ``(stage, key, reason)`` for the first thing wrong with ``stages`` as a whole, or ``None``."""
    if not isinstance(stages, tuple) or not all(isinstance(s, StageSpec) for s in stages):
        return None, None, f"stages must be a tuple of StageSpec, not {stages!r}"
    if not stages:
        return None, None, "a pipeline needs at least one stage"
    first: dict[str, int] = {}
    for i, spec in enumerate(stages):
        if spec.name in first:
            return i, "name", f"stage name {spec.name!r} is already used by stage {first[spec.name]}"
        first[spec.name] = i
        if spec.kind is StageKind.DIFFUSION and spec.sampling:
            return i, "sampling", _ar_only("sampling")
        reason = _adapter_problem(i, spec, stages[i - 1] if i else None)
        if reason is not None:
            return i, "adapter", reason
    if not stages[-1].final:
        return len(stages) - 1, "final", "the last stage must have final = true"
    return None


def require_pipeline(pipeline: Any, who: str) -> Pipeline:
    """Return ``pipeline`` if it is a ``Pipeline``; raise ``ConfigError`` naming the caller ``who`` otherwise."""
    if isinstance(pipeline, Pipeline):
        return pipeline
    hint = " (read a TOML file with load_pipeline(path))" if isinstance(pipeline, str | os.PathLike) else ""
    raise ConfigError(f"{who} wants a Pipeline, not {type(pipeline).__name__} {pipeline!r}{hint}")


def simple_pipeline(kinds: Sequence[StageKind], final: Sequence[bool] | None = None, replicas: int = 1,
                    max_running: int = 4, max_tokens: int = 6, steps: int = 3) -> Pipeline:  # fmt: skip
    """Return a pipeline of the given kinds with fitting adapters (for tests and benchmarks)."""
    kinds = tuple(kinds)
    final = tuple(final) if final is not None else tuple(i == len(kinds) - 1 for i in range(len(kinds)))
    if len(final) != len(kinds):
        raise ConfigError(f"simple_pipeline: {len(kinds)} kinds but {len(final)} final flags")
    stages: list[StageSpec] = []
    for i, kind in enumerate(kinds):
        fits = fitting_adapters(kinds[i - 1] if i else None, kind) if isinstance(kind, StageKind) else []
        adapter = fits[0] if fits else "prompt"  # no fitting adapter: Pipeline names the stage
        stages.append(StageSpec(f"s{i}", kind, final[i], replicas, max_running, adapter, max_tokens, steps))
    return Pipeline(tuple(stages))


# -- TOML ----------------------------------------------------------------------------------

#: the packaged example pipelines: ``examples/NAME.toml`` of the checkout, shipped in the wheel
EXAMPLES = ("pipeline", "vllm_pipeline", "ray_pipeline", "diffusion_pipeline", "thinker_talker_hidden",
            "thinker_talker_tokens")  # fmt: skip


def example_pipeline(name: str = "pipeline") -> Path:
    """Return the path of the packaged example pipeline file ``NAME.toml`` (one of ``EXAMPLES``)."""
    if name not in EXAMPLES:
        raise ConfigError(f"no example pipeline {name!r} (known: {', '.join(EXAMPLES)})")
    # a link to the checkout's examples/ (editable install) or a copy (wheel); pip unpacks wheels: a file
    return Path(str(resources.files("omni_runtime") / "_data" / "examples" / f"{name}.toml"))


def load_pipeline(path: str | os.PathLike[str]) -> Pipeline:
    """Return the pipeline described by the TOML file at ``path``; raise ``PipelineError``."""
    try:
        text = toml_lines.read(Path(path), str(path))
    except MalformedInput as exc:
        raise PipelineError(exc.path, exc.line, exc.reason) from None
    return parse_pipeline(text, str(path))


def parse_pipeline(text: str, path: str = "<pipeline>") -> Pipeline:
    """Return the pipeline described by TOML ``text``; raise ``PipelineError`` naming ``path``."""
    if not isinstance(text, str):
        raise ConfigError(f"parse_pipeline wants the TOML text as str, not {type(text).__name__}")
    try:
        doc = toml_lines.loads(text, path)
    except MalformedInput as exc:
        raise PipelineError(exc.path, exc.line, exc.reason) from None
    lines = toml_lines.Lines(text)
    for key, value in doc.items():
        if key not in ("pipeline", "stages"):
            what = "table" if isinstance(value, dict) else "key"
            raise PipelineError(path, lines.find(None, key=key),
                                f"unknown top-level {what} {key!r} (known: [pipeline], [[stages]])")  # fmt: skip
    head: Any = doc.get("pipeline", {})
    if not isinstance(head, dict):
        raise PipelineError(path, lines.find(None, key="pipeline"), "'pipeline' must be a table: [pipeline]")
    for key, value in head.items():
        reason = _unknown(key, _PIPELINE_FIELDS, "[pipeline] key") or _field_problem(_PIPELINE_FIELDS, key, value)
        if reason is not None:
            raise PipelineError(path, lines.find("pipeline", key=key), reason)
    raw = doc.get("stages")
    if not isinstance(raw, list) or not raw:
        line = lines.find(None, key="stages") if "stages" in doc else 1
        raise PipelineError(path, line, "need at least one [[stages]] table")
    stages = tuple(_stage(lines, path, i, entry) for i, entry in enumerate(raw))
    problem = _pipeline_problem(stages)
    if problem is not None:
        stage, field, reason = problem
        raise PipelineError(path, lines.find("stages", stage or 0, field), reason)
    return Pipeline(stages, head.get("name", "pipeline"), head.get("capacity", 0))


def _ar_only(key: str) -> str:
    """Return why a diffusion stage may not set the AR-only ``key``."""
    return f"{key} is for AR stages only: a diffusion stage would ignore it (its denoising is set by steps)"


def _unknown(key: str, fields: Mapping[str, object], what: str) -> str | None:
    if key in fields:
        return None
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(fields)}"
    return f"unknown {what} {key!r} ({hint})"


def _stage(lines: toml_lines.Lines, path: str, i: int, entry: Any) -> StageSpec:
    if not isinstance(entry, dict):
        raise PipelineError(path, lines.find("stages", i), "a stage must be a table")
    fields = dict(entry)
    for key, value in entry.items():
        reason = _unknown(key, _STAGE_FIELDS, "stage key")
        if reason is None and key == "kind":
            try:
                fields["kind"] = StageKind(value)
            except ValueError:
                known = " or ".join(repr(k.value) for k in StageKind)
                reason = f"unknown kind {value!r} (known: {known})"
        reason = reason or _field_problem(_STAGE_FIELDS, key, fields[key])
        if reason is not None:
            raise PipelineError(path, lines.find("stages", i, key), f"stage {i}: {reason}")
    if "kind" not in fields:
        raise PipelineError(path, lines.find("stages", i), "stage needs a kind ('ar' or 'diffusion')")
    if fields["kind"] is StageKind.DIFFUSION:
        for key in (k for k in AR_ONLY_KEYS if k in fields):
            raise PipelineError(path, lines.find("stages", i, key), f"stage {i}: {_ar_only(key)}")
    if i > 0 and "adapter" not in fields:
        raise PipelineError(path, lines.find("stages", i), "a later stage needs an input adapter")
    fields.setdefault("name", f"stage{i}")
    return StageSpec(**fields)
