"""RayRuntime on a real two-node Ray cluster on this machine: the kit passes on the simulator in actors, a node
lost mid-run fails only the requests bound to its replicas (each once), a replacement placed on a node that joined
takes the lost replica's place in the running engine and serves new requests (the trace clean)."""

from __future__ import annotations

import time

import pytest

from tests.runtimes.real_engines import RecordsReports, require

require("ray", "pip install 'ray==2.60.0' (the ray extra)")

import ray  # noqa: E402
from ray.exceptions import RayActorError  # noqa: E402

from omni_fsm import Outcome, StageKind  # noqa: E402
from omni_fsm import observations as ob  # noqa: E402
from omni_fsm.cli import main as omni_fsm  # noqa: E402
from omni_fsm.trace.jsonl import TraceWriter  # noqa: E402
from omni_runtime import Engine, Pipeline, Prompt, StageInput, StageSpec  # noqa: E402
from omni_runtime.core import protocol as rp  # noqa: E402
from omni_runtime.errors import ConfigError  # noqa: E402
from omni_runtime.hosting.ray import RayRuntime, ray_kit_factory  # noqa: E402
from omni_runtime.testing import check_runtime  # noqa: E402

pytestmark = pytest.mark.covers("ORCH-INV-206", "ORCH-INV-300")

STEP_S = 0.002  #: each busy step of the simulator in the actors takes this long: requests last long enough to lose


class Recorded(RecordsReports, RayRuntime):
    """A RayRuntime that also keeps every report it hands to its sink (on the driver)."""


def two_stages(talker_tokens: int) -> Pipeline:
    return Pipeline((
        StageSpec("thinker", StageKind.AR, max_tokens=3, placement={"resources": {"stage0": 1}}),
        StageSpec("talker", StageKind.AR, final=True, replicas=2, adapter="ar2ar", max_tokens=talker_tokens,
                  placement={"resources": {"stage1": 1}}),
    ))  # fmt: skip


def paced(pipeline: Pipeline) -> list[list[Recorded]]:
    sim = {"seed": 0, "step_s": STEP_S}
    return [[Recorded(spec, stage, replica, False, runtime="sim", options=sim) for replica in range(spec.replicas)]
            for stage, spec in enumerate(pipeline.stages)]  # fmt: skip


def test_the_conformance_kit_passes_on_the_simulator_in_ray_actors(cluster):
    check_runtime(ray_kit_factory, max_examples=4)


def test_a_placement_no_node_has_is_refused_before_any_actor_starts(cluster):
    spec = StageSpec("s", StageKind.AR, final=True, placement={"resources": {"stage0": 1}, "num_gpus": 1})
    with pytest.raises(ConfigError, match=r"stage 0 \('s'\): no node of the Ray cluster .*stage0=1, num_gpus=1"):
        RayRuntime(spec, 0, 0)


def test_a_lost_node_fails_only_its_replicas_requests_once_and_a_replacement_serves(cluster, tmp_path):
    pipeline = two_stages(talker_tokens=1500)  # 1500 steps of 2 ms: 3 s at least, longer than a node takes to go
    runtimes = paced(pipeline)
    trace = tmp_path / "lost-node.trace.jsonl"
    writer = TraceWriter(trace)
    writer.header(pipeline.kinds, pipeline.final, pipeline.slots)
    dispatched: dict[int, int] = {}  #: request -> the talker replica it was dispatched to

    def step(event, outputs):
        writer.step(event, outputs)
        dispatched.update((o.rid, o.replica) for o in outputs if isinstance(o, ob.Dispatched) and o.stage == 1)

    engine = Engine(pipeline, runtimes, on_step=step)
    talkers = runtimes[1]
    doomed = [r for r, talker in enumerate(talkers) if talker.node_id == cluster.list_all_nodes()[1].node_id]
    assert len(doomed) == 1 and talkers[doomed[0]].node_id != talkers[1 - doomed[0]].node_id
    rids = [engine.submit(Prompt((i, 5))) for i in range(6)]
    routes = engine.orchestrator.routes
    deadline = time.monotonic() + 30
    while not all(routes[rid].stage == 1 for rid in rids):  # every request has reached a talker
        engine.host.pump()
        assert time.monotonic() < deadline, "the requests did not reach the talkers"
    bound = {rid: routes[rid].replica for rid in rids}
    assert sorted(set(bound.values())) == [0, 1]
    cluster.remove_node(cluster.list_all_nodes()[1])
    ends = {rid: list(engine.outputs(rid)) for rid in rids}
    engine.run_until_idle()
    for rid, messages in ends.items():
        assert [m.finished for m in messages].count(True) == 1 and messages[-1].finished
        want = Outcome.FAILED if bound[rid] == doomed[0] else Outcome.FINISHED
        assert messages[-1].outcome is want, (rid, bound, messages[-1])
    lost, kept = talkers[doomed[0]], talkers[1 - doomed[0]]
    assert [r for r in lost.reports if isinstance(r, rp.ReplicaDied)] == [rp.ReplicaDied()] == lost.reports[-1:]
    others = [runtime for stage in runtimes for runtime in stage if runtime is not lost]
    assert lost.lost and not any(isinstance(r, rp.ReplicaDied) for runtime in others for r in runtime.reports)
    assert not kept.lost and not runtimes[0][0].lost
    assert lost.step() is False  # a lost actor: every call is a no-op
    lost.add_request(99, StageInput((1,)))
    assert lost.reports[-1:] == [rp.ReplicaDied()] and lost.reports.count(rp.ReplicaDied()) == 1

    spare = cluster.add_node(resources={"stage1": 1}, num_cpus=1)  # a host joins with the lost one's resources
    cluster.wait_for_nodes()
    replacement = lost.replacement()  # placed where the stage's resources are free: the node that joined
    engine.replace_replica(1, doomed[0], replacement)
    assert replacement.node_id == spare.node_id != lost.node_id
    more = [engine.submit(Prompt((i, 6))) for i in range(4)]
    finished = {rid: list(engine.outputs(rid)) for rid in more}
    engine.run_until_idle()
    assert all(messages[-1].outcome is Outcome.FINISHED for messages in finished.values()), finished
    assert sorted({dispatched[rid] for rid in more}) == [0, 1]  # the replacement served some of them
    engine.shutdown()
    writer.end()
    writer.close()
    for runtime in (kept, runtimes[0][0], replacement):  # shut down: the actor is gone
        with pytest.raises(RayActorError):
            ray.get(runtime._actor.where.remote(), timeout=30)
    assert omni_fsm(["check", str(trace)]) == 0
