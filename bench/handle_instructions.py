"""Instructions per ``Lifecycle.handle`` under callgrind: a fixed event mix, replayed on a fresh core.

Run as ``.venv/bin/python bench/handle_instructions.py`` (it runs itself twice under
``valgrind --tool=callgrind``) or, to compare two checkouts, ``... --python OTHER/.venv/bin/python
--root OTHER`` for each. The mix (a three-stage AR -> AR -> diffusion pipeline; one request in
eight with two samples, one in eight with a CFG companion, one in five aborted while its second
stage runs) is recorded by driving a core with the public API only (``omni_fsm.Lifecycle``,
``omni_fsm.spec.events``), then replayed on a fresh core: once its first ``SHORT`` events, once all of
them. The difference of the two runs' instruction counts over the difference of their event counts
is the cost of one ``handle`` (observations made, effects run, fan-out drained), with the
recording, the interpreter's start and the imports cancelled out.
Prints both counts and, last line, ``handle_instructions: per_handle=... events=...``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REQUESTS = 600
SHORT_FRACTION = 0.25
KINDS = ("ar", "ar", "diffusion")
FINAL = (False, True, True)


def record_mix(requests: int = REQUESTS) -> list[Any]:
    """Return the event mix: the events a deterministic driver fed a core, in order."""
    from omni_fsm import Lifecycle, StageKind
    from omni_fsm import events as ev
    from omni_fsm import observations as ob

    kinds = [StageKind.AR if k == "ar" else StageKind.DIFFUSION for k in KINDS]
    core = Lifecycle(kinds, FINAL)
    mix: list[Any] = []
    work: list[Any] = []

    def feed(event: Any) -> None:
        mix.append(event)
        for o in core.handle(event):
            if isinstance(o, ob.Dispatched):
                outputs = 3 if kinds[o.stage] is StageKind.AR else 1
                work.extend([ev.Scheduled(o.rid, o.stage), *(ev.StageOutput(o.rid, o.stage) for _ in range(outputs)),
                             ev.StageFinished(o.rid, o.stage)])
            elif isinstance(o, ob.AbortSent):
                work.append(ev.AbortDone(o.rid, o.stage))

    for i in range(requests):
        rid = 4 * i
        n, companions = (2, 0) if i % 8 == 3 else (1, 1 if i % 8 == 5 else 0)
        feed(ev.Submit(rid, n, companions))
        aborted = False
        while work:
            event = work.pop(0)
            feed(event)
            if i % 5 == 4 and not aborted and isinstance(event, ev.StageOutput) and event.stage == 1:
                aborted = True
                feed(ev.Abort(rid))
    return mix


def replay(events: int) -> None:
    """Record the mix and replay its first ``events`` events on a fresh core."""
    from omni_fsm import Lifecycle, StageKind

    mix = record_mix()
    kinds = [StageKind.AR if k == "ar" else StageKind.DIFFUSION for k in KINDS]
    core = Lifecycle(kinds, FINAL)
    handle = core.handle
    for event in mix[:events]:
        handle(event)


def _environment(root: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": root}


def instructions(python: str, root: str, events: int) -> int:
    """Return the instructions callgrind counts for one replay of ``events`` events."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", python, __file__, "--replay",
               str(events)]
        env = _environment(root)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, check=False)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise SystemExit(f"callgrind failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the checkout to measure")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="that checkout's root")
    parser.add_argument("--replay", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay is not None:
        replay(args.replay)
        return 0
    total = len(record_mix())
    short = int(total * SHORT_FRACTION)
    # every module compiled once first (same interpreter, environment and folder), so that neither measured run
    # pays for writing bytecode
    subprocess.run([args.python, __file__, "--replay", "0"], env=_environment(args.root), cwd=args.root, check=True)
    few, many = instructions(args.python, args.root, short), instructions(args.python, args.root, total)
    print(f"replay of {short} events: {few} instructions")
    print(f"replay of {total} events: {many} instructions")
    print(f"handle_instructions: per_handle={(many - few) / (total - short):.0f} events={total - short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
