"""The ``tailscope`` command: a thin layer over the library.

Each subcommand lives in ``tailscope.cli.commands.<name>``; this module only
assembles them. Exit codes are decided by the command handlers alone
(``tailscope.cli.commands.common``): 0 passed, 1 an SLO or regression gate
failed, 2 usage or setup error, 3 inconclusive or incomplete; an exception
escaping a handler is a bug in tailscope: :func:`main` prints it with its
traceback and returns 4.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from tailscope.cli.commands import COMMAND_MODULES
from tailscope.cli.commands.common import EXIT_CODES_HELP, EXIT_INTERNAL, EXIT_USAGE
from tailscope.cli.commands.compare import mark_sides_separator
from tailscope.support.version import tailscope_version

#: The first line printed when a handler raises (then the traceback).
INTERNAL_ERROR = "tailscope: internal error (this is a bug in tailscope, please report it):"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tailscope",
        description="Load-test a model-inference service and explain its tail latency.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"tailscope {tailscope_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"tailscope.cli.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tailscope.cli.commands.{name}":
                raise
            continue  # a command not (yet) shipped in this build
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(mark_sides_separator(sys.argv[1:] if argv is None else list(argv)))
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001  (any escape from a handler is a tailscope bug: exit 4)
        print(INTERNAL_ERROR, file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
