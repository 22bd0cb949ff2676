"""``python -m tailscope.targets.reference``: run the reference inference service (see ``--help``)."""

from __future__ import annotations

from tailscope.targets.reference.command import build_parser, run_from_args
from tailscope.targets.reference.config import ConfigError


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        run_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
