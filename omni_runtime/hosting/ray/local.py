"""A Ray cluster of several nodes on this one machine (``ray.cluster_utils.Cluster``): for the tests, the benchmark
and ``make demo RUNTIME=ray`` (``python -m omni_runtime.apps.ray_local``). Real hosts join a cluster with ``ray start``
instead (``docs/scale-out.md``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import ray
from ray.cluster_utils import Cluster

from omni_runtime.core.pipeline import Pipeline


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
