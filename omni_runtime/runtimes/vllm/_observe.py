"""Every assignment of a vLLM request's status, seen as it happens.

vLLM's scheduler can move one request through several statuses inside one ``schedule()`` or
``update_from_output()`` call (a wait ends and it runs; a resumable request finishes its turn and
resumes). Polling ``Request.status`` after the call would hide those moves, so the binding's
requests are an ``ObservedRequest``: ``status`` is a property whose setter tells a hook
``(request, old, new)``. The first assignment (in vLLM's ``Request.__init__``) has ``old=None``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from vllm.v1.request import Request, RequestStatus

#: ``(request, old status or None, new status)``: called for every assignment, in order
StatusHook = Callable[[Request, RequestStatus | None, RequestStatus], None]


class ObservedRequest(Request):
    """A vLLM ``Request`` whose every status assignment calls ``hook`` (also those inside ``__init__``)."""

    __slots__ = ("_status",)  # a C-level member: the getter below reads it without a dict lookup

    def __init__(self, *args: Any, hook: StatusHook, plan: Any = None, **kwargs: Any) -> None:
        self._hook = hook
        self._status: RequestStatus | None = None
        self.plan = plan  #: what the stand-in model does for this request
        super().__init__(*args, **kwargs)

    def _set_status(self, new: RequestStatus) -> None:
        old, self._status = self._status, new
        self._hook(self, old, new)

    #: read through a C-level getter (the scheduler reads statuses far more often than it assigns them)
    status = property(operator.attrgetter("_status"), _set_status)
