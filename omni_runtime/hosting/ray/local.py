"""A Ray cluster of several nodes on this one machine (``ray.cluster_utils.Cluster``): for the tests, the benchmark
and ``make demo RUNTIME=ray``. Real hosts join a cluster with ``ray start`` instead (``docs/scale-out.md``).

``python -m omni_runtime.hosting.ray.local [--nodes N] PIPELINE.toml [omni-run options]`` starts ``N`` nodes
(default 2), each with the custom resources the pipeline's placements ask for (enough for its share of every
stage's replicas), and runs ``omni-run`` on it with every replica in an actor (``ray_factory``).
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from typing import Any

import ray
from ray.cluster_utils import Cluster

from omni_runtime.core.pipeline import Pipeline, load_pipeline


def start_cluster(nodes: Sequence[dict[str, float]], num_cpus: int = 1) -> Cluster:
    """Start a cluster of one node per entry of ``nodes`` (its custom resources), ``num_cpus`` CPUs each, and connect
    this program to it; the first node is the head. ``stop_cluster`` ends it."""
    head = {"num_cpus": num_cpus, "resources": dict(nodes[0]), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for resources in nodes[1:]:
        cluster.add_node(num_cpus=num_cpus, resources=dict(resources))
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    """Disconnect from ``cluster`` and stop every node of it."""
    ray.shutdown()
    cluster.shutdown()


def nodes_for(pipeline: Pipeline, nodes: int = 2) -> list[dict[str, float]]:
    """Return ``nodes`` nodes' custom resources: each enough for its share of every stage's replicas."""
    share: dict[str, float] = {}
    for spec in pipeline.stages:
        for name, amount in dict(dict(spec.placement).get("resources", ())).items():
            share[name] = share.get(name, 0.0) + float(amount) * math.ceil(spec.replicas / nodes)
    return [dict(share) for _ in range(nodes)]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``omni-run`` on a local cluster of ``--nodes`` nodes; return its exit code."""
    from omni_runtime.apps.cli import main as omni_run

    args = list(sys.argv[1:] if argv is None else argv)
    count = 2
    if args[:1] == ["--nodes"]:
        count, args = int(args[1]), args[2:]
    pipeline = next((a for a in args if a.endswith(".toml")), None)
    if pipeline is None:
        print("usage: python -m omni_runtime.hosting.ray.local [--nodes N] PIPELINE.toml [omni-run options]",
              file=sys.stderr)  # fmt: skip
        return 2
    cluster: Any = start_cluster(nodes_for(load_pipeline(pipeline), count))
    try:
        return omni_run([*args, "--runtime", "omni_runtime.hosting.ray:ray_factory"])
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    sys.exit(main())
