"""Tests against real third-party servers (vLLM's CPU build, Triton from PyTriton, a plain
FastAPI + OpenTelemetry service), each installed from the package index into a cached virtual
environment of its own (:mod:`tests.real_servers.venvs`), never into the project's."""
