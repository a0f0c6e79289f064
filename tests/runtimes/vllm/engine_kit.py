"""Runs the conformance kit on the engine-level vLLM runtime in this process, ONE ``EngineCore`` for the whole
session (vLLM allows one per process), and prints the verdict as JSON:
``python -m tests.runtimes.vllm.engine_kit MODEL_DIR [MODE]``.

- ``sound``: ``engine_kit_factory``'s runtimes; each example's shutdown drains the engine and checks it was left
  with no request and every KV block free.
- ``leaky``: the same, but the runtime's abort skips (and reports done) a request parked between the turns of a
  streaming-input session, as an abort that goes by status would: vLLM keeps it and its blocks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import tests.runtimes.real_engines  # noqa: F401  (the engine environment)

EXAMPLES = 20


def main(model: str, mode: str) -> dict:
    from vllm.v1.request import RequestStatus

    from omni_fsm import ControlMethod, StageKind
    from omni_runtime.core import protocol as rp
    from omni_runtime.runtimes.vllm import VllmSchedulerRuntime, engine_kit_factory
    from omni_runtime.testing import check_runtime

    class SkipsParked(VllmSchedulerRuntime):
        def abort_requests(self, abort_id: int, req_ids: Sequence[int]) -> None:
            for req_id in req_ids:
                live = self._live.get(req_id)
                if live is not None and live.request is not None \
                        and live.request.status is RequestStatus.WAITING_FOR_STREAMING_REQ:
                    del self._live[req_id]  # forgotten here, left in vLLM
                    self._emit(rp.AbortResult(abort_id, req_id, True))
                else:
                    super().abort_requests(abort_id, [req_id])

    factory = engine_kit_factory(model)
    made = {"runtimes": 0}

    def counted(spec, stage, replica, rpc_fails):  # type: ignore[no-untyped-def]
        runtime = factory(spec, stage, replica, rpc_fails)
        made["runtimes"] += 1
        if mode == "leaky":
            runtime.__class__ = SkipsParked
        return runtime

    try:
        check_runtime(counted, max_examples=EXAMPLES, kinds={StageKind.AR}, refused={ControlMethod.SLEEP},
                      derandomize=True, shrink=False)  # fmt: skip
        verdict = {"ok": True}
    except AssertionError as exc:  # ConformanceError (an EngineNotDrained from shutdown is ORCH-INV-300)
        verdict = {"ok": False, "error": type(exc).__name__, "message": str(exc).splitlines()[0]}
    finally:
        factory.close()  # type: ignore[attr-defined]
    return {**verdict, "runtimes": made["runtimes"]}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "sound")))
