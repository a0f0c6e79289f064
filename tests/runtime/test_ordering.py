"""Per request the client receives its messages in stage order, the terminal last; nothing is left after."""

from __future__ import annotations

from helpers import assert_stage_ordered, demo_pipeline, monitor_for, run_sync
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_runtime.runtimes.sim import SimConfig

request = st.one_of(
    st.tuples(st.just(1), st.just(0), st.integers(0, 6)),
    st.tuples(st.just(2), st.just(0), st.integers(0, 6)),
    st.tuples(st.just(1), st.just(1), st.integers(0, 6)),
)


@settings(max_examples=30)
@given(specs=st.lists(request, min_size=1, max_size=8), seed=st.integers(0, 10_000), faulty=st.booleans())
def test_messages_in_stage_order_terminal_last(specs, seed, faulty):
    pipeline = demo_pipeline()
    monitor = monitor_for(pipeline)
    config = SimConfig.faulty(0.2) if faulty else SimConfig.legal(0.2)
    seen = run_sync(pipeline, specs, seed, config, on_step=monitor.step)
    for messages in seen.values():
        assert_stage_ordered(messages)
    assert monitor.finish() == [] and monitor.violations == []
