"""Whether ``Engine.generate`` over a list on the default simulator costs the same per prompt at 10,000 prompts as at
100,000 (issue 29: the simulator rescanned every request it held each step, and 100,000 prompts took over 300 s).

Run as ``.venv/bin/python bench/sim_scale.py`` (``--small N --large N --repeats R``). Each round runs
``Engine.generate`` over ``small`` prompts, then over ``large`` prompts, on the example pipeline
(``examples/pipeline.toml``: AR -> AR -> diffusion on the simulator, its default settings), each in a fresh
``Engine``, and times the call alone; every result must have finished. Rounds alternate the two sizes so that machine
noise falls on both alike. Prints each run, then last ``sim_scale: n_small=... n_large=... s_per_10k_small=...
s_per_10k_large=... ratio=...``: the medians of the seconds per 10,000 prompts, and ratio = large / small (1.0:
linear; the target is <= 1.3).
"""

from __future__ import annotations

import argparse
import statistics
import time

from omni_runtime import Engine, Prompt, example_pipeline, load_pipeline


def seconds_for(count: int) -> float:
    """Return the seconds ``Engine.generate`` took over ``count`` prompts (all of them must finish)."""
    pipeline = load_pipeline(example_pipeline())
    prompts = [Prompt([1 + i % 7, 2, 3]) for i in range(count)]
    with Engine(pipeline) as engine:
        started = time.perf_counter()
        results = engine.generate(prompts)
        took = time.perf_counter() - started
    finished = sum(1 for result in results if result.finished)
    if finished != count:
        raise SystemExit(f"sim_scale: {count - finished} of {count} prompts did not finish")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each one run of each size (default 3)")
    args = parser.parse_args()
    per_10k: dict[int, list[float]] = {args.small: [], args.large: []}
    for round_ in range(args.repeats):
        for count in (args.small, args.large):
            took = seconds_for(count)
            per_10k[count].append(took * 10_000 / count)
            rate = per_10k[count][-1]
            print(f"round {round_ + 1}: {count} prompts in {took:.2f} s ({rate:.3f} s per 10k)", flush=True)
    small, large = statistics.median(per_10k[args.small]), statistics.median(per_10k[args.large])
    print(f"sim_scale: n_small={args.small} n_large={args.large} s_per_10k_small={small:.3f} "
          f"s_per_10k_large={large:.3f} ratio={large / small:.2f}")


if __name__ == "__main__":
    main()
