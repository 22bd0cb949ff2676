"""The LLM reference server: an OpenAI-compatible API over a continuous-batching engine on the CPU.

``python -m tailscope.targets.llm --port P [knobs]`` serves ``POST
/v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings``,
``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (see
docs/llm-server.md). Requests are scheduled by a real engine thread
(:mod:`.engine`): waiting and running queues, a paged KV cache with a block
budget and preemption by recompute (:mod:`.scheduler`, :mod:`.kv_cache`), and a
small numpy decoder whose step cost grows with the running sequences and their
context (:mod:`.model`). It is observable the way vLLM is: one ``llm_request``
SERVER span per request (:mod:`.spans`) and Prometheus metrics under vLLM's
names (:mod:`.metrics`).

Modules: :mod:`.config` (knobs), :mod:`.command` (command line, entry
:func:`~tailscope.targets.llm.command.main`), :mod:`.server` (uvicorn),
:mod:`.app` (ASGI routes), :mod:`.openai_api` (request parsing, response
bodies), :mod:`.tokens` (one token per word), :mod:`.sequence` (a request's
state and timings).
"""
