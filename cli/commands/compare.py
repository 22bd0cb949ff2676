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

    from tailscope.rundir import RunDirError

    try:
        code, _ = compare_and_report(args.run, args.baseline, Console(), threshold=args.threshold,
                                     confidence=args.confidence, out_dir=args.out)
    except RunDirError as exc:
        return error(str(exc))
    return code


def compare_and_report(run_dir: str, baseline: str, console, *, threshold: float = 0.10,
                       confidence: float = 0.95, out_dir: str | None = None) -> tuple[int, dict]:
    """Compare, write the comparison outputs, print the verdict; (exit code, comparison dict).

    Raises RunDirError when either run cannot be read.
    """
    from tailscope.analyzers.comparison.baseline import CompareRules, compare_runs
    from tailscope.reports.writer import write_comparison_outputs

    comparison = compare_runs(run_dir, baseline, CompareRules(threshold=threshold, confidence=confidence))
    paths = write_comparison_outputs(out_dir or run_dir, comparison)
    print_comparison(console, comparison, paths)
    return (EXIT_SLO_FAILED if comparison["verdict"]["regressed"] else EXIT_OK), comparison


def print_comparison(console, comparison: dict, paths: dict) -> None:
    """The latency percentiles of all requests, the verdict, the changed stage, the files."""
    from rich.table import Table

    console.rule(f"compare: {comparison['current']['name']} vs baseline {comparison['baseline']['name']}")
    table = Table(show_header=True)
    for column in ("latency", "baseline", "current", "change", f"{comparison['confidence']:.0%} CI", ""):
        table.add_column(column, justify="right")
    for row in comparison["percentiles"]:
        if row["cls"] is not None or row["metric"] != "latency_ms":
            continue
        relative = row["relative_change"]
        mark = "[red]REGRESSED[/]" if row["regressed"] else ("[green]improved[/]" if row["improved"] else
                                                            ("significant" if row["significant"] else ""))
        if not row["claimable"]:
            mark = (mark + " " if mark else "") + "(too few samples)"
        table.add_row(row["percentile"].upper().replace("P999", "P99.9"), f"{row['baseline_ms']:.1f} ms",
                      f"{row['current_ms']:.1f} ms",
                      f"{row['change_ms']:+.1f} ms" + ("" if relative is None else f" ({relative:+.1%})"),
                      f"{row['change_ci_ms'][0]:+.1f} … {row['change_ci_ms'][1]:+.1f}", mark)
    console.print(table)
    regressed = comparison["verdict"]["regressed"]
    console.print(("[bold red]REGRESSION[/] " if regressed else "[bold green]NO REGRESSION[/] ")
                  + comparison["verdict"]["summary"], highlight=False, soft_wrap=True)
    for name, path in paths.items():
        console.print(f"{name}: {path}", highlight=False, soft_wrap=True)
