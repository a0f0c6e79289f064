"""Stage replicas in Ray actors: ``RayRuntime`` runs any stage runtime (the simulator, vLLM) in an actor of its own,
placed on the cluster's nodes by the stage's ``[stages.placement]`` (CPUs, GPUs, custom resources, a node).

The only module that imports ``ray``. One actor per replica (a threaded actor, ``ReplicaServer`` in
``_actor``): a thread in it steps the runtime by itself, so no call crosses the network per step. The driver
side sends every protocol call as a numbered command without waiting (the actor applies them in order), and
keeps one ``poll`` in flight that returns the reports made since the previous one, as a batch; ``step()`` hands a
finished batch to the sink (``ray.wait`` with timeout 0, or up to ``wait_s`` while the actor owes work) and says
whether work is left: a command not applied yet, or the runtime's latest step said so.

What the driver sees:

- the runtime raised in the actor (in any call): the next ``step()`` hands over the reports made before it, then
  raises ``RayRaised`` (so ``Host.step`` turns it into ``ReplicaDied``); nothing is reported after it.
- the actor is gone (killed, its process or its node lost: ``RayActorError``): ``ReplicaDied()`` goes to the sink
  once; from then on every call is a no-op and ``step()`` returns ``False``. Only that replica's requests are
  lost; a replacement is a new ``RayRuntime`` for the same stage and replica (``replacement()``), placed wherever
  the stage's resources are free.
- the factory raised in the actor: ``bind`` raises ``RayRaised`` (a configuration error); a placement no node of
  the cluster can satisfy raises ``ConfigError`` when the runtime is made, before any actor starts.

``shutdown()`` (the host calls it after the orchestrator stopped: ORCH-INV's order) applies every command sent,
runs the runtime's ``shutdown()`` in the actor, then kills the actor; nothing is reported after it. Actors belong to
the driver: Ray ends them when the driver exits, and ``shutdown_all()`` (an ``atexit`` hook) kills those still up.

Connecting: the first ``RayRuntime`` joins the cluster at ``RAY_ADDRESS`` (``ray start --head`` prints it), or
starts a one-node Ray of its own when none is set; a program that called ``ray.init`` itself keeps its cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from omni_fsm import ControlMethod
from omni_runtime.core import protocol as rp
from omni_runtime.core.pipeline import Pipeline, StageSpec, custom_resources
from omni_runtime.core.prompts import StageInput
from omni_runtime.errors import ConfigError, OmniRuntimeError
from omni_runtime.hosting.ray._actor import Batch, ReplicaServer
from omni_runtime.registry import DEFAULT, RUNTIMES

#: calls one actor runs at once: the commands and the poll (its runtime is stepped by its own thread)
MAX_CONCURRENCY = 4
#: the runtimes ``model_dir`` is given to (a real vLLM engine)
_TAKES_MODEL = ("vllm", "vllm-engine")
#: a node id, as ``[stages.placement] node`` may name one (else it is the node's IP address)
_NODE_ID_CHARS = 56


class RayRaised(OmniRuntimeError):
    """The runtime in the actor raised; the message is ``TypeName: message``, ``actor_traceback`` its traceback."""

    def __init__(self, error: str, actor_traceback: str | None = None) -> None:
        super().__init__(error)
        self.actor_traceback = actor_traceback


def connect(resources: Mapping[str, float] | None = None) -> None:
    """Join the cluster at ``RAY_ADDRESS`` (none set: start a local one-node Ray of its own that has the custom
    ``resources``, even where another program's Ray runs on this machine), unless this program is connected already."""
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        ray.init(address=address or "local", resources=None if address else dict(resources or {}),
                 include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)  # fmt: skip


def actor_options(spec: StageSpec) -> dict[str, Any]:
    """Return the Ray actor options that place a replica of ``spec`` (its ``[stages.placement]``, less the runtime).

    CPUs default to 0 (an actor's thread steps its runtime; say ``num_cpus`` to reserve some); ``node``: an IP
    address (Ray's ``node:IP`` resource) or a node id (hard node affinity).
    """
    placement = dict(spec.placement)
    resources = {name: float(amount) for name, amount in dict(placement.get("resources", ())).items()}
    options: dict[str, Any] = {"num_cpus": float(placement.get("num_cpus", 0)),
                               "num_gpus": float(placement.get("num_gpus", 0))}  # fmt: skip
    node = placement.get("node")
    if isinstance(node, str) and len(node) == _NODE_ID_CHARS and all(c in "0123456789abcdef" for c in node):
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
    elif isinstance(node, str):
        resources[f"node:{node}"] = 0.001
    if resources:
        options["resources"] = resources
    return options


def _fits(options: dict[str, Any]) -> bool:
    """Return whether some live node of the cluster has, in all, what ``options`` ask for."""
    want = dict(options.get("resources", {}), CPU=options["num_cpus"], GPU=options["num_gpus"])
    strategy = options.get("scheduling_strategy")
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        if isinstance(strategy, NodeAffinitySchedulingStrategy) and node["NodeID"] != strategy.node_id:
            continue
        have = node.get("Resources", {})
        if all(amount <= have.get(name, 0.0) for name, amount in want.items() if amount > 0):
            return True
    return False


_Server = ray.remote(ReplicaServer)
_actors: dict[int, Any] = {}  #: id(runtime) -> its actor, while it may run: killed at exit
_hooked: list[bool] = []


class RayRuntime:
    """One stage replica in a Ray actor (see the module): the runtime the registry names ``runtime``, made there with
    ``options``, or ``package.module:factory``'s ``factory(spec, stage, replica, rpc_fails, *args)``.

    ``runtime``: ``None`` names the stage placement's (``[stages.placement] runtime``), else the
    simulator). ``wait_s``: how long ``step()`` waits for a batch while the actor owes one; ``ready_timeout``: how
    long ``bind`` waits for the actor to start and build its runtime; ``stop_timeout``: how long ``shutdown()`` waits
    for the runtime's ``shutdown()`` before the actor is killed.
    """

    def __init__(self, spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False, *args: Any,
                 runtime: str | None = None, options: Mapping[str, Any] | None = None, wait_s: float = 0.005,
                 ready_timeout: float = 600.0, stop_timeout: float = 5.0) -> None:  # fmt: skip
        name = runtime if runtime is not None else dict(spec.placement).get("runtime", DEFAULT)
        module, _, attribute = name.partition(":")
        if name not in RUNTIMES and not (module and attribute):
            raise ConfigError(f"stage {stage} ({spec.name!r}): unknown runtime {name!r} (known: "
                              f"{', '.join(sorted(RUNTIMES))}, or package.module:factory)")  # fmt: skip
        self.factory, self.runtime_options = name, dict(options or {})
        connect()
        self.options = actor_options(spec)
        if not _fits(self.options):
            raise ConfigError(f"stage {stage} ({spec.name!r}): no node of the Ray cluster has what its placement asks "
                              f"for ({_described(self.options)})")  # fmt: skip
        self.spec, self.stage, self.replica, self.rpc_fails, self.args = spec, stage, replica, rpc_fails, args
        self.wait_s, self.ready_timeout, self.stop_timeout = wait_s, ready_timeout, stop_timeout
        self._actor = _Server.options(max_concurrency=MAX_CONCURRENCY, **self.options).remote(
            self.factory, self.runtime_options, spec, stage, replica, rpc_fails, *args)  # fmt: skip
        _track(self, self._actor)
        self._ready = self._actor.where.remote()
        self._sink: rp.ReportSink | None = None
        self._sent = self._applied = 0
        self._busy = False
        self._poll: Any = None
        self.pid: int | None = None  #: the actor's process id, when it runs on this host (else ``None``)
        self.host: str | None = None  #: the host name of the actor's node
        self.node_id: str | None = None  #: the Ray node id of the actor's node
        self.lost: str | None = None  #: why the actor was lost (it was reported as ``ReplicaDied``), if it was
        self.stopped = False  #: ``shutdown()`` was called

    def replacement(self) -> RayRuntime:
        """Return a new replica for this one's stage and replica number (to be bound), placed as this one was."""
        return RayRuntime(self.spec, self.stage, self.replica, self.rpc_fails, *self.args, runtime=self.factory,
                          options=self.runtime_options,
                          wait_s=self.wait_s, ready_timeout=self.ready_timeout,
                          stop_timeout=self.stop_timeout)  # fmt: skip

    # -- the protocol ---------------------------------------------------------------------------

    def bind(self, sink: rp.ReportSink) -> None:
        """Set the sink, then wait until the actor has built its runtime; raise ``RayRaised`` if that failed."""
        self._sink = sink
        try:
            pid, host, self.node_id = ray.get(self._ready, timeout=self.ready_timeout)
        except GetTimeoutError:
            self._kill()
            raise ConfigError(f"the actor of stage {self.stage} replica {self.replica} did not start within "
                              f"{self.ready_timeout} s ({_described(self.options)})") from None  # fmt: skip
        except RayActorError as exc:
            if exc.actor_init_failed:  # the factory raised: a configuration error
                self._kill()
                raise RayRaised(_first_line(exc), str(exc)) from None
            self._lose(f"before it was ready: {_first_line(exc)}")
            return
        self.host = host
        self.pid = pid if host == os.uname().nodename else None
        self._poll = self._actor.poll.remote(0, False)

    def add_request(self, req_id: int, stage_input: StageInput) -> None:
        self._send("add_request", req_id, stage_input)

    def feed_input(self, req_id: int, part: StageInput, last: bool) -> None:
        """Feed streamed input to the runtime in the actor (it raises there if it takes none)."""
        self._send("feed_input", req_id, part, last)

    def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
        self._send("abort_requests", abort_id, tuple(req_ids))

    def control(self, call_id: int, method: ControlMethod, level: int, tags: frozenset[str]) -> None:
        self._send("control", call_id, method, level, frozenset(tags))

    def step(self) -> bool:
        """Hand the finished batches to the sink; return whether work is left (``False`` once the actor is gone).

        Raises ``RayRaised`` once, after the reports made before it, when the runtime raised in the actor.
        """
        if self._gone or self._poll is None:
            return False
        ready, _ = ray.wait([self._poll], timeout=0)
        if not ready and self._owed:
            ready, _ = ray.wait([self._poll], timeout=self.wait_s)
        if ready:
            try:
                batch: Batch = ray.get(ready[0])
            except RayError as exc:  # the actor, its process or its node is gone
                self._lose(_first_line(exc))
                return False
            self._take(batch)
        return not self._gone and self._owed

    def shutdown(self) -> None:
        """Stop the runtime in the actor, then the actor; idempotent. Raise ``RayRaised`` if its ``shutdown()`` raised.

        No report follows. An actor that does not stop within ``stop_timeout`` is killed all the same.
        """
        if self.stopped:
            return
        self.stopped = True
        error = None
        if self.lost is None and self._sink is not None:
            self._sent += 1
            with contextlib.suppress(RayError):  # gone, or too slow: killed below
                error = ray.get(self._actor.stop.remote(self._sent, self.stop_timeout), timeout=self.stop_timeout + 1)
        self._kill()
        if error:
            raise RayRaised(error)

    # -- the channel ----------------------------------------------------------------------------

    @property
    def _gone(self) -> bool:
        return self.stopped or self.lost is not None

    @property
    def _owed(self) -> bool:
        return self._applied < self._sent or self._busy

    def _send(self, name: str, *args: Any) -> None:
        if not self._gone:
            self._sent += 1
            self._actor.submit.remote(self._sent, name, *args)

    def _take(self, batch: Batch) -> None:
        """Hand ``batch``'s reports to the sink and poll for the next; raise ``RayRaised`` if the runtime raised."""
        assert self._sink is not None, "bind() first"
        self._applied, self._busy = batch.applied, batch.busy
        if batch.error is None:
            self._poll = self._actor.poll.remote(self._applied, self._busy)
        for report in batch.reports:
            self._sink(report)
        if batch.error is not None:
            self.lost = f"its runtime raised {batch.error}"
            self._kill()
            raise RayRaised(batch.error, batch.trace)

    def _lose(self, why: str) -> None:
        """The actor is lost: kill what is left of it, report ``ReplicaDied`` (unless shut down already); once."""
        if self._gone:
            return
        self.lost = why
        self._kill()
        if self._sink is not None:
            self._sink(rp.ReplicaDied())

    def _kill(self) -> None:
        _actors.pop(id(self), None)
        with contextlib.suppress(Exception):  # already gone, or Ray itself is down: nothing left to stop
            ray.kill(self._actor, no_restart=True)


def ray_factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> RayRuntime:
    """The runtime factory of ``RayRuntime``: each replica in an actor, running its stage placement's runtime."""
    return RayRuntime(spec, stage, replica, rpc_fails)


def actor_factory(runtime: str | None = None, *, model_dir: str | None = None,
                  resources: Mapping[str, float] | None = None) -> rp.RuntimeFactory[RayRuntime]:
    """Return the runtime factory of a ``RayRuntime`` per replica running ``runtime`` (a name of the registry or
    ``package.module:factory``; ``None``: the one its stage placement names, else the simulator): the registry's
    ``ray``. ``model_dir``: the model of the replicas that run ``vllm`` (default: the tiny Llama); ``resources``:
    join the cluster now, one started here offering these custom resources (``connect``)."""
    if resources is not None:
        connect(resources)

    def factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> RayRuntime:
        name = runtime if runtime is not None else dict(spec.placement).get("runtime", DEFAULT)
        options = {"model_dir": model_dir} if model_dir is not None and name in _TAKES_MODEL else {}
        return RayRuntime(spec, stage, replica, rpc_fails, runtime=name, options=options)

    return factory


def ray_kit_factory(spec: StageSpec, stage: int, replica: int, rpc_fails: bool = False) -> RayRuntime:
    """The conformance kit's reference runtime (``sim-kit``: every legal behaviour on) in a Ray actor."""
    return RayRuntime(spec, stage, replica, rpc_fails, runtime="sim-kit")


def ray_runtimes(pipeline: Pipeline, model_dir: str | None = None) -> list[list[RayRuntime]]:
    """Return one ``RayRuntime`` per replica of every stage (``result[stage][replica]``); ``model_dir``: the model
    of the stages whose placement runs ``vllm`` (default: the tiny Llama). With no cluster set (``RAY_ADDRESS``) and
    none joined, a local one-node Ray starts with the custom resources the placements ask for (``omni-run --runtime
    ray``)."""
    return rp.build_runtimes(pipeline, actor_factory(model_dir=model_dir, resources=custom_resources(pipeline)))


def shutdown_all() -> None:
    """Kill every actor a ``RayRuntime`` started and nobody shut down (at exit)."""
    for actor in list(_actors.values()):
        with contextlib.suppress(Exception):  # Ray is down already: its actors with it
            ray.kill(actor, no_restart=True)
    _actors.clear()


def _track(runtime: RayRuntime, actor: Any) -> None:
    _actors[id(runtime)] = actor
    weakref.finalize(runtime, _actors.pop, id(runtime), None)
    if not _hooked:
        atexit.register(shutdown_all)
        _hooked.append(True)


def _described(options: dict[str, Any]) -> str:
    strategy = options.get("scheduling_strategy")
    parts = [f"{name}={amount:g}" for name, amount in options.get("resources", {}).items()]
    parts += [f"{key}={options[key]:g}" for key in ("num_cpus", "num_gpus") if options[key]]
    parts += [f"node={strategy.node_id}"] if isinstance(strategy, NodeAffinitySchedulingStrategy) else []
    return ", ".join(parts) or "nothing"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


__all__ = ["RayRaised", "RayRuntime", "actor_factory", "actor_options", "connect", "custom_resources",
           "ray_factory", "ray_kit_factory", "ray_runtimes", "shutdown_all"]  # fmt: skip
