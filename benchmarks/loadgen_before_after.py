"""CPU per request of the recording open-loop generator in two checkouts, interleaved.

    git worktree add /tmp/wt-before <commit>
    python benchmarks/loadgen_before_after.py --before /tmp/wt-before --after . [--rounds 20] [--requests 30000]

Runs :mod:`loadgen_throughput`'s tailscope generator (open loop, every record
written to an Arrow stream, ``--concurrency`` in flight) from each checkout in
turn against one loopback server, alternating which goes first each round
(this machine's speed drifts by ±15 % over minutes). Prints each run's
requests per CPU-second, both medians, after ÷ before as CPU per request
(the issue rule: at most 1.05), and the per-round paired ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from bench_common import load_average, loopback_server, run_python
from loadgen_throughput import TAILSCOPE


def _package_root(tree: str, holder: str) -> str:
    """A folder whose ``tailscope`` entry is ``tree`` (the checkout is the package)."""
    os.symlink(os.path.abspath(tree), os.path.join(holder, "tailscope"))
    return holder


def _code(tree: str) -> str:
    """The generator's code, with the runner module the checkout has (renamed in issue 30)."""
    if os.path.exists(os.path.join(tree, "loadgen", "local_runner.py")):
        return TAILSCOPE
    return TAILSCOPE.replace("tailscope.loadgen.local_runner", "tailscope.loadgen.runner")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="checkout (worktree) of the earlier commit")
    parser.add_argument("--after", required=True, help="checkout of the later commit or working tree")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--requests", type=int, default=30000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    per_core: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp, loopback_server() as (url, _):
        sides = {}
        for side in per_core:
            tree = getattr(args, side)
            os.makedirs(os.path.join(tmp, side))
            sides[side] = (_package_root(tree, os.path.join(tmp, side)), _code(tree))
        config = {"url": url, "concurrency": args.concurrency, "requests": args.requests, "seconds": 0}
        for round_number in range(1, args.rounds + 1):
            order = ("before", "after") if round_number % 2 else ("after", "before")
            for side in order:
                root, code = sides[side]
                os.environ["PYTHONPATH"] = root  # the child imports this checkout's tailscope
                r = run_python(code, config)
                per_core[side].append(r["completed"] / max(r["cpu_s"], 1e-9))
                print(f"round {round_number:2d} {side:6s} {r['completed']} requests ({r['errors']} errors, "
                      f"{r['rows']} rows): {per_core[side][-1]:8.0f} req per CPU-second", flush=True)
    before, after = (statistics.median(per_core[s]) for s in ("before", "after"))
    paired = [b / a for b, a in zip(per_core["before"], per_core["after"])]
    print(f"median before {before:8.0f}, after {after:8.0f} req per CPU-second; "
          f"CPU per request after / before: {before / after:.3f} (goal <= 1.05)")
    print(f"per-round paired ratios: median {statistics.median(paired):.3f}, "
          f"range {min(paired):.2f}-{max(paired):.2f}; load average {load_average()}")


if __name__ == "__main__":
    main()
