"""One module per ``tailscope`` subcommand.

Each module defines ``register(subparsers)``, which adds its parser and sets
``handler`` to a function ``(args) -> exit code``. Handlers import heavy or
gevent-patching modules (Locust) lazily, inside the handler.
"""

#: Subcommands in the order ``tailscope --help`` lists them.
COMMAND_MODULES = (
    "run", "report", "demo", "compare", "sweep", "lab", "target", "agent", "import_spans",
)
