"""A malformed pipeline says FILE:LINE: reason (file) or raises ConfigError (Python); nothing is accepted silently."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import omni_fsm
from omni_fsm import StageKind
from omni_runtime import (
    INPUT_ADAPTERS,
    OmniRuntimeError,
    Orchestrator,
    Pipeline,
    PipelineError,
    StageSpec,
    load_pipeline,
)
from omni_runtime.apps.cli import main
from omni_runtime.core.adapters import ADAPTER_KINDS
from omni_runtime.core.pipeline import EXAMPLES, example_pipeline, parse_pipeline, require_pipeline, simple_pipeline
from omni_runtime.errors import ConfigError

AR, DIFF = StageKind.AR, StageKind.DIFFUSION
ONE = "[[stages]]\nkind = 'ar'\nfinal = true\n"  # a valid one-stage pipeline, lines 1-3
AR_THEN = "[[stages]]\nkind = 'ar'\n\n[[stages]]\n"  # stage 1's table starts at line 4

MALFORMED = [
    # (text, line, reason)
    ("[[stages]]\nkind = 'ar'\nfinal = true\nreplicas = 0\n", 4, "replicas must be at least 1"),
    ("[[stages]]\nkind = 'gpu'\nfinal = true\n", 2, "unknown kind 'gpu'"),
    ("[[stages]]\nkind = 5\nfinal = true\n", 2, "unknown kind 5"),
    ("[[stages]]\nfinal = true\n", 1, "stage needs a kind"),
    ("[[stages]]\nkind = 'ar'\nfinal = false\n", 3, "last stage must have final = true"),
    (ONE + "\n[[stages]]\nkind = 'ar'\nfinal = true\nadapter = 'x'\n", 8, "unknown adapter 'x'"),
    (ONE + "colour = 1\n", 4, "unknown stage key 'colour'"),
    (ONE + "replica = 2\n", 4, "did you mean 'replicas'?"),
    (ONE + "[stages.extra]\nx = 1\n", 4, "unknown stage key 'extra'"),
    ("[[stages]]\nkind = 'ar'\n", 1, "last stage must have final = true"),
    ("[[stages]]\nkind = 'ar\n", 2, "not valid TOML"),
    # wrong types are refused, not converted
    (ONE + "name = 5\n", 4, "name must be a string, not 5"),
    (ONE + "name = ''\n", 4, "stage 0: name must not be empty or blank"),
    (ONE + "name = '   '\n", 4, "stage 0: name must not be empty or blank"),
    (ONE + "replicas = 100000000\n", 4, "stage 0: replicas must be at most 1024"),
    ("stages = [{kind = 'ar'}, {kind = 'ar', final = true, adapter = 'ar2ar', replicas = -1}]\n", 1,
     "stage 1: replicas must be at least 1"),
    ("[[stages]]\nkind = 'ar'\nfinal = 'yes'\n", 3, "final must be true or false"),
    (ONE + "replicas = 1.5\n", 4, "replicas must be an integer"),
    (ONE + "max_running = true\n", 4, "max_running must be an integer"),
    (ONE + "steps = 0\n", 4, "steps must be at least 1"),
    # [pipeline]: unknown keys, wrong types, found in its own table
    ("[pipeline]\ncapcity = 3\n\n" + ONE, 2, "unknown [pipeline] key 'capcity' (did you mean 'capacity'?)"),
    ("[pipeline]\nname = 5\n\n" + ONE, 2, "name must be a string, not 5"),
    ("[pipeline]\nname = ''\n\n" + ONE, 2, "name must not be empty"),
    ("[pipeline]\ncapacity = -1\n\n" + ONE, 2, "capacity must be at least 0"),
    ("[pipeline]\ncapacity = true\n\n" + ONE, 2, "capacity must be an integer"),
    ("[pipeline]\ncapacity = '4'\n\n" + ONE, 2, "capacity must be an integer"),
    ("[[stages]]\nname = 'a'\nkind = 'ar'\nfinal = true\n\n[pipeline]\nname = 5\n", 7, "name must be a string"),
    ("[pipeline.extra]\nx = 1\n\n" + ONE, 1, "unknown [pipeline] key 'extra'"),
    ("pipeline = 3\n" + ONE, 1, "'pipeline' must be a table"),
    # unknown top-level keys and tables
    (ONE + "\n[extra]\nx = 1\n", 5, "unknown top-level table 'extra'"),
    ("colour = 'red'\n" + ONE, 1, "unknown top-level key 'colour'"),
    ("[pipelines]\nname = 'x'\n\n" + ONE, 1, "unknown top-level table 'pipelines'"),
    # stages missing or of the wrong shape
    ("", 1, "need at least one [[stages]] table"),
    ("# no stages\nstages = []\n", 2, "need at least one [[stages]] table"),
    ("[pipeline]\nname = 'x'\nstages = []\n", 3, "unknown [pipeline] key 'stages'"),
    ("[stages]\nkind = 'ar'\nfinal = true\n", 1, "need at least one [[stages]] table"),
    ("stages = [1]\n", 1, "a stage must be a table"),
    # duplicate stage names
    ("[[stages]]\nname = 'a'\nkind = 'ar'\n\n[[stages]]\nname = 'a'\nkind = 'ar'\nfinal = true\nadapter = 'ar2ar'\n", 6,
     "stage name 'a' is already used by stage 0"),
    # adapters must fit the stage's kind and its upstream stage's kind
    (AR_THEN + "kind = 'diffusion'\nfinal = true\nadapter = 'ar2ar'\n", 7,
     "adapter 'ar2ar' cannot feed stage 1 (kind 'diffusion') from stage 0 (kind 'ar'): use adapter = 'ar2diffusion'"),
    (AR_THEN + "kind = 'ar'\nfinal = true\nadapter = 'ar2diffusion'\n", 7,
     "adapter 'ar2diffusion' cannot feed stage 1 (kind 'ar') from stage 0 (kind 'ar'): use adapter = 'ar2ar'"),
    (AR_THEN + "kind = 'ar'\nfinal = true\nadapter = 'prompt'\n", 7, "adapter 'prompt' cannot feed stage 1"),
    ("[[stages]]\nkind = 'diffusion'\n\n[[stages]]\nkind = 'ar'\nfinal = true\nadapter = 'ar2ar'\n", 7,
     "no input adapter can feed stage 1 (kind 'ar') from stage 0 (kind 'diffusion')"),
    ("[[stages]]\nkind = 'ar'\nfinal = true\nadapter = 'ar2ar'\n", 4, "stage 0 takes the client's prompt"),
    (AR_THEN + "kind = 'ar'\nfinal = true\n", 4, "a later stage needs an input adapter"),
    # AR-only keys on a diffusion stage would be ignored: refused
    (AR_THEN + "kind = 'diffusion'\nfinal = true\nadapter = 'ar2diffusion'\n[stages.sampling]\ntemperature = 0.0\n",
     8, "stage 1: sampling is for AR stages only"),
    (AR_THEN + "kind = 'diffusion'\nfinal = true\nadapter = 'ar2diffusion'\nmax_tokens = 4\n", 8,
     "stage 1: max_tokens is for AR stages only"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "why"), MALFORMED)
def test_malformed_pipeline_names_file_and_line(tmp_path, capsys, text, line, why):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PipelineError) as info:
        load_pipeline(str(path))
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert why in str(info.value)
    assert main([str(path), "--no-progress", "--trace", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: " in err and "Traceback" not in err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"\xff\xfe[[stages]]", 1), (b"[[stages]]\nkind = 'ar'\nname = '\xe9'\nfinal = true\n", 3)],
)
def test_non_utf8_pipeline_names_file_and_line(tmp_path, capsys, data, line):
    path = tmp_path / "bin.toml"
    path.write_bytes(data)
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(path))}:{line}: not UTF-8 text"):
        load_pipeline(path)
    assert main([str(path), "--no-progress", "--trace", str(tmp_path / "t.jsonl")]) == 2
    assert f"omni-run: {path}:{line}: not UTF-8" in capsys.readouterr().err


def test_a_byte_order_mark_is_not_part_of_the_pipeline(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + ONE.encode())
    assert load_pipeline(path).kinds == (AR,)


def test_unreadable_pipeline_names_the_file(tmp_path):
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(tmp_path))}:0: cannot read"):
        load_pipeline(tmp_path)  # a directory


def test_well_formed_pipeline_keeps_every_field():
    text = ("[pipeline]\nname = 'p'\ncapacity = 6\n\n[[stages]]\nname = 'a'\nkind = 'ar'\nreplicas = 2\n"
            "max_running = 3\nmax_tokens = 5\n\n[[stages]]\nkind = 'diffusion'\nfinal = true\n"
            "adapter = 'ar2diffusion'\nsteps = 7\n")  # fmt: skip
    p = parse_pipeline(text)
    assert (p.name, p.capacity, p.kinds, p.final) == ("p", 6, (AR, DIFF), (False, True))
    assert p.stages[0] == StageSpec("a", AR, False, 2, 3, "prompt", 5, 4)
    assert p.stages[1] == StageSpec("stage1", DIFF, True, 1, 4, "ar2diffusion", 8, 7)


def test_parse_pipeline_wants_text():
    with pytest.raises(ConfigError, match="str, not bytes"):
        parse_pipeline(ONE.encode())  # type: ignore[arg-type]


# -- the same checks from Python: ConfigError, which is also an OmniRuntimeError and a ValueError -------------


def test_config_error_is_the_package_error_omni_fsms_and_a_value_error():
    assert issubclass(ConfigError, OmniRuntimeError) and issubclass(ConfigError, ValueError)
    assert issubclass(ConfigError, omni_fsm.ConfigError)  # one except clause for a bad argument to either package


def test_the_orchestrators_signature_shows_the_spec_by_name() -> None:
    shown = str(inspect.signature(Orchestrator.__init__))
    assert "spec: 'Spec' = <Spec 'omni-fsm lifecycle': " in shown and "Row(" not in shown


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (lambda: Pipeline(()), "at least one stage"),
        (lambda: Pipeline((StageSpec("a", AR),)), "the last stage must have final = true"),
        (lambda: Pipeline("x.toml"), "stages must be a tuple of StageSpec"),  # type: ignore[arg-type]
        (lambda: Pipeline((StageSpec("a", AR, True),), name=5), "name must be a string"),  # type: ignore[arg-type]
        (lambda: Pipeline((StageSpec("a", AR, True),), capacity=-1), "capacity must be at least 0"),
        (lambda: Pipeline((StageSpec("a", AR), StageSpec("a", AR, True, adapter="ar2ar"))), "already used"),
        (
            lambda: Pipeline((StageSpec("a", AR), StageSpec("b", DIFF, True, adapter="ar2ar"))),
            "stage 1 ('b'): adapter 'ar2ar' cannot feed stage 1",
        ),
        (lambda: Pipeline((StageSpec("a", AR), StageSpec("b", AR, True))), "adapter 'prompt' cannot feed stage 1"),
        (lambda: Pipeline((StageSpec("a", AR, adapter="ar2ar"),)), "stage 0 takes the client's prompt"),
        (
            lambda: Pipeline((StageSpec("a", DIFF, True, sampling={"seed": 1}),)),
            "stage 0 ('a'): sampling is for AR stages only",
        ),
        (lambda: StageSpec("a", "ar"), "kind must be a StageKind"),  # type: ignore[arg-type]
        (lambda: StageSpec("a", AR, replicas=0), "replicas must be at least 1"),
        (lambda: StageSpec("a", AR, max_running=True), "max_running must be an integer"),
        (lambda: StageSpec("a", AR, final=1), "final must be true or false"),  # type: ignore[arg-type]
        (lambda: StageSpec("a", AR, adapter="x"), "unknown adapter 'x'"),
        (lambda: StageSpec(5, AR), "name must be a string"),  # type: ignore[arg-type]
        (lambda: simple_pipeline([AR, AR], final=[True]), "2 kinds but 1 final flags"),
        (lambda: simple_pipeline([DIFF, AR]), "no input adapter can feed stage 1"),
        (lambda: simple_pipeline([]), "at least one stage"),
    ],
)
def test_bad_arguments_raise_config_error(build, why):
    with pytest.raises(ConfigError) as info:
        build()
    assert why in str(info.value)


def test_stages_may_be_a_list():
    assert Pipeline([StageSpec("a", AR, True)]).stages == (StageSpec("a", AR, True),)


def test_simple_pipeline_picks_fitting_adapters():
    p = simple_pipeline([AR, AR, DIFF], final=[False, True, True])
    assert [s.adapter for s in p.stages] == ["prompt", "ar2ar", "ar2diffusion"]


def test_every_input_adapter_declares_its_kinds():
    assert ADAPTER_KINDS.keys() == INPUT_ADAPTERS.keys()


@pytest.mark.parametrize("wrong", ["x.toml", Path("x.toml"), None, ()])
def test_require_pipeline_names_the_caller(wrong):
    with pytest.raises(ConfigError, match=r"^Engine wants a Pipeline, not ") as info:
        require_pipeline(wrong, "Engine")
    assert ("load_pipeline(path)" in str(info.value)) == isinstance(wrong, str | Path)


def test_require_pipeline_returns_a_pipeline():
    p = simple_pipeline([AR])
    assert require_pipeline(p, "Engine") is p


def test_the_packaged_examples_are_the_checkouts_examples():
    assert sorted(EXAMPLES) == sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_packaged_example_is_the_checkouts_and_loads(name):
    path = example_pipeline(name)
    assert path.read_bytes() == (Path(__file__).resolve().parents[2] / "examples" / f"{name}.toml").read_bytes()
    assert load_pipeline(path).stages


def test_an_unknown_example_names_the_known_ones():
    with pytest.raises(ConfigError, match=rf"no example pipeline 'nope' \(known: {re.escape(', '.join(EXAMPLES))}\)"):
        example_pipeline("nope")
