"""``tailscope target``: the reference inference service, alone."""

from __future__ import annotations

from tailscope.cli.commands.common import EXIT_OK


def register(sub) -> None:
    from tailscope.targets.reference.command import add_arguments

    p = sub.add_parser(
        "target", help="start the reference inference service alone",
        description="The reference inference service: HTTP in, preprocessing, a dynamic batcher, "
                    "a numpy model, postprocessing; every stage traced with OpenTelemetry "
                    "(spans go to OTEL_EXPORTER_OTLP_ENDPOINT).")
    add_arguments(p)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from tailscope.targets.reference.command import run_from_args

    run_from_args(args)
    return EXIT_OK
