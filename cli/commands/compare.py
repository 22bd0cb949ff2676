"""``tailscope compare RUN BASELINE``: did RUN regress against BASELINE, and where?

Per percentile (P50 … P99.9) and per request class, the change with a
bootstrap confidence interval; a regression is flagged only when the change
is above ``--threshold`` and statistically significant (analyzers/comparison/baseline.py).
Writes comparison.json, comparison.html, junit-compare.xml and comparison.md
(into RUN, or ``--out``). Exit 0: no regression; 1: a regression; 2: a run
directory that cannot be read or a bad option.
"""

from __future__ import annotations

import argparse

from tailscope.cli.commands.common import EXIT_OK, EXIT_SLO_FAILED, error


def threshold_arg(text: str) -> float:
    """argparse type: ``10%`` or ``0.1`` → 0.1 (a fraction in (0, 10])."""
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 10% or 0.1, got {text!r}") from None
    if not 0 < value <= 10:
        raise argparse.ArgumentTypeError(f"must be above 0% and at most 1000%, got {text!r}")
    return value


def confidence_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.95, got {text!r}") from None
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError("must be in [0.5, 1)")
    return value


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``compare`` and ``run --baseline``."""
    p.add_argument("--threshold", type=threshold_arg, default=0.10, metavar="PCT",
                   help="relative change that counts as a regression when significant (default 10%%)")
    p.add_argument("--confidence", type=confidence_arg, default=0.95, metavar="C",
                   help="confidence of the bootstrap intervals (default 0.95)")


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="compare a run with a baseline run: regressions per percentile and class",
        description="Compare RUN with BASELINE (two run directories): for every percentile and request "
                    "class, the change with a bootstrap confidence interval, flagged as a regression only "
                    "when above --threshold and significant; the stage that changed. Writes "
                    "comparison.json/.html/.md and junit-compare.xml. Exit 0 when nothing regressed, "
                    "1 on a regression, 2 when a run cannot be read.")
    p.add_argument("run", help="the run directory to judge")
    p.add_argument("baseline", help="the baseline run directory (e.g. the last release's run)")
    add_compare_options(p)
    p.add_argument("--out", metavar="DIR", help="where to write the comparison files (default: RUN)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from rich.console import Console

    from tailscope.conductor.reporting import compare_and_write
    from tailscope.conductor.terminal import print_comparison
    from tailscope.rundir import RunDirError

    try:
        compared = compare_and_write(args.run, args.baseline, threshold=args.threshold,
                                     confidence=args.confidence, out_dir=args.out)
    except RunDirError as exc:
        return error(str(exc))
    except OSError as exc:
        return error(f"cannot write the comparison files: {exc}")
    print_comparison(Console(), compared.comparison, compared.paths)
    return EXIT_SLO_FAILED if compared.regressed else EXIT_OK
