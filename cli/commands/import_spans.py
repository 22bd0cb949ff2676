"""``tailscope import-spans RUN_DIR FILE...``: add spans captured elsewhere to a run directory."""

from __future__ import annotations

from tailscope.cli.commands.common import EXIT_OK, analyse_and_report, error


def register(sub) -> None:
    p = sub.add_parser(
        "import-spans", help="add spans exported elsewhere (OTLP JSON lines, Jaeger JSON) to a run",
        description="Append the spans of FILE... to RUN_DIR (as spans.import.arrow) so that "
                    "`tailscope report RUN_DIR` decomposes the requests' stages. Formats: the "
                    "OpenTelemetry Collector file exporter's OTLP JSON lines, and Jaeger's JSON export "
                    "(.gz accepted). Spans the run already holds are skipped. A bad file is reported "
                    "with its line and nothing is written.")
    p.add_argument("run_dir")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", default="auto", choices=("auto", "otlp-json", "jaeger"),
                   help="file format (default: detected from each file's content)")
    p.add_argument("--report", action="store_true",
                   help="re-analyse the run and write its reports afterwards")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from tailscope.rundir import RunDirError
    from tailscope.tracing.ingest.importers import SpanImportError, import_spans

    console = Console()
    try:
        results, written = import_spans(args.run_dir, args.files, args.format)
    except (SpanImportError, RunDirError) as exc:
        return error(f"{exc} (nothing was imported)")
    for r in results:
        skipped = f", {r.skipped_lines} non-trace lines skipped" if r.skipped_lines else ""
        console.print(f"{escape(r.file)} ({r.format}): {r.spans:,} spans, {r.gc_events:,} GC pauses"
                      f", {r.duplicates:,} already present{skipped}")
    if not written:
        console.print("nothing new to import")
    for path in written:
        console.print(f"wrote {escape(path)}")
    if args.report:
        return analyse_and_report(args.run_dir, console)
    console.print(f"next: tailscope report {escape(args.run_dir)}")
    return EXIT_OK
