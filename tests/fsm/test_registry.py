"""The registry in ``specs/``: complete, consistent with the contracts and the checks, and append-only.

IDs are append-only: ``specs/ids.lock`` holds every issued ID with the hash of its rule text;
an ID that vanishes or whose rule changes fails here. New IDs are issued with
``omni-fsm registry --update-lock``, which only ever appends.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

from omni_fsm.cli.registry import run as main
from omni_fsm.errors import MalformedInput
from omni_fsm.invariants import CHECKS, DIFFERENTIAL_CHECKS, RUNTIME_CHECKS
from omni_fsm.registry import (
    KINDS,
    LOCK_FILE,
    REGISTRY_CHECKS,
    REGISTRY_FILE,
    Registry,
    check_problems,
    ids_outside_ranges,
    load_registry,
    lock_problems,
    read_lock,
    rule_digest,
    rule_text_problems,
    safe_change_topics_covered,
    uncovered_rules,
    update_lock,
)
from omni_fsm.registry.traceability import discover_tests

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry(ROOT)
UPDATE = "issue new IDs with `omni-fsm registry --update-lock`"


def report(problems: list[str]) -> str:
    return "\n" + "\n".join(problems)


def replaced(reg: Registry, inv_id: str, **changes: object) -> Registry:
    """Return an in-memory copy of ``reg`` with entry ``inv_id`` changed (or removed if no changes)."""
    entry = reg.get(inv_id)
    assert entry is not None
    kept = [attrs.evolve(inv, **changes) if inv is entry else inv
            for inv in reg.invariants if changes or inv is not entry]  # fmt: skip
    return attrs.evolve(reg, invariants=tuple(kept))


# -- the lock: append-only IDs ----------------------------------------------------------------------------


def test_no_issued_id_vanished_or_changed_meaning() -> None:
    problems = lock_problems(REGISTRY, read_lock(ROOT))
    assert not problems, f"{LOCK_FILE} and {REGISTRY_FILE} disagree ({UPDATE}; never edit the lock):" + report(problems)


def test_lock_lists_every_id_once_unless_promoted() -> None:
    issued = read_lock(ROOT)
    assert {i.id for i in issued} == {inv.id for inv in REGISTRY.invariants}
    for inv_id in {i.id for i in issued}:
        kinds = [i.kind for i in issued if i.id == inv_id]
        assert kinds in ([kinds[0]], ["deferred", "checked"]), f"{inv_id}: {kinds}"


def test_a_vanished_id_fails_the_lock() -> None:
    problems = lock_problems(replaced(REGISTRY, "ORCH-INV-207"), read_lock(ROOT))
    assert len(problems) == 1 and "ORCH-INV-207 was issued but is gone" in problems[0]


def test_a_changed_rule_fails_the_lock() -> None:
    entry = REGISTRY.get("ORCH-INV-100")
    assert entry is not None
    problems = lock_problems(replaced(REGISTRY, entry.id, rule=entry.rule + " Unless it is late."), read_lock(ROOT))
    assert len(problems) == 1 and "ORCH-INV-100 changed meaning" in problems[0]


def test_reflowing_a_rule_keeps_its_meaning() -> None:
    entry = REGISTRY.get("ORCH-INV-100")
    assert entry is not None
    assert rule_digest(entry.rule.replace(" ", "\n  ")) == rule_digest(entry.rule)


def test_a_demoted_kind_fails_the_lock_but_a_promotion_is_recorded() -> None:
    demoted = lock_problems(replaced(REGISTRY, "ORCH-INV-101", kind="deferred"), read_lock(ROOT))
    assert len(demoted) == 1 and "only deferred -> checked" in demoted[0]
    # AR-INV-300 was issued deferred and promoted: a lock without the promotion's line asks for it
    unrecorded = [i for i in read_lock(ROOT) if (i.id, i.kind) != ("AR-INV-300", "checked")]
    promoted = lock_problems(REGISTRY, unrecorded)
    assert len(promoted) == 1 and "--update-lock" in promoted[0]


def _checkout_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    return tmp_path


def test_update_lock_only_appends(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    before = (root / LOCK_FILE).read_text()
    extra = '\n[[invariant]]\nid = "ORCH-INV-212"\ntitle = "t"\n' \
            'rule = "diffusion abort remains whole-sample retry."\n' \
            'source = { contract = "engine_orchestration", section = "Safe-change guide", ' \
            'item = "safe-change.diffusion-abort" }\ntopic = "failure-cancellation-cleanup"\nkind = "process"\n' \
            'reason = "r"\n'  # fmt: skip
    (root / REGISTRY_FILE).write_text((root / REGISTRY_FILE).read_text() + extra)
    appended, refused = update_lock(load_registry(root))
    assert refused == [] and len(appended) == 1 and appended[0].startswith("ORCH-INV-212 process sha256:")
    assert (root / LOCK_FILE).read_text() == before + appended[0] + "\n"
    assert update_lock(load_registry(root)) == ([], [])


def test_update_lock_refuses_while_an_id_changed_meaning(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    text = (root / REGISTRY_FILE).read_text().replace("orchestration MUST NOT forward", "orchestration MAY forward")
    (root / REGISTRY_FILE).write_text(text)
    before = (root / LOCK_FILE).read_text()
    appended, refused = update_lock(load_registry(root))
    assert appended == [] and any("ORCH-INV-100 changed meaning" in p for p in refused)
    assert (root / LOCK_FILE).read_text() == before
    assert main(["--root", str(root), "--update-lock"]) == 1


def test_a_malformed_lock_line_names_file_and_line(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    (root / LOCK_FILE).write_text((root / LOCK_FILE).read_text() + "ORCH-INV-999 maybe\n")
    with pytest.raises(MalformedInput, match=rf"^{LOCK_FILE}:\d+: expected"):
        read_lock(root)


# -- completeness and consistency ---------------------------------------------------------------------------


def test_every_contract_rule_has_an_entry() -> None:
    problems = uncovered_rules(REGISTRY)
    assert not problems, report(problems)


def test_every_rule_is_the_contracts_text_or_a_cited_refinement() -> None:
    problems = rule_text_problems(REGISTRY)
    assert not problems, report(problems)


def test_every_id_is_in_its_namespaces_reserved_range_for_its_topic() -> None:
    problems = ids_outside_ranges(REGISTRY)
    assert not problems, report(problems)


def test_an_id_outside_its_range_is_reported() -> None:
    problems = ids_outside_ranges(replaced(REGISTRY, "ORCH-INV-207", topic="request-state-and-ordering"))
    assert len(problems) == 1
    assert "ORCH-INV-207 is outside the range reserved for request-state-and-ordering" in problems[0]


def test_checks_exist_and_every_monitor_check_belongs_to_its_entry() -> None:
    problems = check_problems(REGISTRY)
    assert not problems, report(problems)


@pytest.mark.parametrize("change, expected", [
    ({"checks": ("no_such_check",)}, "unknown check 'no_such_check'"),
    ({"checks": ("one_terminal_per_request",)}, "implements ORCH-INV-101, not ORCH-INV-100"),
])  # fmt: skip
def test_a_wrong_check_name_is_reported(change: dict[str, object], expected: str) -> None:
    problems = check_problems(replaced(REGISTRY, "ORCH-INV-100", **change))
    assert any(expected in p for p in problems)
    assert any("no_work_after_terminal (ORCH-INV-100) belongs to no entry" in p for p in problems)


def test_kinds_carry_their_fields() -> None:
    for inv in REGISTRY.invariants:
        assert inv.kind in KINDS
        assert bool(inv.checks) == (inv.kind == "checked"), inv.id
        assert bool(inv.deferred_to) == (inv.kind == "deferred"), inv.id
        assert bool(inv.reason) == (inv.kind == "process") and "\n" not in (inv.reason or ""), inv.id


def test_deferred_entries_name_modules_that_exist() -> None:
    """A ``deferred_to`` starts with the module that will check the rule (``pkg.mod: what``); that module exists."""
    root = Path(__file__).resolve().parents[2]
    for inv in REGISTRY.invariants:
        if inv.kind == "deferred":
            module = (inv.deferred_to or "").partition(":")[0].strip()
            path = root.joinpath(*module.split("."))
            assert path.is_dir() or path.with_suffix(".py").is_file(), f"{inv.id}: {module} does not exist"


def test_every_registry_check_is_named() -> None:
    named = {name for inv in REGISTRY.invariants for name in inv.checks}
    assert set(REGISTRY_CHECKS) <= named and set(CHECKS) <= named


@pytest.mark.covers("ORCH-INV-301", "AR-INV-304")
def test_safe_change_topics_map_to_tested_checked_invariants() -> None:
    problems = safe_change_topics_covered(REGISTRY, set(discover_tests(ROOT)))
    assert not problems, report(problems)


def test_the_assignment_by_kind() -> None:
    by_kind = {kind: sorted(inv.id for inv in REGISTRY.invariants if inv.kind == kind) for kind in KINDS}
    assert by_kind["process"] == ["ORCH-INV-302", "ORCH-INV-304", "ORCH-INV-305"]
    assert by_kind["deferred"] == []
    # one registry check, named twice
    assert len(by_kind["checked"]) == len(CHECKS) + len(DIFFERENTIAL_CHECKS) + len(RUNTIME_CHECKS) + 2


def test_the_command_line_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(ROOT)]) == 0
    assert capsys.readouterr().out.startswith(f"{len(REGISTRY.invariants)} invariants:")


# -- malformed files: FILE:LINE: reason ---------------------------------------------------------------------


@pytest.mark.parametrize("old, new, expected", [
    ('kind = "process"\nreason = "a review', 'kind = "process"\nreasons = "a review', "unknown field 'reasons'"),
    ('id = "ORCH-INV-303"\n', 'id = "ORCH-INV-3o3"\n', "is not of the form NAME-INV-NNN"),
    ('kind = "checked"\nchecks = ["worker_modes_covered"]', 'kind = "deferred"\nchecks = ["worker_modes_covered"]',
     "'checks' is only for kind 'checked'"),
    ('kind = "checked"\nchecks = ["forward_to_next_logical_stage"]',
     'kind = "checkd"\nchecks = ["forward_to_next_logical_stage"]', "kind 'checkd' is not one of"),
    ('item = "candidates.003" }', 'item = "candidates.042" }', "is not in specs/contracts/"),
    ('"routing" = [', '"routing" = 1\n"x" = [', "topic 'routing' must map to a non-empty list"),
    ('id = "ORCH-INV-304"\n', 'id = "ORCH-INV-304\n', "not valid TOML"),
])  # fmt: skip
def test_a_malformed_registry_names_file_and_line(tmp_path: Path, old: str, new: str, expected: str) -> None:
    root = _checkout_copy(tmp_path)
    text = (root / REGISTRY_FILE).read_text()
    assert text.count(old) == 1
    (root / REGISTRY_FILE).write_text(text.replace(old, new))
    line = text[: text.index(old)].count("\n") + 1
    with pytest.raises(MalformedInput) as caught:
        load_registry(root)
    assert expected in caught.value.reason
    assert caught.value.path == REGISTRY_FILE
    assert line - 12 <= caught.value.line <= line + 2, str(caught.value)


def test_a_malformed_contract_names_file_and_line(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    path = root / "specs/contracts/ar_runtime.toml"
    text = path.read_text()
    path.write_text(text.replace('topics = ["request lifecycle"', 'topics = ["request life cycle"'))
    with pytest.raises(MalformedInput, match=r"^specs/contracts/ar_runtime\.toml:\d+: item \d+: topic 'request life"):
        load_registry(root)
