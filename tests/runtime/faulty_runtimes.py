"""Deliberately faulty runtimes: each breaks exactly one check of the conformance kit.

Each is a kit factory ``(spec, stage, replica, rpc_fails) -> runtime``, most wrapping the simulator.
"""

from __future__ import annotations

import attrs

from omni_fsm import ControlMethod, StageKind, StopKind
from omni_runtime.core import protocol as rp
from omni_runtime.errors import ConfigError
from omni_runtime.runtimes.sim import SimConfig, sim_replica


class _Wrapper:
    """Forwards everything to a simulated replica (``around``: to a given runtime); subclasses bend one behaviour."""

    def __init__(self, spec, stage, replica, rpc_fails, config=None, seed=3):
        base = config or attrs.evolve(SimConfig.legal(0.2), rpc_error=1.0 if rpc_fails else 0.0)
        self._wrap(sim_replica(spec, stage, replica, seed, base))

    @classmethod
    def around(cls, inner):
        """Return this wrapper around ``inner``, an existing runtime, instead of a simulator of its own."""
        wrapper = cls.__new__(cls)
        wrapper._wrap(inner)
        return wrapper

    def _wrap(self, inner) -> None:
        self.inner = inner
        self.sink = None

    def bind(self, sink):
        self.sink = sink
        self.inner.bind(self.filter)

    def filter(self, report):
        self.sink(report)

    def add_request(self, req_id, stage_input):
        self.inner.add_request(req_id, stage_input)

    def abort_requests(self, abort_id, req_ids):
        self.inner.abort_requests(abort_id, req_ids)

    def control(self, call_id, method, level, tags):
        self.inner.control(call_id, method, level, tags)

    def step(self):
        return self.inner.step()

    def shutdown(self):
        self.inner.shutdown()


class DoubleFinish(_Wrapper):
    """B10-like: a completion is delivered twice."""

    def filter(self, report):
        self.sink(report)
        if isinstance(report, rp.Finished):
            self.sink(report)


class OutputAfterAbort(_Wrapper):
    """B6-like: acknowledges the abort but keeps generating (a zombie)."""

    def abort_requests(self, abort_id, req_ids):
        for req_id in req_ids:
            self.sink(rp.AbortResult(abort_id, req_id, True))


class LyingAbortFailure(_Wrapper):
    """Says the physical abort failed, but the request is gone (it never finishes)."""

    def abort_requests(self, abort_id, req_ids):
        for req_id in req_ids:
            known = req_id in self.inner.requests
            self.inner.requests.pop(req_id, None)
            self.sink(rp.AbortResult(abort_id, req_id, not known))


class AbortMissesWait(_Wrapper):
    """B5-like: the abort removes requests by status and misses one whose latest reported status is ``missed``
    (in B5, waiting for an input chunk), yet answers ok: the request runs on."""

    missed = rp.Status.AWAIT_CHUNK

    @classmethod
    def around(cls, inner, missed=rp.Status.AWAIT_CHUNK):
        """Return ``inner`` wrapped, its aborts missing the requests whose latest reported status is ``missed``."""
        wrapper = super().around(inner)
        wrapper.missed = missed
        return wrapper

    def _wrap(self, inner) -> None:
        super()._wrap(inner)
        self.status = {}  #: request id -> the latest status reported for it, until it ends

    def filter(self, report):
        if isinstance(report, rp.StatusChanged):
            self.status[report.req_id] = report.status
        elif isinstance(report, (rp.Finished, rp.Failed)):
            self.status.pop(report.req_id, None)
        self.sink(report)

    def abort_requests(self, abort_id, req_ids):
        missed = [r for r in req_ids if self.status.get(r) is self.missed]
        self.inner.abort_requests(abort_id, [r for r in req_ids if r not in missed])
        for req_id in missed:
            self.sink(rp.AbortResult(abort_id, req_id, True))


class StreamedInputWaits(_Wrapper):
    """Not faulty: reports each wait for an input chunk as a wait for streamed input (``AWAIT_STREAMING``)."""

    def filter(self, report):
        if isinstance(report, rp.StatusChanged) and report.status is rp.Status.AWAIT_CHUNK:
            report = attrs.evolve(report, status=rp.Status.AWAIT_STREAMING)
        self.sink(report)


class AbortOfEndedSaysFailed(_Wrapper):
    """Answers the abort of a request it no longer holds (it ended) with "failed", as if it ran on: untruthful."""

    def abort_requests(self, abort_id, req_ids):
        gone = [r for r in req_ids if r not in self.inner.requests]
        self.inner.abort_requests(abort_id, [r for r in req_ids if r not in gone])
        for req_id in gone:
            self.sink(rp.AbortResult(abort_id, req_id, False, "no such request"))


class SixteenBitIds(_Wrapper):
    """Keeps request ids in 16 bits: its reports about a request whose id is 65536 or more name another id."""

    def filter(self, report):
        if isinstance(report, rp.RequestReport):
            report = attrs.evolve(report, req_id=report.req_id & 0xFFFF)
        self.sink(report)


class FirstOfBatchOnly(_Wrapper):
    """B1-like: aborts (and answers) only the first request of a batched abort; the others run on, unanswered."""

    def abort_requests(self, abort_id, req_ids):
        self.inner.abort_requests(abort_id, list(req_ids)[:1])


class IgnoredAbort(_Wrapper):
    """Takes the abort and does nothing: no result, the request runs on (an orchestrator would wait)."""

    def abort_requests(self, abort_id, req_ids):
        pass


class MislabelledAbortResult(_Wrapper):
    """Aborts, but answers under an abort id nobody asked for."""

    def abort_requests(self, abort_id, req_ids):
        self.inner.abort_requests(abort_id + 1, req_ids)


class SwallowedRpcError(_Wrapper):
    """B11-like: a worker raised but the RPC answers success ({'supported': False} style)."""

    def filter(self, report):
        if isinstance(report, rp.RpcResult) and not report.ok:
            report = rp.RpcResult(report.call_id, True)
        self.sink(report)


class Reordering(_Wrapper):
    """Delivers each step's reports out of order."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails,
                         attrs.evolve(SimConfig(), reorder=0.5, rpc_error=1.0 if rpc_fails else 0.0))  # fmt: skip


class DiesAtOnce(_Wrapper):
    """Reports its own death at its first step, and so owes nothing (not in ``FAULTY``: a death can be legal)."""

    def step(self):
        if self.sink is not None:
            self.sink(rp.ReplicaDied())
            self.sink = lambda report: None  # a dead replica is silent
        return False


class SpeaksAfterDeath(_Wrapper):
    """Reports its death once, at its first step, then goes on reporting as if alive."""

    died = False

    def step(self):
        if not self.died:
            self.died = True
            self.sink(rp.ReplicaDied())
        return self.inner.step()


class FinishesOnlyAtShutdown:
    """Does no work when stepped (and says none is left); "finishes" every open request in ``shutdown()``.

    It answers aborts and RPCs at once and truthfully, so only the kit's judgement of progress
    before shutdown can fail it, and its silence after one (the kit's ``shutdown_now`` mid-run: the flush).
    """

    def __init__(self, spec, stage, replica, rpc_fails):
        self.rpc_fails, self.open, self.sink = rpc_fails, [], None

    def bind(self, sink):
        self.sink = sink

    def add_request(self, req_id, stage_input):
        self.open.append(req_id)

    def abort_requests(self, abort_id, req_ids):
        for req_id in req_ids:
            if req_id in self.open:
                self.open.remove(req_id)
            self.sink(rp.AbortResult(abort_id, req_id, True))

    def control(self, call_id, method, level, tags):
        self.sink(rp.RpcResult(call_id, not self.rpc_fails, "WorkerError: injected" if self.rpc_fails else None))

    def step(self):
        return False

    def shutdown(self):
        for req_id in self.open:
            self.sink(rp.Finished(req_id, 0))
        self.open = []


class NeverIdle(FinishesOnlyAtShutdown):
    """Does no work, yet says at every step that work is left (``steps``: how often it was stepped)."""

    steps = 0

    def step(self):
        self.steps += 1
        return True


class HonoursPause(_Wrapper):
    """Does no work while its scheduler is paused or it sleeps, as vLLM (not faulty: a failed RPC changes nothing)."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails)
        self.rpc_fails, self.stopped, self.methods = rpc_fails, set(), []

    def control(self, call_id, method, level, tags):
        self.methods.append(method)
        super().control(call_id, method, level, tags)
        if not self.rpc_fails:
            undoes = {ControlMethod.WAKE_UP: ControlMethod.SLEEP,
                      ControlMethod.RESUME_SCHEDULER: ControlMethod.PAUSE_SCHEDULER}  # fmt: skip
            self.stopped.discard(undoes.get(method))
            if method not in undoes:
                self.stopped.add(method)

    def step(self):
        if not self.stopped:
            return self.inner.step()
        held, self.inner.requests = self.inner.requests, {}
        self.inner.step()  # RPCs are still answered
        self.inner.requests = held
        return False  # as vLLM's has_requests() while paused: nothing to do until resumed


class OneTokenPerStep:
    """A slow runtime (not faulty): ``max_running`` requests at a time, first come first served, one token each
    per step; it answers aborts at once and RPCs at its next step."""

    def __init__(self, spec, stage, replica, rpc_fails):
        self.spec, self.rpc_fails, self.sink = spec, rpc_fails, None
        self.queue, self.running, self.rpcs = [], [], []
        self.seq, self.generated = {}, {}

    def bind(self, sink):
        self.sink = sink

    def _report(self, make, req_id, *args):
        self.sink(make(req_id, self.seq[req_id], *args))
        self.seq[req_id] += 1

    def add_request(self, req_id, stage_input):
        self.queue.append(req_id)
        self.seq[req_id] = self.generated[req_id] = 0

    def abort_requests(self, abort_id, req_ids):
        for req_id in req_ids:
            for held in (self.queue, self.running):
                if req_id in held:
                    held.remove(req_id)
            self.sink(rp.AbortResult(abort_id, req_id, True))

    def control(self, call_id, method, level, tags):
        self.rpcs.append(call_id)
        if "abort" in tags and not self.rpc_fails:  # a pause in abort mode ends what is in flight
            for req_id in self.queue + self.running:
                self._report(rp.Aborted, req_id)
            self.queue, self.running = [], []

    def step(self):
        for call_id in self.rpcs:
            self.sink(rp.RpcResult(call_id, not self.rpc_fails, "WorkerError: injected" if self.rpc_fails else None))
        self.rpcs.clear()
        while self.queue and len(self.running) < self.spec.max_running:
            self.running.append(self.queue.pop(0))
            self._report(rp.StatusChanged, self.running[-1], rp.Status.SCHEDULED)
        for req_id in list(self.running):
            self._report(rp.Output, req_id, 1, (0,))
            self.generated[req_id] += 1
            if self.generated[req_id] >= self.spec.max_tokens:
                self._report(rp.Finished, req_id, StopKind.LENGTH)
                self.running.remove(req_id)
        return bool(self.queue or self.running)

    def shutdown(self):
        self.queue, self.running, self.rpcs = [], [], []


class Raising(_Wrapper):
    """A runtime that raises instead of reporting (not a kit factory: made with ``around``)."""

    calls: dict[str, int]

    @classmethod
    def around(cls, inner, **calls: int):
        """Return ``inner`` wrapped: the first ``calls[name]`` calls of ``name`` raise ``RuntimeError``."""
        wrapper = super().around(inner)
        wrapper.calls = calls
        return wrapper

    def _maybe_raise(self, name: str) -> None:
        if self.calls.get(name, 0) > 0:
            self.calls[name] -= 1
            raise RuntimeError(f"{name} broke")

    def add_request(self, req_id, stage_input):
        self._maybe_raise("add_request")
        super().add_request(req_id, stage_input)

    def abort_requests(self, abort_id, req_ids):
        self._maybe_raise("abort_requests")
        super().abort_requests(abort_id, req_ids)

    def control(self, call_id, method, level, tags):
        self._maybe_raise("control")
        super().control(call_id, method, level, tags)

    def step(self):
        self._maybe_raise("step")
        return super().step()


FAULTY = {
    "ORCH-INV-101": DoubleFinish,
    "ORCH-INV-209": OutputAfterAbort,
    "ORCH-INV-202": LyingAbortFailure,
    "ORCH-INV-205": SwallowedRpcError,
    "IO-INV-101": Reordering,
}


class AbortsUnasked(OneTokenPerStep):
    """Ends a request as ``Aborted`` on its third token though nobody paused it in abort mode (an engine that
    decides an end on its own, as a lost abort race would look)."""

    def step(self):
        for req_id in list(self.running):
            if self.generated[req_id] == 2:
                self._report(rp.Aborted, req_id)
                self.running.remove(req_id)
        return super().step()


class IgnoresPauseAbort(OneTokenPerStep):
    """Answers a pause in abort mode as done but keeps every request running (the mode lost on the way)."""

    def control(self, call_id, method, level, tags):
        self.rpcs.append(call_id)


# -- one faulty runtime per situation of a runtime's life that had none (specs/kit.toml lists them all) ------------


def _calm(rpc_fails):
    """Return the simulator's plain behaviour (no waits, no faults) but for worker errors in RPCs when asked."""
    return SimConfig(rpc_error=1.0 if rpc_fails else 0.0)


class BindRaises(_Wrapper):
    """start: takes only the sink of the driver it was written for; ``bind`` raises on any other."""

    def bind(self, sink):
        raise TypeError(f"bind() wants an asyncio.Queue, got {type(sink).__name__}")


class EmptyPromptRaises(_Wrapper):
    """accept: raises on a request it cannot take (an empty prompt) instead of reporting it ``Failed``."""

    def add_request(self, req_id, stage_input):
        if not stage_input.token_ids and not stage_input.text:
            raise ValueError(f"request {req_id}: empty prompt")
        super().add_request(req_id, stage_input)


class _Streaming(_Wrapper):
    """A wrapper that also takes streamed input (``StreamingInput``), forwarded to the simulator."""

    def feed_input(self, req_id, part, last):
        self.inner.feed_input(req_id, part, last)


class FeedByKey(_Streaming):
    """park (streamed input): finds a session by ``requests[req_id]``, so input fed to a session it no longer holds
    (aborted, or ended) raises ``KeyError``."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))

    def feed_input(self, req_id, part, last):
        self.inner.requests[req_id]  # the fault: KeyError for a session it no longer holds
        super().feed_input(req_id, part, last)


class AbortMissesStreamingSession(AbortMissesWait, _Streaming):
    """park then abort (B5's kin for streamed input): the abort misses a session parked between turns
    (``AWAIT_STREAMING``) and answers ok; the next part fed wakes it up again."""

    missed = rp.Status.AWAIT_STREAMING

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))


class KeepsFailedRequest(_Wrapper):
    """fail: reports a request ``Failed`` but leaves it in its scheduler, which reports one more output for it."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, attrs.evolve(_calm(rpc_fails), stage_fail=1.0))

    def filter(self, report):
        self.sink(report)
        if isinstance(report, rp.Failed):
            self.sink(rp.Output(report.req_id, report.seq + 1, 1, (0,)))


class StallsAfterRpcError(_Wrapper):
    """control: once a worker raised in an RPC (answered truthfully, with the error) its scheduler stops for good:
    the requests that were running never go on."""

    stalled = False

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))

    def filter(self, report):
        if isinstance(report, rp.RpcResult) and not report.ok:
            self.stalled = True
        self.sink(report)

    def step(self):
        if not self.stalled:
            return self.inner.step()
        held, self.inner.requests = self.inner.requests, {}
        self.inner.step()  # RPCs are still answered
        self.inner.requests = held
        return False


class FailsRequestsOnRpcError(_Wrapper):
    """control (caught by a kit told ``may_fail=False``): when a worker raises in an RPC it answers the RPC with the
    error, and also fails every request it holds (``Failed``), though the RPC's failure was not theirs."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))

    def filter(self, report):
        self.sink(report)
        if isinstance(report, rp.RpcResult) and not report.ok:
            for req in list(self.inner.requests.values()):
                self.inner.report(req, rp.Failed, f"worker error in RPC {report.call_id}")
                del self.inner.requests[req.req_id]


class ControlRaisesWorkerError(_Wrapper):
    """control: lets a worker's exception out of ``control()`` instead of answering the RPC with it."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails)
        self.rpc_fails = rpc_fails

    def control(self, call_id, method, level, tags):
        if self.rpc_fails:
            raise RuntimeError("WorkerError: injected failure in a worker")
        super().control(call_id, method, level, tags)


class RefusesSleep(_Wrapper):
    """control: its engine has no sleep mode and answers ``sleep`` with an error, though no worker raised (fine only
    where the kit is told so: ``refused``)."""

    def control(self, call_id, method, level, tags):
        if method is ControlMethod.SLEEP:
            self.sink(rp.RpcResult(call_id, False, "NotImplementedError: sleep mode is not supported"))
            return
        super().control(call_id, method, level, tags)


class LosesRpcWhileRunning(_Wrapper):
    """control: a control RPC that arrives while requests run is dropped (never answered)."""

    def control(self, call_id, method, level, tags):
        if not self.inner.requests:
            super().control(call_id, method, level, tags)


class ResumeIgnored(HonoursPause):
    """control: pauses as vLLM does, answers ``resume_scheduler`` as done, but stays paused: nothing runs again."""

    def control(self, call_id, method, level, tags):
        if method is ControlMethod.RESUME_SCHEDULER:
            self.methods.append(method)
            self.inner.control(call_id, method, level, tags)
            return
        super().control(call_id, method, level, tags)


class DeathAtShutdown(_Wrapper):
    """after-shutdown: reports its own death once it is shut down (as a process runtime whose child exits)."""

    def shutdown(self):
        self.inner.shutdown()
        self.sink(rp.ReplicaDied())


class ShutdownNotIdempotent(_Wrapper):
    """shutdown: a second ``shutdown()`` raises."""

    done = False

    def shutdown(self):
        if self.done:
            raise RuntimeError("already shut down")
        self.done = True
        self.inner.shutdown()


class FlushesOpenRequestsAtShutdown(_Wrapper):
    """shutdown with requests open: ``shutdown()`` reports each request it still holds ``Failed`` ("shut down"): a
    report after shutdown."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))

    def shutdown(self):
        for req in list(self.inner.requests.values()):
            self.inner.report(req, rp.Failed, "shut down")
        self.inner.shutdown()


class AnswersAbortsAtShutdown(_Wrapper):
    """shutdown mid-abort: an abort is carried out at the next step; ``shutdown()`` carries out those still owed,
    answering them after shutdown."""

    def __init__(self, spec, stage, replica, rpc_fails):
        super().__init__(spec, stage, replica, rpc_fails, _calm(rpc_fails))
        self.owed = []

    def abort_requests(self, abort_id, req_ids):
        self.owed.append((abort_id, list(req_ids)))

    def _carry_out(self):
        owed, self.owed = self.owed, []
        for abort_id, req_ids in owed:
            self.inner.abort_requests(abort_id, req_ids)

    def step(self):
        self._carry_out()
        return self.inner.step() or bool(self.owed)

    def shutdown(self):
        self._carry_out()
        self.inner.shutdown()


class ShutdownRaisesWhilePaused(HonoursPause):
    """shutdown while paused: ``shutdown()`` raises while its scheduler is paused."""

    def shutdown(self):
        if ControlMethod.PAUSE_SCHEDULER in self.stopped:
            raise RuntimeError("cannot shut down a paused scheduler")
        super().shutdown()


class AbortsSilently(_Wrapper):
    """Aborts (the request is gone) but never answers: its request is never finished, its abort never answered."""

    def filter(self, report):
        if not isinstance(report, rp.AbortResult):
            self.sink(report)


def ar_only(spec, stage, replica, rpc_fails=False):
    """A factory that refuses diffusion stages with a ``ConfigError``, as docs/runtime.md tells a factory to."""
    if spec.kind is not StageKind.AR:
        raise ConfigError(f"stage {stage} ({spec.name!r}) is {spec.kind.value}: this runtime runs AR stages only")
    return sim_replica(spec, stage, replica, 3, SimConfig(rpc_error=1.0 if rpc_fails else 0.0))
