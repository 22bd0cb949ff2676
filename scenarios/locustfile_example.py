"""A plain locustfile that runs tailscope's open-loop load under the ``locust`` command.

    locust -f scenarios/locustfile_example.py --host http://127.0.0.1:8000 \
        --headless -t 30s --tailscope-out runs              # one process
    locust -f scenarios/locustfile_example.py --host http://127.0.0.1:8000 \
        --processes 2 --headless -t 30s                      # master + 2 workers, one run directory
    locust -f scenarios/locustfile_example.py --host http://127.0.0.1:8000   # web UI on :8089

Each test leaves a run directory (manifest.json, requests.arrow) with
report.html; the offered load is the scenario's arrival process (see
docs/locust.md). Start the reference target with ``tailscope target --port 8000``.
"""

from tailscope.conductor.locust_plugin import OpenLoopUser


class ReferenceInference(OpenLoopUser):
    """Poisson arrivals of short and long text requests (locust_example.yaml)."""

    scenario = "locust_example.yaml"  # next to this file; --tailscope-scenario overrides it
