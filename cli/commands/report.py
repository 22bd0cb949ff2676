"""``tailscope report RUN_DIR``: (re)analyse a run directory and write its reports."""

from __future__ import annotations

from tailscope.cli.commands.common import EXIT_CODES_HELP, analyse_and_report, error


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="(re)analyse a run directory and write its reports",
        description="Analyse RUN_DIR (also one left by a killed harness) and write analysis.json, "
                    "report.html, junit.xml and summary.md into it. The exit code is the verdict's, as "
                    "for tailscope run: PASSED 0, FAILED 1, INCONCLUSIVE or INCOMPLETE (e.g. a killed "
                    "run) 3.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("run_dir")
    p.add_argument("--window", type=float, default=1.0, metavar="S",
                   help="analysis window length in seconds (default 1)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from rich.console import Console

    from tailscope.rundir import RunDirError

    try:
        return analyse_and_report(args.run_dir, Console(), window_s=args.window)
    except RunDirError as exc:
        return error(str(exc))
