"""The load generator: Locust users with open-loop arrivals, coordinated-omission-free
per-request records and W3C trace context (see docs/loadgen.md).

Importing this package imports nothing from Locust; ``tailscope.loadgen.local_runner``,
``.users`` and ``.exchange`` do (and monkey-patch the process with gevent).
"""
