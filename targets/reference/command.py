"""Command line of the reference target: ``python -m tailscope.targets.reference`` and ``tailscope target``.

Every knob of :class:`~tailscope.targets.reference.config.TargetConfig` is a flag
(``max_batch_size`` → ``--max-batch-size``); ``--config FILE`` reads the same
knobs from YAML; flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
from typing import Any

from tailscope.targets.reference.config import TargetConfig, build_config, knob_fields, load_config_file
from tailscope.targets.reference.server import run_target

_BOOLEAN_KNOBS = frozenset({"tracing", "access_log", "admin", "metrics", "gc_freeze"})
_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def default_text(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value)) if value else "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value) if value != "" else "none"


def metavar_of(name: str, default: Any) -> str:
    if name.endswith("_ms"):
        return "MS"
    if name.endswith("_mb"):
        return "MB"
    if name.endswith("_kb"):
        return "KB"
    if name.endswith("_mb_per_s"):
        return "MB/S"
    if name.endswith("_dir"):
        return "DIR"
    if name.endswith("_s"):
        return "SECONDS"
    return "N" if isinstance(default, (int, float)) else "TEXT"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per knob to ``parser`` (defaults resolved later, see run_from_args)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="YAML file with any of the knobs below (e.g. 'max_batch_size: 16'); command-line flags win",
    )
    for knob in knob_fields():
        help_text = f"{knob.metadata['help']} (default: {default_text(knob.default)})"
        options: dict[str, Any] = {"dest": knob.name, "default": None, "help": help_text}
        if knob.name in _BOOLEAN_KNOBS:
            options["action"] = argparse.BooleanOptionalAction
        elif knob.name == "preferred_batch_sizes":
            options.update(nargs="+", type=int, metavar="N")
        elif knob.name == "log_level":
            options["choices"] = _LOG_LEVELS
        else:
            options.update(type=type(knob.default), metavar=metavar_of(knob.name, knob.default))
        parser.add_argument(flag_name(knob.name), **options)


def config_from_args(args: argparse.Namespace) -> TargetConfig:
    """The validated config: defaults < ``--config`` file < flags given. Raises ConfigError."""
    file_values = load_config_file(args.config) if args.config else {}
    explicit = {knob.name: getattr(args, knob.name) for knob in knob_fields() if getattr(args, knob.name) is not None}
    if "preferred_batch_sizes" in explicit:
        explicit["preferred_batch_sizes"] = tuple(explicit["preferred_batch_sizes"])
    return build_config(file_values, explicit)


def run_from_args(args: argparse.Namespace) -> None:
    """Run the target with the parsed arguments; blocks until SIGINT/SIGTERM, then returns after a clean shutdown."""
    run_target(config_from_args(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tailscope.targets.reference",
        description="tailscope reference inference service: text and image classification behind a dynamic "
        "batcher, every stage traced with OpenTelemetry (OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT).",
    )
    add_arguments(parser)
    return parser
