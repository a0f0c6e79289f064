"""The conformance state machine: Hypothesis drives one runtime replica and judges its raw stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from omni_fsm import ControlMethod, StageKind
from omni_runtime.adapters import StageInput
from omni_runtime.pipeline import StageSpec
from omni_runtime.protocol import StageRuntime
from omni_runtime.testing._checker import RawStreamChecker

#: (stage spec, stage index, replica, rpc_fails) -> a runtime; ``rpc_fails``: its workers raise in RPCs
KitFactory = Callable[[StageSpec, int, int, bool], StageRuntime]


def stage_specs() -> st.SearchStrategy[StageSpec]:
    """Return a strategy for one stage's description."""
    return st.builds(StageSpec, name=st.just("s"), kind=st.sampled_from(list(StageKind)), final=st.just(True),
                     replicas=st.just(1), max_running=st.integers(1, 4), max_tokens=st.integers(1, 8),
                     steps=st.integers(1, 4))  # fmt: skip


#: what a ``StageRuntime`` implements
_PROTOCOL_METHODS = ("bind", "add_request", "abort_requests", "control", "step", "shutdown")


class ConformanceError(AssertionError):
    """A runtime broke its protocol; the message names the invariant."""


def make_machine(factory: KitFactory, rpc_fails: bool = False, may_die: bool = False) -> type[RuleBasedStateMachine]:
    """Return a ``RuleBasedStateMachine`` checking runtimes made by ``factory`` (``may_die``: see the checker)."""

    class RuntimeConformance(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.checker = RawStreamChecker(may_die)
            self.runtime: Any = None
            self.next_id = 0

        @initialize(spec=stage_specs())
        def start(self, spec: StageSpec) -> None:
            self.spec = spec
            runtime = factory(spec, 0, 0, rpc_fails)
            if not isinstance(runtime, StageRuntime):  # (teardown then has nothing to drive)
                lacks = [m for m in _PROTOCOL_METHODS if not callable(getattr(runtime, m, None))]
                raise ConformanceError(f"the factory made a {type(runtime).__name__}, not a StageRuntime "
                                       f"(it lacks {', '.join(lacks)})")  # fmt: skip
            self.runtime = runtime
            self.runtime.bind(self.checker)

        @rule(tokens=st.lists(st.integers(0, 99), max_size=4))
        def add(self, tokens: list[int]) -> None:
            self.checker.added(self.next_id)
            diffusion = self.spec.kind is StageKind.DIFFUSION
            mm = {"prior": tuple(tokens), "negative": (), "size": (8, 8)} if diffusion else None
            self.runtime.add_request(self.next_id, StageInput(tuple(tokens), mm))
            self.next_id += 1

        @precondition(lambda self: self.next_id > 0)
        @rule(data=st.data())
        def abort(self, data: st.DataObject) -> None:
            req = data.draw(st.integers(0, self.next_id - 1))
            abort_id = 1000 + len(self.checker.asked_aborts)
            self.checker.aborting(abort_id, [req])
            self.runtime.abort_requests(abort_id, [req])

        @rule(method=st.sampled_from(list(ControlMethod)))
        def control(self, method: ControlMethod) -> None:
            call = 10_000 + len(self.checker.rpcs)
            self.checker.rpc(call, rpc_fails)
            self.runtime.control(call, method, 1, frozenset())

        @rule()
        def step(self) -> None:
            self.runtime.step()

        @invariant()
        def stream_is_clean(self) -> None:
            if self.checker.violations:
                raise ConformanceError(str(self.checker.violations[0]))

        def teardown(self) -> None:
            if self.runtime is None:
                return
            for _ in range(500):
                if not self.runtime.step():
                    break
            self.runtime.step()
            self.runtime.shutdown()
            violations = self.checker.at_end()
            if violations:
                raise ConformanceError(str(violations[0]))

    RuntimeConformance.__name__ = f"RuntimeConformance[{getattr(factory, '__name__', 'runtime')}]"
    return RuntimeConformance
