"""The conformance state machine: Hypothesis drives one runtime replica and judges its raw stream."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from omni_fsm import ControlMethod, StageKind
from omni_runtime.core.pipeline import StageSpec
from omni_runtime.core.prompts import StageInput
from omni_runtime.core.protocol import PROTOCOL_METHODS as _PROTOCOL_METHODS  # old name: the draws hash its source
from omni_runtime.core.protocol import RuntimeFactory, StageRuntime, StreamingInput
from omni_runtime.errors import ConfigError
from omni_runtime.testing._checker import RAISED, KitViolation, RawStreamChecker


def stage_specs(kinds: Collection[StageKind] = tuple(StageKind)) -> st.SearchStrategy[StageSpec]:
    """Return a strategy for one stage's description (of one of ``kinds``)."""
    return st.builds(StageSpec, name=st.just("s"), kind=st.sampled_from(sorted(kinds, key=list(StageKind).index)),
                     final=st.just(True),
                     replicas=st.just(1), max_running=st.integers(1, 4), max_tokens=st.integers(1, 8),
                     steps=st.integers(1, 4))  # fmt: skip


class ConformanceError(AssertionError):
    """A runtime broke its protocol; the message names the invariant."""


class KindRefused(ConformanceError):
    """The factory refused a stage of a kind the kit was told the runtime serves: the message says how to tell it."""

    def __init__(self, kind: StageKind, error: Exception) -> None:
        others = ",".join(k.value for k in StageKind if k is not kind)
        super().__init__(f"the factory refuses a {kind.value} stage ({error}): for a runtime that serves "
                         f"{others} stages only, pass --omni-runtime-kinds={others} (check_runtime(kinds=...))")


def _refusing_kinds(factory: RuntimeFactory[StageRuntime]) -> RuntimeFactory[StageRuntime]:
    """Return ``factory`` with a ``ConfigError`` it raises (a stage kind it does not serve, as docs/runtime.md tells a
    factory to say) turned into ``KindRefused``, which names the flag that tells the kit."""

    def made(spec: StageSpec, stage: int, replica: int, rpc_fails: bool, /) -> StageRuntime:
        try:
            return factory(spec, stage, replica, rpc_fails)
        except ConfigError as exc:
            raise KindRefused(spec.kind, exc) from None

    made.__name__ = getattr(factory, "__name__", "runtime")  # the machine is named after the runtime's factory
    return made


#: the kit's own calls that stop a runtime's work, and the call that undoes each (sent before the final judgement)
_UNDO = {ControlMethod.SLEEP: ControlMethod.WAKE_UP, ControlMethod.PAUSE_SCHEDULER: ControlMethod.RESUME_SCHEDULER}
_UNDOES = {undo: stop for stop, undo in _UNDO.items()}
#: the pause modes the kit asks for (``wait`` is left out: vLLM's in-process engine refuses it)
_PAUSE_TAGS: tuple[frozenset[str], ...] = (frozenset(), frozenset({"keep"}), frozenset({"abort"}))
#: requests ids are drawn from here, so that a runtime whose behaviour depends on the id varies between examples
_REQ_IDS = st.integers(0, 2**31 - 1)
#: an abort picks its requests by index (modulo the candidates), so that a rule can also be called by hand
_PICKS = st.lists(st.integers(0, 255), min_size=1, max_size=3)
#: how many of the kit's latest calls a runtime's exception shows (a run of the same call counts once)
_SHOWN_CALLS = 40
#: every rule but ``shutdown_now`` drives a running runtime: none is offered once the kit has shut it down
_RUNNING = precondition(lambda self: not self.stopped)


def teardown_steps(spec: StageSpec, requests: int) -> int:
    """Return how many steps teardown gives a runtime with ``requests`` accepted requests to go idle.

    Each request may run alone (``max_running=1``) at one token or denoising step per step, and
    wait a few steps more (parked, preempted, for a chunk, a late report); that is doubled for a
    slower runtime, with 100 steps more for RPCs.
    """
    return 2 * requests * (spec.max_tokens + spec.steps + 4) + 100


def make_machine(factory: RuntimeFactory[StageRuntime], rpc_fails: bool = False, may_die: bool = False,
                 kinds: Collection[StageKind] = tuple(StageKind), refused: Collection[ControlMethod] = (),
                 may_fail: bool = True) -> type[RuleBasedStateMachine]:  # fmt: skip
    """Return a ``RuleBasedStateMachine`` checking runtimes made by ``factory`` (``may_die``, ``may_fail``: see
    the checker)
    for stages of ``kinds`` (a runtime that serves AR stages only is checked on AR stages). ``refused``: control
    RPCs the runtime's engine does not support (vLLM's CPU build: sleep); each must be answered with an error
    and change nothing, as a worker's exception is.

    Request ids are drawn (unique, from a wide range), so a runtime whose behaviour follows the id,
    as the simulator's does, behaves differently from one example to the next. An abort names 1-3
    open requests in one call, as the orchestrator does; the requests whose latest report says they
    wait (preempted, parked, waiting for a chunk) are also aborted right after the step that said so,
    where an abort by status goes wrong (B5); and requests that have ended are aborted late.

    Teardown resumes (and wakes) a runtime the kit paused (or put to sleep), steps it until idle (at
    most ``teardown_steps``; a runtime still busy then is judged as such), and only then judges that
    every request ended and every RPC and abort was answered; then it shuts the runtime down (twice:
    ``shutdown`` is idempotent) and fails any report made from then on (ORCH-INV-300). With
    ``rpc_fails`` the kit's pause or sleep failed in a worker, so it did not take effect: the kit
    still sends the resume (whose answer must carry its error too) and demands the same progress.

    The kit may also shut the runtime down mid-run (``shutdown_now``, offered while it holds work: a
    request open, an abort or RPC unanswered, a pause or sleep held), as an engine stopped mid-run
    does: ``shutdown()`` must not raise (ORCH-INV-300, shutdown_stops_quietly) and nothing may be
    reported from then on, a flush of what it cut off included (no_report_after_shutdown). The
    runtime is then stopped: no other rule is offered (``shutdown_now`` stays offered: a repeated
    ``shutdown()`` must be quiet too), and teardown neither resumes nor steps it nor judges the
    finishes and answers the shutdown cut off; it only shuts it down once more.

    The stream is also judged as the engine would take it (``RawStreamChecker.serves``): a report the
    lifecycle has no row for fails the kit (AR-INV-001). A runtime that raises out of a call fails
    the kit under the rule that call's answer belongs to (``RAISED``), showing the calls that led
    to it; teardown then drives it no further.
    """
    factory = _refusing_kinds(factory)  # (outside the class: Hypothesis derandomizes the draws by its source)

    class RuntimeConformance(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.checker = RawStreamChecker(may_die, may_fail=may_fail)
            self.runtime: Any = None
            self.held: dict[ControlMethod, None] = {}  #: the kit's pause / sleep calls not undone yet, in order
            self.input_open: set[int] = set()  #: streaming-input sessions whose input has not ended
            self.calls: list[list[Any]] = []  #: the kit's calls of the runtime, in order: [what, times in a row]
            self.raised = False  #: a call raised: the runtime is not driven any more
            self.stopped = False  #: ``shutdown_now`` shut the runtime down: it is not driven any more

        def _call(self, name: str, *args: Any, shown: str | None = None, subject: int | None = None) -> Any:
            """Call the runtime's ``name`` (logged as ``shown``); an exception out of it fails the kit under the rule
            the call's answer belongs to, naming the call and the calls that led to it."""
            what = shown if shown is not None else f"{name}({', '.join(map(repr, args))})"
            calls = self.calls
            if calls and calls[-1][0] == what:
                calls[-1][1] += 1
            else:
                calls.append([what, 1])
            try:
                return getattr(self.runtime, name)(*args)
            except Exception as exc:
                self.raised = True
                invariant, check, owed = RAISED[name]
                violation = KitViolation(invariant, check, subject,
                                         f"{what} raised {type(exc).__name__}: {exc} ({owed})")  # fmt: skip
                raise ConformanceError(f"{violation}\n{self.sequence()}") from exc

        def sequence(self) -> str:
            """Return the kit's calls of the runtime so far (the latest ``_SHOWN_CALLS``), for a failure message."""
            total = sum(times for _, times in self.calls)
            lines = [f"the kit's calls of the runtime so far ({total}), for a stage {self.spec!r}:"]
            if len(self.calls) > _SHOWN_CALLS:
                earlier = sum(times for _, times in self.calls[:-_SHOWN_CALLS])
                lines.append(f"  ... {earlier} earlier calls")
            lines += [f"  {what}" + (f" x{times}" if times > 1 else "") for what, times in self.calls[-_SHOWN_CALLS:]]
            return "\n".join(lines)

        @initialize(spec=stage_specs(kinds))
        def start(self, spec: StageSpec) -> None:
            self.spec = spec
            runtime = factory(spec, 0, 0, rpc_fails)
            if not isinstance(runtime, StageRuntime):  # (teardown then has nothing to drive)
                lacks = [m for m in _PROTOCOL_METHODS if not callable(getattr(runtime, m, None))]
                raise ConformanceError(f"the factory made a {type(runtime).__name__}, not a StageRuntime "
                                       f"(it lacks {', '.join(lacks)})")  # fmt: skip
            self.runtime = runtime
            self.checker.serves(spec)
            self._call("bind", self.checker, shown="bind(<the kit's sink>)")

        @_RUNNING
        @rule(req_id=_REQ_IDS, tokens=st.lists(st.integers(0, 99), max_size=4), samples=st.integers(1, 3),
              streaming=st.booleans())  # fmt: skip
        def add(self, req_id: int, tokens: list[int], samples: int = 1, streaming: bool = False) -> None:
            """Add ``samples`` requests with one input (as the orchestrator adds a parent's samples); ``streaming``:
            streaming-input sessions, for an AR runtime that takes streamed input (``feed_input``)."""
            diffusion = self.spec.kind is StageKind.DIFFUSION
            mm = {"prior": tuple(tokens), "negative": (), "size": (8, 8)} if diffusion else None
            streaming = streaming and not diffusion and isinstance(self.runtime, StreamingInput)
            for _ in range(samples):
                while req_id in self.checker.accepted:  # ids are unique: a repeated draw takes the next free one
                    req_id = (req_id + 1) % 2**31
                self.checker.added(req_id)
                if streaming:
                    self.input_open.add(req_id)
                shown = f"add_request({req_id}, tokens={tuple(tokens)}{', streaming' if streaming else ''})"
                self._call("add_request", req_id, StageInput(tuple(tokens), mm, streaming=streaming), subject=req_id,
                           shown=shown)  # fmt: skip

        @_RUNNING
        @precondition(lambda self: self.input_open)
        @rule(pick=st.integers(0, 255), tokens=st.lists(st.integers(4, 99), max_size=3), last=st.booleans())
        def feed(self, pick: int, tokens: list[int], last: bool) -> None:
            """Feed the next part of a streaming-input session (``last``: its input ends)."""
            candidates = sorted(self.input_open)
            req_id = candidates[pick % len(candidates)]
            if last:
                self.input_open.discard(req_id)
            self._call("feed_input", req_id, StageInput(tuple(tokens)), last, subject=req_id,
                       shown=f"feed_input({req_id}, tokens={tuple(tokens)}, last={last})")  # fmt: skip

        @_RUNNING
        @precondition(lambda self: self.checker.open_requests())
        @rule(picks=_PICKS)
        def abort(self, picks: list[int]) -> None:
            """Abort 1-3 open requests in one call (the orchestrator aborts a parent's samples together)."""
            candidates = self.checker.open_requests()
            self._abort([candidates[p % len(candidates)] for p in picks])

        @_RUNNING
        @precondition(lambda self: self.checker.waiting)
        @rule()
        def abort_waiting(self) -> None:
            """Abort every request whose latest report says it is preempted or waits (for a chunk, a grammar...)."""
            self._abort(sorted(self.checker.waiting))

        @_RUNNING
        @precondition(lambda self: self.checker.accepted and not self.checker.open_requests())
        @rule(picks=_PICKS)
        def abort_late(self, picks: list[int]) -> None:
            """Abort 1-3 requests that have all ended (an abort that crossed their finish)."""
            candidates = sorted(self.checker.accepted)
            self._abort([candidates[p % len(candidates)] for p in picks])

        def _abort(self, req_ids: list[int]) -> None:
            batch = list(dict.fromkeys(req_ids))
            abort_id = 1000 + len(self.checker.asked_aborts)
            self.checker.aborting(abort_id, batch)
            self._call("abort_requests", abort_id, batch)

        @_RUNNING
        @rule(method=st.sampled_from(list(ControlMethod)), mode=st.sampled_from(_PAUSE_TAGS))
        def control(self, method: ControlMethod, mode: frozenset[str] = frozenset()) -> None:
            """Call a control RPC; a pause in ``mode`` (none: the default, keep; ``abort``: the engine ends every
            request in flight, each reported ``Aborted``)."""
            tags = mode if method is ControlMethod.PAUSE_SCHEDULER else frozenset()
            call = 10_000 + len(self.checker.rpcs)
            self.checker.rpc(call, rpc_fails or method in refused, aborts_all="abort" in tags)
            self._call("control", call, method, 1, tags, subject=call,
                       shown=f"control({call}, {method.value}, 1, tags={sorted(tags)})")  # fmt: skip
            if method in refused:
                return
            if method in _UNDO:
                self.held[method] = None
            else:
                self.held.pop(_UNDOES[method], None)

        @_RUNNING
        @rule(steps=st.integers(1, 4))
        def step(self, steps: int) -> None:
            """Run up to ``steps`` steps, stopping at one after which a request waits (so an abort can land there)."""
            for _ in range(steps):
                self._call("step")
                if self.checker.waiting:
                    break

        @_RUNNING
        @rule(steps=st.integers(1, 4))
        def step_then_abort_waits(self, steps: int) -> None:
            """Run up to ``steps`` steps; once a request reports that it waits, abort it there and then."""
            self.step(steps)
            if self.checker.waiting:
                self.abort_waiting()

        def holds_work(self) -> bool:
            """Return whether the runtime holds work the kit asked for: a request open, an abort or RPC not answered,
            a pause or sleep not undone."""
            checker = self.checker
            owed = any(checker.asked_aborts.values()) or set(checker.rpcs) - checker.answered
            return bool(checker.open_requests() or owed or self.held)

        @precondition(lambda self: self.stopped or self.holds_work())
        @rule()
        def shutdown_now(self) -> None:
            """Shut the runtime down where it stands (an idle one is teardown's): what it holds is cut off, unreported;
            once stopped, the same call again (``shutdown`` is idempotent)."""
            self.stopped = True
            self.checker.shut_down()
            self._call("shutdown")

        @invariant()
        def stream_is_clean(self) -> None:
            if self.checker.violations:
                raise ConformanceError(str(self.checker.violations[0]))

        def teardown(self) -> None:
            if self.runtime is None or self.raised:
                return
            if self.stopped:  # what its shutdown cut off is owed no more: it is only shut down once more
                self._call("shutdown")
                self.stream_is_clean()
                return
            for method in reversed(list(self.held)):
                self.control(_UNDO[method])
            for req_id in sorted(self.input_open & set(self.checker.open_requests())):  # every input ends
                self._call("feed_input", req_id, StageInput(), True, subject=req_id,
                           shown=f"feed_input({req_id}, tokens=(), last=True)")  # fmt: skip
            self.input_open.clear()
            limit = teardown_steps(self.spec, len(self.checker.accepted))
            still_busy_after: int | None = limit
            for _ in range(limit):
                if not self._call("step"):
                    still_busy_after = None
                    break
            self._call("step")
            self.checker.at_end(still_busy_after)  # judged before shutdown(): that is not where work may get done
            self.checker.shut_down()
            self._call("shutdown")
            self._call("shutdown")
            self.stream_is_clean()

    RuntimeConformance.__name__ = f"RuntimeConformance[{getattr(factory, '__name__', 'runtime')}]"
    return RuntimeConformance
