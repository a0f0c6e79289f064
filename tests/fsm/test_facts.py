"""specs/facts.toml lists, per checked rule, the observable facts it judges, in the file's closed vocabularies.

Every checked invariant has exactly one entry and no other ID has one; every ``observed_by`` names a field of
an event or observation a trace carries; a broken copy fails naming its file and line; docs/traceability.md
shows each rule's facts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from omni_fsm.cli.registry import run as registry_command
from omni_fsm.errors import MalformedInput
from omni_fsm.registry import FACTS_FILE, REGISTRY_FILE, load_facts, load_registry, observed_by_problems
from omni_fsm.registry.facts import AT_VALIDATION, observable_fields
from omni_fsm.registry.traceability import generate
from omni_fsm.trace.codec import INPUTS, OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry(ROOT)
FACTS = load_facts(REGISTRY)
#: what a trace carries: every input event and observation class, and their base classes with fields
CARRIED = observable_fields([*INPUTS.values(), *OUTPUTS.values()])
CHECKED = [inv.id for inv in REGISTRY.invariants if inv.kind == "checked"]


def test_every_checked_rule_has_one_entry_and_no_other_rule_has_one() -> None:
    assert sorted(rule.id for rule in FACTS.rules) == sorted(CHECKED)


def test_every_observed_by_names_a_field_a_trace_carries() -> None:
    assert observed_by_problems(FACTS, CARRIED) == []


def test_internal_events_are_not_observable() -> None:
    assert "ChildEnded" not in CARRIED and "Admit" not in CARRIED
    assert CARRIED["StageEvent"] == {"rid", "stage", "replica"}


def test_registry_checks_are_judged_at_validation_and_history_checks_over_what_a_trace_carries() -> None:
    for rule in FACTS.rules:
        inv = REGISTRY.get(rule.id)
        assert inv is not None
        history_checked = not any(name.endswith("_topics_covered") for name in inv.checks)
        assert (rule.moment != AT_VALIDATION) == history_checked, rule.id
        assert bool(rule.observed_by) == history_checked, rule.id


def test_the_traceability_table_shows_each_rules_facts() -> None:
    doc = generate(ROOT)
    facts_part = doc.split("## Facts each rule judges", 1)[1].split("## Contract rules", 1)[0]
    for rule in FACTS.rules:
        (row,) = [line for line in facts_part.splitlines() if line.startswith(f"| {rule.id} |")]
        assert rule.moment in row and all(name in row for name in rule.identities)
        assert ("**gap:**" in row) == (rule.gap is not None)
        assert row.count("**missing:**") == len(rule.missing)


# -- a broken copy names its file and line -----------------------------------------------------------------


def _copy(tmp_path: Path, old: str = "", new: str = "", at: str | None = None) -> tuple[Path, int]:
    """Copy ``specs/`` with ``old`` replaced by ``new`` (once) in the facts file; return the root and the line of
    ``at`` (default: ``new``) in the replacement."""
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    path = tmp_path / FACTS_FILE
    text = path.read_text(encoding="utf-8")
    assert old in text
    text = text.replace(old, new, 1)
    path.write_text(text, encoding="utf-8")
    return tmp_path, _line_of(text, new) + new[: new.index(at or new)].count("\n")


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(("old", "new", "at", "expected"), [
    pytest.param('identities = ["request", "stage", "component"]', 'identities = ["request", "tenant"]', None,
                 "rule ORCH-INV-001: identity 'tenant' is not one of request, parent", id="unknown-identity"),
    pytest.param('moment = "at a terminal"', 'moment = "eventually"', None,
                 "rule ORCH-INV-101: moment 'eventually' is not one of at the event", id="unknown-moment"),
    pytest.param('id = "ORCH-INV-100"', 'id = "ORCH-INV-302"', None,
                 "rule ORCH-INV-302: ORCH-INV-302 is process, not checked, in specs/invariants.toml", id="not-checked"),
    pytest.param('id = "ORCH-INV-102"', 'id = "ORCH-INV-101"  # again', None,
                 "rule ORCH-INV-101: a second entry for ORCH-INV-101", id="twice"),
    pytest.param('id = "ORCH-INV-109"', 'id = "ORCH-INV-199"', None,
                 "rule ORCH-INV-199: ORCH-INV-199 is not in specs/invariants.toml", id="unknown-id"),
    pytest.param('observed_by = ["Forwarded.rid", "Forwarded.src", "Forwarded.dst"]',
                 'observed_by = ["Forwarded rid"]', None, "rule ORCH-INV-002: 'Forwarded rid' is not Class.field",
                 id="not-class-field"),
    pytest.param('observed_by = ["Forwarded.rid", "Forwarded.src", "Forwarded.dst"]', "observed_by = []", None,
                 "rule ORCH-INV-002: a rule judged 'at the event' has at least one in observed_by",
                 id="nothing-observed"),
    pytest.param('moment = "at the step\'s end"\nonly_at_end', 'moment = "at the end marker"\nonly_at_end',
                 "only_at_end", "rule ORCH-INV-208: only_at_end says nothing more", id="redundant-only-at-end"),
    pytest.param('identities = ["request", "sample", "companion"]\n',
                 'identities = ["request", "sample", "companion"]\nflavour = "x"\n', "flavour",
                 "rule ORCH-INV-208: unknown field 'flavour'", id="unknown-field"),
])  # fmt: skip
def test_a_broken_facts_file_names_file_and_line(tmp_path: Path, old: str, new: str, at: str | None,
                                                 expected: str) -> None:
    root, line = _copy(tmp_path, old, new, at)
    with pytest.raises(MalformedInput) as info:
        load_facts(load_registry(root))
    assert str(info.value).startswith(f"{FACTS_FILE}:{line}: {expected}")


def test_a_checked_rule_without_facts_is_named_at_its_registry_line(tmp_path: Path) -> None:
    root, _ = _copy(tmp_path)
    path = root / FACTS_FILE
    text = path.read_text(encoding="utf-8")
    start = text.index('[[rule]]\nid = "ORCH-INV-207"')
    path.write_text(text[:start] + text[text.index("[[rule]]", start + 1) :], encoding="utf-8")
    line = _line_of((root / REGISTRY_FILE).read_text(encoding="utf-8"), '[[invariant]]\nid = "ORCH-INV-207"')
    with pytest.raises(MalformedInput, match=rf"^{REGISTRY_FILE}:{line}: ORCH-INV-207 is checked but has no "):
        load_facts(load_registry(root))


@pytest.mark.parametrize(("old", "new", "expected"), [
    pytest.param('"Forwarded.rid", "Forwarded.src"', '"Forwarded.replica", "Forwarded.src"',
                 "rule ORCH-INV-001: observed_by 'Forwarded.replica': Forwarded has no field 'replica' "
                 "(its fields: dst, rid, src)", id="no-such-field"),
    pytest.param('"StageFinished.rid", "AbortDone.rid"', '"StageFinished.rid", "ChildEnded.outcome"',
                 "rule ORCH-INV-101: observed_by 'ChildEnded.outcome': ChildEnded is no event or observation a "
                 "trace carries", id="internal-event"),
    pytest.param('observed_by = ["EngineDied", ', 'observed_by = ["Emitted", ',
                 "rule ORCH-INV-210: observed_by 'Emitted': Emitted has fields", id="class-with-fields"),
])  # fmt: skip
def test_an_observed_by_that_names_no_carried_field_names_file_and_line(tmp_path: Path, old: str, new: str,
                                                                         expected: str) -> None:
    root, line = _copy(tmp_path, old, new)
    problems = observed_by_problems(load_facts(load_registry(root)), CARRIED)
    assert len(problems) == 1 and problems[0].startswith(f"{FACTS_FILE}:{line}: {expected}"), problems


def test_the_registry_command_refuses_a_malformed_facts_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root, line = _copy(tmp_path, 'moment = "at a terminal"', 'moment = "later"')
    assert registry_command(["--root", str(root)]) == 2
    assert capsys.readouterr().err.startswith(f"{FACTS_FILE}:{line}: rule ORCH-INV-101: moment 'later'")
