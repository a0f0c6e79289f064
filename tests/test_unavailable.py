"""What this machine lacks is skipped on a developer's machine and fails under ``CI=true``."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.unavailable import unavailable


@pytest.mark.parametrize("ci", ["true", "1", "YES"])
def test_under_ci_a_missing_part_fails(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(Failed, match=r"^CI=true: vllm is not installed$"):
        unavailable("vllm is not installed")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_elsewhere_a_missing_part_is_skipped(monkeypatch: pytest.MonkeyPatch, ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(Skipped, match=r"^vllm is not installed$"):
        unavailable("vllm is not installed")
