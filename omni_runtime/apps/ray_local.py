"""``omni-run`` on a Ray cluster of several nodes on this one machine (``make demo RUNTIME=ray``).

``python -m omni_runtime.apps.ray_local [--nodes N] PIPELINE.toml [omni-run options]`` starts ``N`` nodes (default 2),
each with the custom resources the pipeline's placements ask for (enough for its share of every stage's replicas),
and runs ``omni-run`` on it with every replica in an actor (``omni_runtime.hosting.ray:ray_factory``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omni_runtime.apps.cli import main as omni_run
from omni_runtime.core.pipeline import load_pipeline
from omni_runtime.hosting.ray.local import nodes_for, start_cluster, stop_cluster


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``omni-run`` on a local cluster of ``--nodes`` nodes; return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    count = 2
    if args[:1] == ["--nodes"]:
        count, args = int(args[1]), args[2:]
    pipeline = next((a for a in args if a.endswith(".toml")), None)
    if pipeline is None:
        print("usage: python -m omni_runtime.apps.ray_local [--nodes N] PIPELINE.toml [omni-run options]",
              file=sys.stderr)  # fmt: skip
        return 2
    cluster: Any = start_cluster(nodes_for(load_pipeline(pipeline), count))
    try:
        return omni_run([*args, "--runtime", "omni_runtime.hosting.ray:ray_factory"])
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    sys.exit(main())
