"""``omni-fsm view`` and its renderer: one self-contained page, a lane per request, every violation with its rule,
trace-derived text escaped, and bad input refused exactly as ``omni-fsm check`` refuses it."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

import omni_fsm
from omni_fsm import ControlMethod, Lifecycle, StageKind
from omni_fsm import events as ev
from omni_fsm.cli import main as cli_main
from omni_fsm.cli.view import rule_texts
from omni_fsm.registry import load_registry, normalize, packaged_root
from omni_fsm.trace import Step, write_trace
from omni_fsm.trace.check import check_trace
from omni_fsm.view import Section, render_page, render_trace, script_json
from omni_fsm.view.page import CSP, DATA_ID

from .view_traces import cross_failure_counterexample, request_ids

HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)>&amp;\"'<!--"
KINDS, FINAL = (StageKind.AR, StageKind.DIFFUSION), (False, True)


def hostile_trace(folder: Path) -> Path:
    """A clean trace whose strings (an RPC's tags and error, the file's name) are all markup."""
    lc = Lifecycle(KINDS, FINAL, 2)
    inputs = [ev.Control(7, ControlMethod.PAUSE_SCHEDULER, tags=frozenset({HOSTILE})), ev.RpcFailed(7, error=HOSTILE),
              ev.Submit(1), ev.Submit(2, n=2), ev.Scheduled(1, 0), ev.StageFinished(1, 0), ev.Scheduled(1, 1),
              ev.StageFinished(1, 1), ev.Shutdown()]  # fmt: skip
    path = folder / "<i>&'\"x.trace.jsonl"
    write_trace(path, KINDS, FINAL, 2, [(e, lc.handle(e)) for e in inputs])
    return path


def page_of(path: Path) -> str:
    steps: list[Step] = []
    report = check_trace(str(path), keep=steps)
    return render_trace(report, steps, rule_texts())


def lanes_in(page: str) -> list[int]:
    return [int(rid) for rid in re.findall(r'<div class="lane(?: violating)?" id="rid-(\d+)"', page)]


def test_trace_derived_markup_is_escaped_everywhere(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path)
    page = page_of(path)
    hostile_lines = [line for line in path.read_text(encoding="utf-8").splitlines() if "alert" in line]
    assert len(hostile_lines) == 3  # control's tags, rpc_failed's error, rpc_answered's error: each shown as text
    assert all(html.escape(line, quote=True) in page for line in hostile_lines)
    assert "<script>alert" not in page and "<img" not in page and "<i>" not in page  # never as markup
    assert page.count("<script") == page.count("</script>") == 2  # the page's data and its code, nothing else
    assert html.escape(str(path), quote=True) in page


def test_data_for_the_script_can_never_close_its_element() -> None:
    text = script_json({"message": HOSTILE, "more": ["</SCRIPT>", "<!--", "]]>"]})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"message": HOSTILE, "more": ["</SCRIPT>", "<!--", "]]>"]}


def test_one_lane_per_request_child_and_companion(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path)
    page = page_of(path)
    assert sorted(lanes_in(page)) == sorted(request_ids(path)) == [1, 2, 3, 4]  # request 2 has n=2: children 3, 4
    assert 'id="no-violations"' in page and 'class="violation"' not in page


def test_a_counterexample_shows_its_violation_with_the_rule_text_and_its_lines(tmp_path: Path) -> None:
    path = cross_failure_counterexample(tmp_path)
    page = page_of(path)
    rule = load_registry(packaged_root()).get("ORCH-INV-206")
    assert rule is not None
    assert page.count('<article class="violation"') == 1
    assert '<span class="rule-id">ORCH-INV-206</span>' in page and html.escape(rule.title) in page
    assert f'<blockquote class="rule-text">{html.escape(rule.statement)}</blockquote>' in page
    assert "Test routing, output ordering" not in page  # the safe-change guide's sentence 206 is derived from
    failed = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if '"stage_failed"' in line)
    assert re.search(rf'<div class="tl in offending" data-violations="v1" id="L{failed}"', page)
    assert sorted(lanes_in(page)) == sorted(request_ids(path))
    assert re.search(r'<div class="lane violating" id="rid-1"', page)  # the request the failure wrongly ended
    data = json.loads(re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page).group(1))
    assert data["violations"]["v1"]["invariant"] == "ORCH-INV-206" and failed in data["violations"]["v1"]["lines"]


def test_every_rule_text_shown_is_the_rule_not_the_paragraph_it_cites() -> None:
    """A derived rule (ORCH-INV-209 from the contract's ownership paragraph, say) is shown as its refinement."""
    registry = load_registry(packaged_root())
    paragraphs = {normalize(item.text) for c in registry.contracts for item in c.items if item.role != "rule"}
    shown = rule_texts()
    assert set(shown) == {inv.id for inv in registry.invariants}
    for inv in registry.invariants:
        title, text = shown[inv.id]
        assert title == inv.title and normalize(text) not in paragraphs, inv.id
        contract = registry.contract(inv.source.contract)
        cited = contract.item(inv.source.item) if contract is not None else None
        assert cited is not None
        if inv.source.derived:
            assert normalize(cited.text) not in normalize(text) and normalize(inv.rule).endswith(normalize(text[1:]))
        else:
            assert text == inv.rule
    assert shown["ORCH-INV-209"][1].startswith("After an abort request no more output reaches the client")


def trace_with_client_ids(folder: Path) -> Path:
    """A clean trace (version 3) whose client requests carry their own ids: one plain, one with n=2."""
    lc = Lifecycle(KINDS, FINAL, 2)
    inputs = [ev.Submit(1, request_id="chat-7"), ev.Submit(2, n=2, request_id="Batch <2>"), ev.Submit(5),
              ev.Shutdown()]  # fmt: skip
    path = folder / "ids.trace.jsonl"
    write_trace(path, KINDS, FINAL, 2, [(e, lc.handle(e)) for e in inputs])
    return path


def test_a_lane_is_labelled_with_the_clients_request_id_and_the_filter_finds_it(tmp_path: Path) -> None:
    page = page_of(trace_with_client_ids(tmp_path))
    search = {int(rid): text for rid, text in re.findall(r'id="rid-(\d+)" data-rid="\d+" data-search="([^"]*)"', page)}
    assert '<b>request 1</b> <code class="client-id">chat-7</code>' in page
    assert '<b>request 2</b> <code class="client-id">Batch &lt;2&gt;</code>' in page
    assert "chat-7" in search[1].split() and "batch &lt;2&gt;" in search[2]  # the filter matches in lower case
    assert all("batch &lt;2&gt;" in search[child] for child in (3, 4))  # its samples are part of that request
    assert '<b>request 5</b> <span class="muted">' in page and "chat" not in search[5]  # no id given: none shown


def test_the_page_loads_nothing_from_anywhere(tmp_path: Path) -> None:
    page = page_of(cross_failure_counterexample(tmp_path))
    assert CSP.startswith("default-src 'none';")
    assert f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP)}">' in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", page, re.IGNORECASE)
    assert "@import" not in page and "url(" not in page


def test_render_page_is_reusable_with_sections_of_ones_own() -> None:
    page = render_page("A <title>", [Section("one", "First & only", "<p>body</p>")], data={"x": "</"})
    assert "<title>A &lt;title&gt;</title>" in page and '<section id="one">' in page
    assert '<a href="#one">First &amp; only</a>' in page and "<p>body</p>" in page
    with pytest.raises(ValueError, match="anchor"):
        Section("not an id", "t", "")
    with pytest.raises(ValueError, match="must not contain"):
        render_page("t", [], script="document.write('</script>')")


def test_the_renderer_is_exported_from_the_package_root() -> None:
    assert omni_fsm.render_trace is render_trace and omni_fsm.render_page is render_page
    assert {"render_trace", "render_page", "Section"} <= set(omni_fsm.__all__)


def test_view_writes_the_page_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = cross_failure_counterexample(tmp_path)
    capsys.readouterr()
    page = tmp_path / "pages" / "report.html"
    page.parent.mkdir()
    assert cli_main(["view", str(trace), "-o", str(page)]) == 0  # a violation is the page's news, not an error
    out, err = capsys.readouterr()
    assert out == f"{page}: {trace}: 3 steps, 2 requests, 1 violations\n" and err == ""
    assert page.read_text(encoding="utf-8") == page_of(trace)
    assert [p.name for p in page.parent.iterdir()] == ["report.html"]  # no temporary file left


def test_view_without_output_prints_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = hostile_trace(tmp_path)
    assert cli_main(["view", str(trace)]) == 0
    out, err = capsys.readouterr()
    assert out == page_of(trace) and err.endswith(" 0 violations\n")


@pytest.mark.parametrize("content", [None, "", "not json\n", '{"omni_fsm_trace": 1, "stages": [], "capacity": 1}\n',
                                     '{"omni_fsm_trace":1,"stages":[{"kind":"ar","final":true}],"capacity":1}\n'
                                     '{"in":"submit","rid":1,"n":1}\n'],
                         ids=["missing", "empty", "bad-json", "bad-header", "missing-field"])  # fmt: skip
def test_bad_input_is_refused_as_check_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  content: str | None) -> None:  # fmt: skip
    trace = tmp_path / "bad.trace.jsonl"
    if content is not None:
        trace.write_text(content, encoding="utf-8")
    page = tmp_path / "report.html"
    assert cli_main(["check", str(trace)]) == 2
    checked = capsys.readouterr().err
    assert cli_main(["view", str(trace), "-o", str(page)]) == 2
    out, err = capsys.readouterr()
    assert err == checked and re.fullmatch(rf"{re.escape(str(trace))}:\d+: .+\n", err) and out == ""
    assert not page.exists()


def test_view_says_in_one_line_when_the_page_cannot_be_written(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    trace = hostile_trace(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli_main(["view", str(trace), "-o", str(blocker / "report.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"omni-fsm view: {blocker / 'report.html'}: ") and err.count("\n") == 1


def test_view_creates_no_missing_directory_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = hostile_trace(tmp_path)
    page = tmp_path / "missing" / "deeper" / "report.html"
    assert cli_main(["view", str(trace), "-o", str(page)]) == 2  # docs/trace-format.md: the page cannot be written
    out, err = capsys.readouterr()
    assert out == "" and err == f"omni-fsm view: {page}: no directory {page.parent} (none is created)\n"
    assert not (tmp_path / "missing").exists()


def test_an_incomplete_trace_is_drawn_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lc = Lifecycle(KINDS, FINAL, 2)
    path = tmp_path / "cut.trace.jsonl"
    write_trace(path, KINDS, FINAL, 2, [(e, lc.handle(e)) for e in (ev.Submit(1), ev.Scheduled(1, 0))],
                complete=False)
    page = tmp_path / "cut.html"
    assert cli_main(["view", str(path), "-o", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "no end marker" in text and "end-of-history rules not applied" in text
    assert lanes_in(text) == [1] and '"end":true' not in text
