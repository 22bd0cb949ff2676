"""Tests against real third-party servers (vLLM's CPU build, Triton from PyTriton, a plain
FastAPI + OpenTelemetry service), each installed from the package index into a cached virtual
environment of its own (``real_servers/venvs.py``; tests import it as ``real_servers.venvs``), never into the project's."""
