"""Which server a run measured: its kind, version and model, asked once before the load.

For the manifest's ``server`` entry (docs/run-format.md): the kind is the stage preset the
scenario names (``reference``, ``vllm``, ``tgi``, ``sglang``, ``triton``, ``none``). A server of
a kind below, or one the scenario speaks the OpenAI API to (its OpenAI-API classes), is asked
for its version and models on the endpoints its kind serves; any other (the reference target,
a plain service) is not asked at all (``probed`` false), so no request but the load reaches it:

| kind | version | models |
| --- | --- | --- |
| vllm, other OpenAI-API servers | ``GET /version`` → ``version`` | ``GET /v1/models`` → ``data[].id``, ``max_model_len`` |
| sglang | ``GET /get_server_info`` → ``version`` | ``GET /v1/models`` |
| tgi | ``GET /info`` → ``version`` | ``/info`` → ``model_id``, ``max_total_tokens`` |
| triton | ``GET /v2`` → ``version`` | — |

Each GET has :data:`PROBE_TIMEOUT_S`; a server that does not answer one is recorded as such
(``endpoints``: path → HTTP status or the error), and the facts it would have given are None:
stated as absent, never guessed. No request carries a ``traceparent`` (they are not load).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

#: Seconds one probe GET may take.
PROBE_TIMEOUT_S = 2.0
#: Largest probe response read (bytes).
MAX_BODY_BYTES = 1 << 20
#: Per server kind: the version endpoint and the models endpoint (None: that kind has none).
ENDPOINTS = {
    "vllm": ("/version", "/v1/models"),
    "sglang": ("/get_server_info", "/v1/models"),
    "tgi": ("/info", "/info"),
    "triton": ("/v2", None),
}
#: An OpenAI-API server of another kind (or the scenario's classes only say OpenAI API).
OPENAI_ENDPOINTS = ("/version", "/v1/models")


def _get_json(base_url: str, path: str, timeout_s: float) -> tuple[object | None, str]:
    """(parsed JSON or None, the HTTP status or the error in words) of ``GET base_url + path``."""
    url = base_url.rstrip("/") + path
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                    timeout=timeout_s) as response:
            body = response.read(MAX_BODY_BYTES)
            status = str(response.status)
    except urllib.error.HTTPError as exc:
        return None, str(exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return None, f"error: {reason}"
    try:
        return json.loads(body), status
    except ValueError:
        return None, f"{status} (not JSON)"


def _models(document, kind: str) -> list[dict]:
    """``[{"id", "max_model_len"}]`` from a models answer (OpenAI ``/v1/models`` or TGI ``/info``)."""
    if not isinstance(document, dict):
        return []
    if kind == "tgi":
        model = document.get("model_id")
        length = document.get("max_total_tokens")
        return [{"id": str(model), "max_model_len": length if isinstance(length, int) else None}] if model else []
    models = []
    for entry in document.get("data") or []:
        if isinstance(entry, dict) and entry.get("id"):
            length = entry.get("max_model_len")
            models.append({"id": str(entry["id"]), "max_model_len": length if isinstance(length, int) else None,
                           **({"owned_by": str(entry["owned_by"])} if entry.get("owned_by") else {})})
    return models


def server_facts(base_url: str, preset: str | None, speaks_openai: bool,
                 timeout_s: float = PROBE_TIMEOUT_S) -> dict:
    """The manifest's ``server`` entry for the target at ``base_url``.

    ``preset``: the scenario's stage preset (the server's kind); ``speaks_openai``: the scenario
    has OpenAI-API classes. Returns ``{"kind", "probed", "version", "model", "max_model_len",
    "models", "endpoints"}``: ``probed`` False (and the rest None/empty) for a kind that is not
    asked; ``model``/``max_model_len`` are the first model's; ``endpoints`` maps each path asked
    to its HTTP status or error."""
    kind = preset or None
    facts: dict = {"kind": kind, "probed": False, "version": None, "model": None, "max_model_len": None,
                   "models": [], "endpoints": {}}
    if kind in ENDPOINTS:
        version_path, models_path = ENDPOINTS[kind]
    elif speaks_openai:
        version_path, models_path = OPENAI_ENDPOINTS
    else:
        return facts
    facts["probed"] = True
    answers: dict[str, object | None] = {}
    for path in dict.fromkeys(p for p in (version_path, models_path) if p):
        answers[path], facts["endpoints"][path] = _get_json(base_url, path, timeout_s)
    version_doc = answers.get(version_path)
    if isinstance(version_doc, dict) and version_doc.get("version") is not None:
        facts["version"] = str(version_doc["version"])
    if models_path:
        facts["models"] = _models(answers.get(models_path), kind if kind == "tgi" else "openai")
    if facts["models"]:
        facts["model"] = facts["models"][0]["id"]
        facts["max_model_len"] = facts["models"][0]["max_model_len"]
    return facts
