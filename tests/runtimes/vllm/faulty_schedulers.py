"""Faults of vLLM's real scheduler, each re-injecting one lifecycle bug the contract test must catch.

Each is a mixin: the contract test puts it in front of ``Scheduler`` or ``AsyncScheduler``.
"""

from __future__ import annotations

from vllm.v1.request import RequestStatus


class ReadmitsAborted:
    """Puts an aborted request back into the waiting queue, as if the abort had not happened."""

    def finish_requests(self, request_ids, finished_status):  # type: ignore[no-untyped-def]
        ended = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        if finished_status == RequestStatus.FINISHED_ABORTED:
            for request in ended:
                if request.request_id not in self.requests:
                    request.status = RequestStatus.WAITING
                    self.requests[request.request_id] = request
                    self.waiting.add_request(request)
        return ended


class AbortMissesRemoteKVWait:
    """Aborts by status: a request waiting for remote KVs is not in the statuses it looks at, so it is missed."""

    def finish_requests(self, request_ids, finished_status):  # type: ignore[no-untyped-def]
        if finished_status == RequestStatus.FINISHED_ABORTED and request_ids is not None:
            ids = (request_ids,) if isinstance(request_ids, str) else tuple(request_ids)
            request_ids = [r for r in ids if r not in self.requests
                           or self.requests[r].status != RequestStatus.WAITING_FOR_REMOTE_KVS]  # fmt: skip
        return super().finish_requests(request_ids, finished_status)  # type: ignore[misc]


class SkipsPreempted:
    """Re-queues a preempted request as WAITING instead of PREEMPTED (it resumes as if it were new)."""

    def _preempt_request(self, request, timestamp, drop_stale_output=False):  # type: ignore[no-untyped-def]
        super()._preempt_request(request, timestamp, drop_stale_output)  # type: ignore[misc]
        request.status = RequestStatus.WAITING


FAULTY = (ReadmitsAborted, AbortMissesRemoteKVWait, SkipsPreempted)
