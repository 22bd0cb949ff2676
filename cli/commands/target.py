"""``tailscope target``: the reference inference service alone; ``tailscope target --llm``: the LLM reference server.

Both servers' knobs are flags of this one command, in two groups. The flags both
have (``--host``, ``--port``, ``--seed``, ``--model-dim``, ...) set the server that
runs, each with its own default; a flag of the other server is a usage error.
"""

from __future__ import annotations

from tailscope.cli.commands.common import EXIT_OK, error
from tailscope.targets.llm import command as llm_command
from tailscope.targets.llm.command import add_arguments as add_llm_arguments
from tailscope.targets.llm.config import knob_fields as llm_knobs
from tailscope.targets.llm.server import run_llm_server
from tailscope.targets.reference.command import add_arguments, run_from_args
from tailscope.targets.reference.config import ConfigError
from tailscope.targets.reference.config import knob_fields as reference_knobs


def register(sub) -> None:
    p = sub.add_parser(
        "target", help="start the reference inference service (or, with --llm, the LLM server) alone",
        conflict_handler="resolve",
        description="The reference inference service: HTTP in, preprocessing, a dynamic batcher, "
                    "a numpy model, postprocessing; every stage traced with OpenTelemetry "
                    "(spans go to OTEL_EXPORTER_OTLP_ENDPOINT). With --llm: the LLM reference server, "
                    "an OpenAI-compatible API over a continuous-batching engine on the CPU, with vLLM's "
                    "llm_request spans and /metrics names (docs/llm-server.md).")
    p.add_argument("--llm", action="store_true",
                   help="run the LLM reference server instead (its knobs are in the second group)")
    add_llm_arguments(p.add_argument_group(
        "LLM server knobs (with --llm; defaults are the LLM server's, e.g. --model-dim 64)"))
    add_arguments(p.add_argument_group("reference target knobs (also --host, --port, --seed, ... with --llm)"))
    p.set_defaults(handler=handle)


def handle(args) -> int:
    llm_names = {knob.name for knob in llm_knobs()}
    reference_names = {knob.name for knob in reference_knobs()} | {"config"}
    foreign = reference_names - llm_names if args.llm else llm_names - reference_names
    given = sorted("--" + name.replace("_", "-") for name in foreign if getattr(args, name, None) is not None)
    if given:
        other = "the reference target (without --llm)" if args.llm else "the LLM server (--llm)"
        return error(f"{', '.join(given)}: a knob of {other}")
    if not args.llm:
        run_from_args(args)
        return EXIT_OK
    try:
        config = llm_command.config_from_args(args)
    except ConfigError as exc:
        return error(str(exc))
    run_llm_server(config)
    return EXIT_OK
