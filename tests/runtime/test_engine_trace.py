"""``trace=`` records a run's trace from ``Engine`` and ``AsyncEngine``: header, every step, the end marker at
shutdown; ``omni-fsm check`` passes it."""

from __future__ import annotations

import asyncio
import io

import pytest

import omni_fsm.cli
from omni_fsm import Outcome, StageKind
from omni_fsm.trace import TraceWriter, read_trace
from omni_runtime import AsyncEngine, ConfigError, Engine, Prompt, simple_pipeline

PIPELINE = simple_pipeline([StageKind.AR, StageKind.AR], replicas=2, max_tokens=3)


def test_engine_records_a_trace_that_passes_the_check(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    seen = []
    with Engine(PIPELINE, trace=path, on_step=lambda event, outputs: seen.append(event)) as engine:
        results = engine.generate([Prompt((1, 2)), Prompt((3,))])
        assert not path.exists()  # put in place with its end marker, at shutdown
    assert [r.outcome for r in results] == [Outcome.FINISHED, Outcome.FINISHED] and seen  # the hook still runs
    assert omni_fsm.cli.main(["check", str(path)]) == 0
    assert len(list(read_trace(path))) == len(seen)


@pytest.mark.parametrize("loop", ["event", "poll"])
def test_async_engine_records_a_trace_naming_its_loop(tmp_path, loop: str) -> None:
    path = tmp_path / "run.jsonl"

    async def main() -> None:
        async with AsyncEngine(PIPELINE, loop=loop, trace=str(path)) as engine:
            await engine.generate([Prompt((1,)), Prompt((2,))])

    asyncio.run(main())
    assert omni_fsm.cli.main(["check", str(path)]) == 0
    assert read_trace(path).header.loop == loop


def test_a_trace_writer_is_taken_too_and_anything_else_is_refused() -> None:
    stream = io.StringIO()
    with Engine(PIPELINE, trace=TraceWriter(stream)) as engine:
        engine.generate(Prompt((1,)))
    assert stream.getvalue().startswith('{"omni_fsm_trace"') and stream.getvalue().endswith('{"end":true}\n')
    with pytest.raises(ConfigError, match=r"trace is a path or an omni_fsm\.trace\.TraceWriter, not int"):
        Engine(PIPELINE, trace=3)  # type: ignore[arg-type]
