"""A runtime may report subclasses of the protocol's reports: each is handled as its protocol base."""

from __future__ import annotations

import attrs
import pytest

from omni_fsm import StageKind
from omni_runtime import Orchestrator, Prompt, simple_pipeline
from omni_runtime.core import commands as cmd
from omni_runtime.core import protocol as rp
from omni_runtime.errors import OmniRuntimeError


@attrs.frozen(slots=True)
class MyStatus(rp.StatusChanged):
    pass


@attrs.frozen(slots=True)
class MyOutput(rp.Output):
    note: str = "mine"


@attrs.frozen(slots=True)
class MyFinished(rp.Finished):
    pass


@attrs.frozen(slots=True)
class MyAbortResult(rp.AbortResult):
    pass


def test_subclassed_reports_run_a_request_to_its_terminal_and_answer_its_abort() -> None:
    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    for _ in range(2):  # the second pass takes the cached kinds
        rid, _ = orch.submit(Prompt())
        out = orch.report(0, 0, MyStatus(rid, 0, rp.Status.SCHEDULED))
        out += orch.report(0, 0, MyOutput(rid, 1, 1, (7,)))
        out += orch.report(0, 0, MyFinished(rid, 2))
        finals = [c.message for c in out if isinstance(c, cmd.Deliver) and c.message.finished]
        assert [(m.rid, m.data) for m in finals] == [(rid, (7,))]
    rid, _ = orch.submit(Prompt())
    orch.report(0, 0, MyStatus(rid, 0, rp.Status.SCHEDULED))
    call, out = orch.abort(rid)
    (abort_at,) = [c for c in out if isinstance(c, cmd.AbortAt)]
    out = orch.report(0, 0, MyAbortResult(abort_at.abort_id, rid, True))
    assert [c.call_id for c in out if isinstance(c, cmd.AbortAnswer)] == [call]
    assert orch.idle()


def test_a_report_outside_the_protocol_is_refused_by_name() -> None:
    @attrs.frozen(slots=True)
    class Stranger(rp.Report):
        pass

    orch = Orchestrator(simple_pipeline([StageKind.AR]))
    with pytest.raises(OmniRuntimeError, match="unknown report type Stranger"):
        orch.report(0, 0, Stranger())
