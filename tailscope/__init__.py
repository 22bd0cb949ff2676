"""tailscope: load-test model-inference services and explain their tail latency.

The conductor package: the CLI and run orchestration. Everything else lives in
the data-flow packages (``tailscope.loadgen``, ``tailscope.tracing``,
``tailscope.analyzers``, ``tailscope.reports``) around one run directory
(``tailscope.rundir``).
"""

__version__ = "0.1.0"
