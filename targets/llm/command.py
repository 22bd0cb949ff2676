"""Command line of the LLM reference server: ``python -m tailscope.targets.llm`` (and ``tailscope target --llm``).

Every knob of :class:`~tailscope.targets.llm.config.LlmServerConfig` is a flag
(``max_num_seqs`` → ``--max-num-seqs``; booleans also have a ``--no-`` form,
e.g. ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill``). Entry
points for other front ends: :func:`add_arguments` + :func:`config_from_args`
+ :func:`~tailscope.targets.llm.server.run_llm_server`, or :func:`main`.
"""

from __future__ import annotations

import argparse
from typing import Any

from tailscope.targets.llm.config import LOG_LEVELS, ConfigError, LlmServerConfig, knob_fields
from tailscope.targets.llm.server import run_llm_server
from tailscope.targets.reference.command import default_text, flag_name, metavar_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per knob to ``parser`` (unset flags stay None: the dataclass default applies)."""
    for knob in knob_fields():
        options: dict[str, Any] = {
            "dest": knob.name,
            "default": None,
            "help": f"{knob.metadata['help']} (default: {default_text(knob.default)})",
        }
        if isinstance(knob.default, bool):
            options["action"] = argparse.BooleanOptionalAction
        elif knob.name == "log_level":
            options["choices"] = LOG_LEVELS
        else:
            options.update(type=type(knob.default), metavar=metavar_of(knob.name, knob.default))
        parser.add_argument(flag_name(knob.name), **options)


def config_from_args(args: argparse.Namespace) -> LlmServerConfig:
    """The validated config from parsed flags (defaults for those not given). Raises ConfigError."""
    given = {knob.name: getattr(args, knob.name) for knob in knob_fields() if getattr(args, knob.name) is not None}
    return LlmServerConfig(**given)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tailscope.targets.llm",
        description="tailscope LLM reference server: an OpenAI-compatible API (chat, completions, embeddings) "
        "over a continuous-batching engine on the CPU, with vLLM's llm_request spans and /metrics names.",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` and serve until SIGINT/SIGTERM; a bad knob exits with status 2 and a message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    run_llm_server(config)


__all__ = ["add_arguments", "build_parser", "config_from_args", "main"]
