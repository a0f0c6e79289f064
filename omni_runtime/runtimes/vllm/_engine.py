"""What the binding steps: vLLM's scheduler with the stand-in model, or a real in-process ``EngineCore``.

Both offer the same four things to ``VllmSchedulerRuntime``: ``scheduler`` (vLLM's own, whose status
assignments the binding observes), ``add_request``, ``execute(scheduler_output)`` (the model's
``ModelRunnerOutput`` for one batch) and ``shutdown``; and ``block_hasher`` for the requests.
"""

from __future__ import annotations

from typing import Any, cast

from vllm.v1.core.sched.interface import PauseState
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from omni_fsm import ControlMethod
from omni_runtime.runtimes.vllm._config import SchedulerOptions, block_hasher, build_scheduler, free_blocks
from omni_runtime.runtimes.vllm._standin import OmniStandInConnector, StandInModel
from omni_runtime.runtimes.vllm.tiny import EOS_TOKEN_ID, TINY_LLAMA, FileTokenizer, TinyWords


class StandInEngine:
    """vLLM's real scheduler and the deterministic stand-in model (no model is loaded)."""

    def __init__(self, options: SchedulerOptions) -> None:
        self.scheduler = build_scheduler(options)
        connector = self.scheduler.connector
        self.connector = connector if isinstance(connector, OmniStandInConnector) else None
        self.model = StandInModel(self.scheduler.requests, self.connector)
        self.block_hasher = block_hasher(options.block_size)
        self.tokenizer = TinyWords()
        self.vocab_size, self.eos_token_id = int(TINY_LLAMA["vocab_size"]), EOS_TOKEN_ID  #: the stand-in's model
        self._held: set[ControlMethod] = set()

    def add_request(self, request: Request) -> None:
        self.scheduler.add_request(request)

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        return self.model.execute(so)

    def control(self, method: ControlMethod, mode: str = "keep") -> None:
        """Pause (or sleep): vLLM's scheduler schedules no tokens until resume (or wake); transfers go on. A pause
        in ``abort`` mode first ends every request, as vLLM's in-process engine does; ``wait`` mode it refuses."""
        _check_mode(method, mode)
        if method is ControlMethod.PAUSE_SCHEDULER and mode == "abort":
            self.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
        if method in (ControlMethod.PAUSE_SCHEDULER, ControlMethod.SLEEP):
            self._held.add(method)
        else:
            undone = ControlMethod.SLEEP if method is ControlMethod.WAKE_UP else ControlMethod.PAUSE_SCHEDULER
            self._held.discard(undone)
        self.scheduler.set_pause_state(PauseState.PAUSED_ALL if self._held else PauseState.UNPAUSED)

    def shutdown(self) -> None:
        self.scheduler.shutdown()


class CoreEngine:
    """A real in-process ``EngineCore`` (its scheduler, model executor and sampler) on ``model_dir``.

    Greedy tokens equal ``vllm.LLM.generate``'s on the same model. Only one may live in a process at a
    time: vLLM's shutdown tears down process-wide parallel state (a stage each in its own process).
    """

    def __init__(self, model_dir: str, options: SchedulerOptions, **engine_args: Any) -> None:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.core import EngineCore
        from vllm.v1.executor.abstract import Executor

        args = EngineArgs(model=model_dir, dtype="float32", max_model_len=options.max_model_len, enforce_eager=True,
                          max_num_seqs=options.max_num_seqs, seed=0, block_size=options.block_size,
                          skip_tokenizer_init=True, disable_log_stats=True,
                          enable_prefix_caching=options.enable_prefix_caching,
                          max_num_batched_tokens=options.max_num_batched_tokens, **engine_args)  # fmt: skip
        config = args.create_engine_config()
        self._take(EngineCore(config, Executor.get_class(config), log_stats=False))

    @classmethod
    def around(cls, core: Any) -> CoreEngine:
        """Return a ``CoreEngine`` over an ``EngineCore`` made elsewhere (one engine, several users: benchmarks)."""
        engine = cls.__new__(cls)
        engine._take(core)
        return engine

    def _take(self, core: Any) -> None:
        self.core = core
        self.scheduler = cast(Scheduler, self.core.scheduler)
        self.connector = None
        self.block_hasher = self.core.request_block_hasher
        model = self.core.vllm_config.model_config
        self.tokenizer = FileTokenizer(model.model)
        self.vocab_size = int(model.get_vocab_size())
        eos = getattr(model.hf_config, "eos_token_id", None)
        self.eos_token_id = int(eos[0] if isinstance(eos, list | tuple) else eos if eos is not None else EOS_TOKEN_ID)

    def add_request(self, request: Request) -> None:
        self.core.add_request(request)

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        executor = self.core.model_executor
        future = executor.execute_model(so, non_block=True)
        grammar = self.scheduler.get_grammar_bitmask(so)
        output = future.result()
        if output is None:
            output = executor.sample_tokens(grammar)
        return output  # type: ignore[no-any-return]

    def control(self, method: ControlMethod, mode: str = "keep") -> None:
        """Run a control RPC on the engine itself; raise ``SleepNotSupported`` for sleep on the CPU build.

        A pause takes its ``mode`` (``keep``: the requests stay, parked, until resume; ``abort``: the engine ends
        every request, each reported ``Aborted``; ``wait``: refused by vLLM's in-process engine); sleep is refused
        before it reaches the engine, where the CPU build ignores it but still preempts every running request.
        """
        _check_mode(method, mode)
        if method is ControlMethod.PAUSE_SCHEDULER:
            self.core.pause_scheduler(mode=mode, clear_cache=False)
        elif method is ControlMethod.RESUME_SCHEDULER:
            self.core.resume_scheduler()
        elif method is ControlMethod.SLEEP and _cpu_build():
            raise SleepNotSupported("vLLM's CPU build does not support sleep (the engine was not asked)")

    def shutdown(self) -> None:
        self.core.shutdown()


def _check_mode(method: ControlMethod, mode: str) -> None:
    if mode == "wait":
        raise ValueError("'wait' mode can't be used in inproc-engine mode (vLLM's own refusal, made here first)")
    if mode != "keep" and method is not ControlMethod.PAUSE_SCHEDULER:
        raise ValueError(f"{method.value} takes no pause mode ({mode!r})")


class DrainedEngine(CoreEngine):
    """An ``EngineCore`` shared by one runtime after another (the conformance kit's examples: one engine for a
    whole test session, as vLLM allows one per process). ``shutdown`` does not stop the engine: it checks that
    the runtime left it as it found it (no request, every KV block free), drains it whatever it found (aborts what
    is left, resumes, steps until nothing is scheduled) and raises ``EngineNotDrained`` naming what was left."""

    def __init__(self, core: Any) -> None:
        self._take(core)

    def shutdown(self) -> None:
        scheduler = self.scheduler
        left, (free, total) = sorted(scheduler.requests), free_blocks(scheduler)
        self.core.resume_scheduler()
        if left:
            scheduler.finish_requests(left, RequestStatus.FINISHED_ABORTED)
        for _ in range(1000):
            if not scheduler.has_requests():
                break
            self.core.step()
        if left or free != total:
            raise EngineNotDrained(f"the runtime left {len(left)} request(s) in the engine ({', '.join(left[:5])}) "
                                   f"and {total - free} of {total} KV blocks held")  # fmt: skip


class EngineNotDrained(AssertionError):
    """A runtime's shutdown found requests or KV blocks left in a shared engine."""


class SleepNotSupported(RuntimeError):
    """A control RPC the engine's build does not support, refused before it reached the engine."""


def _cpu_build() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())
