"""One local Ray cluster of two nodes for the Ray tests of this package (``ray.cluster_utils.Cluster``)."""

from __future__ import annotations

import importlib.util

import pytest

#: the talker's replicas need one ``stage1`` each: the head and the worker have one each, so one runs on each
HEAD, WORKER = {"stage0": 1, "stage1": 1}, {"stage1": 1}


@pytest.fixture(scope="package")
def cluster():
    if importlib.util.find_spec("ray") is None:  # the modules say what to install (require), before this runs
        pytest.fail("ray is not installed")
    from omni_runtime.hosting.ray.local import start_cluster, stop_cluster

    started = start_cluster([HEAD, WORKER])
    yield started
    stop_cluster(started)
