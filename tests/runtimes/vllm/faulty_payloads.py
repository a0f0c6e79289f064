"""Faults of the Omni worker's payload construction, each re-injecting one bug a payload rule must catch.

Each replaces the runner's ``PayloadBuilder`` (``payload_probe`` installs it through the in-process executor).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import attrs

from omni_runtime.runtimes.vllm.payloads import PayloadBuilder, PayloadInputs, build_payloads


class SendsHiddenAnyway(PayloadBuilder):
    """Ignores ``omni_pooler_payload_include_hidden = False``: hidden states cross anyway (AR-INV-300)."""

    def start(self, inputs: PayloadInputs, gate: Any = None) -> Future:
        done: Future = Future()
        done.set_result(build_payloads(inputs, attrs.evolve(self.policy, include_hidden=True), self.counts))
        return done


class BuildsEmptyPayloads(PayloadBuilder):
    """Builds an empty payload for every request with nothing to send, instead of none (AR-INV-302)."""

    def start(self, inputs: PayloadInputs, gate: Any = None) -> Future:
        rows = build_payloads(inputs, self.policy, self.counts) or [None] * (len(inputs.query_start_loc) - 1)
        done: Future = Future()
        done.set_result([row if row is not None else {} for row in rows])
        return done


FAULTS = {"sends-hidden-anyway": SendsHiddenAnyway, "builds-empty-payloads": BuildsEmptyPayloads}
