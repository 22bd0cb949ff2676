"""``tailscope compare NEW… [-- BASELINE…]``: did the new runs regress against the baseline runs, and where?

Each side is one run directory, a folder of run directories (``tailscope run --repeat N``) or
several runs: ``compare RUN BASELINE``, ``compare NEWDIR BASEDIR``, ``compare NEW1 NEW2 NEW3 --
BASE1 BASE2 BASE3``. Per percentile (P50 … P99.9), metric and request class, the change with a
resampled confidence interval (runs, then time blocks within each run:
analyzers/comparison/resampling.py); a regression is flagged only when the change is above
``--threshold`` and significant (analyzers/comparison/baseline.py). Writes comparison.json,
comparison.html, junit-compare.xml and comparison.md (into the new side's path, or ``--out``).
Exit codes: cli/commands/common.py (0 no regression, 1 a regression, 2 a run that cannot be read
or a bad option).
"""

from __future__ import annotations

import argparse

from tailscope.cli.commands.common import EXIT_CODES_HELP, comparison_exit_code, error


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
                   help="confidence of the resampled intervals (default 0.95)")


#: What the bare ``--`` between the two sides of ``compare`` becomes before argparse sees it
#: (argparse would drop it): the option holding the baseline runs.
SIDES_OPTION = "--baseline-runs"


def mark_sides_separator(argv: list[str]) -> list[str]:
    """``compare NEW1 NEW2 -- BASE1 BASE2`` → ``compare NEW1 NEW2 --baseline-runs BASE1 BASE2``:
    the first bare ``--`` after the ``compare`` command; any other command line unchanged."""
    if "compare" not in argv or "--" not in argv[argv.index("compare") + 1:]:
        return argv
    at = argv.index("--", argv.index("compare") + 1)
    return [*argv[:at], SIDES_OPTION, *argv[at + 1:]]


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="compare new runs with baseline runs: regressions per percentile and class",
        usage="tailscope compare [options] RUN BASELINE | NEWDIR BASEDIR | NEW1 NEW2 … -- BASE1 BASE2 …",
        description="Compare new runs with baseline runs. Each side is a run directory, a folder of run "
                    "directories (made by `tailscope run --repeat N`) or, with `--` between the sides, several "
                    "run directories. For every percentile, metric and request class: the change with a "
                    "confidence interval resampled over runs and then 5-s time blocks within each run (with one "
                    "run per side the run-to-run noise is unknown and the verdict says so), flagged as a "
                    "regression only when above --threshold and significant; the stage that changed. Writes "
                    "comparison.json/.html/.md and junit-compare.xml. Exit 0 when nothing regressed, "
                    "1 on a regression, 3 when it is inconclusive (a regression measured while the new "
                    "runs' host was busier with other processes), 2 when a run cannot be read.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="the new run directory (or folder of runs), then the baseline; or the new runs, then "
                        "`--` and the baseline runs")
    p.add_argument(SIDES_OPTION, dest="baseline_runs", nargs="+", metavar="BASELINE", help=argparse.SUPPRESS)
    add_compare_options(p)
    p.add_argument("--out", metavar="DIR",
                   help="where to write the comparison files (default: the new run or folder; with several new "
                        "runs, the first)")
    p.set_defaults(handler=handle)


def sides_from(args) -> tuple[list[str], list[str]] | str:
    """(new runs, baseline runs) from the positional arguments, or why they are not usable."""
    if args.baseline_runs:
        return list(args.runs), list(args.baseline_runs)
    if len(args.runs) != 2:
        return (f"expected RUN BASELINE (two paths), or NEW… -- BASELINE…; got {len(args.runs)} paths "
                f"without `--` between the sides")
    return [args.runs[0]], [args.runs[1]]


def compare_and_print(new, baseline, console, *, threshold: float, confidence: float, out_dir: str | None = None) -> int:
    """Compare ``new`` with ``baseline`` (each a path or a list of paths: conductor/reporting.py),
    write the files, print the comparison; the exit code (0, 1 on a regression, 3 when it may be
    the host's, 2 when a run cannot be read or the files cannot be written)."""
    from tailscope.conductor.reporting import compare_and_write
    from tailscope.conductor.terminal import print_comparison
    from tailscope.rundir import RunDirError

    try:
        compared = compare_and_write(new, baseline, threshold=threshold, confidence=confidence, out_dir=out_dir)
    except RunDirError as exc:
        return error(str(exc))
    except OSError as exc:
        return error(f"cannot write the comparison files: {exc}")
    print_comparison(console, compared.comparison, compared.paths)
    return comparison_exit_code(compared.comparison.verdict)


def handle(args) -> int:
    from rich.console import Console

    sides = sides_from(args)
    if isinstance(sides, str):
        return error(sides)
    new, baseline = sides
    return compare_and_print(new[0] if len(new) == 1 else new, baseline[0] if len(baseline) == 1 else baseline,
                             Console(), threshold=args.threshold, confidence=args.confidence, out_dir=args.out)
