"""A runtime whose busy steps take longer, as a real engine's forward pass does (the Ray tests and benchmark)."""

from __future__ import annotations

import time
from typing import Any


class Paced:
    """A runtime whose busy steps take ``step_s`` seconds longer (every other call is the runtime's own)."""

    def __init__(self, runtime: Any, step_s: float) -> None:
        self.runtime, self.step_s = runtime, step_s
        self.busy = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)

    def step(self) -> bool:
        if self.busy:
            time.sleep(self.step_s)
        self.busy = bool(self.runtime.step())
        return self.busy
