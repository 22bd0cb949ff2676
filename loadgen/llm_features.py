"""Class options of issue 29: asking for reasoning, offering tools, sending images (chat); the
documents of rerank and score classes.

No Locust or gevent import. :func:`feature_fields` reads a class mapping's
fields (scenario errors through the parser's ``fail(path, message)``, as
:mod:`.llm_fields`) into :class:`~.spec.LLMSpec` keyword arguments;
:func:`feature_body` gives the JSON fields they add to each request body
(``extra_body`` is merged after them and wins)::

    classes:
      - name: agent
        api: openai-chat
        model: qwen3-8b
        reasoning_effort: medium           # low | medium | high: sent as `reasoning_effort`
        tools:                             # OpenAI function tools, sent as given
          - {type: function, function: {name: get_weather, parameters: {type: object}}}
        tool_choice: auto                  # auto | required | none | the name of one of the tools
        images:                            # PNGs of random pixels per request (tailscope.loadgen.llm_images)
          count: 1                         # images per request: a count or a size distribution
          width: {dist: uniform, min: 256, max: 1024}   # pixels
          height: 512

A ``rerank`` class (``POST /v1/rerank``, Cohere/Jina style as vLLM serves it:
``{"model", "query", "documents": [...], "top_n"}``) or ``score`` class
(``POST /v1/score``: ``{"model", "text_1": query, "text_2": [documents]}``)
sends a query of ``prompt_tokens`` tokens and ``documents`` documents of
``document_tokens`` tokens each (:class:`RankingSpec`; synthetic words as
prompts, or the tokenizer's exact lengths)::

      - name: rerank
        api: rerank
        model: BAAI/bge-reranker-v2-m3
        prompt_tokens: 24                  # the query
        documents: {dist: uniform, min: 4, max: 32}
        document_tokens: {dist: lognormal, median: 200, sigma: 0.5, min: 20, max: 1000}
        top_n: 5                           # rerank only; sent as top_n

Reasoning and tool-call streams are parsed whatever the class asks for
(``tailscope.loadgen.openai_stream``): a server that reasons by itself (vLLM
with ``--reasoning-parser``) needs no option here; one that needs another
switch (``chat_template_kwargs: {enable_thinking: true}``) takes it through
``extra_body``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tailscope.loadgen.llm_images import MAX_IMAGES, MAX_SIDE, ImageSpec

#: Values of ``reasoning_effort`` (OpenAI's; vLLM and SGLang pass them to the chat template).
REASONING_EFFORTS = ("low", "medium", "high")
#: ``tool_choice`` words; any other string names one of the class's tools.
TOOL_CHOICES = ("auto", "required", "none")
#: Class fields this module reads (chat classes only).
FEATURE_FIELDS = frozenset({"reasoning_effort", "tools", "tool_choice", "images"})
#: Class fields of rerank and score classes.
RANKING_FIELDS = frozenset({"documents", "document_tokens", "top_n"})
#: The ranking APIs (no generation; one query against several documents).
RANKING_APIS = ("rerank", "score")
#: Defaults: documents per request and tokens per document.
DEFAULT_DOCUMENTS = 8
DEFAULT_DOCUMENT_TOKENS = 128
#: Most documents in one request.
MAX_DOCUMENTS = 1024
#: Fields of ``images`` (each a size distribution: a count, or pixels).
IMAGE_FIELDS = ("count", "width", "height")

Fail = Callable[[tuple, str], BaseException]


def feature_fields(data: dict, api: str, fail: Fail, at: tuple, size: Callable[[Any, tuple], Any]) -> dict[str, Any]:
    """``LLMSpec`` keyword arguments (``reasoning_effort``, ``tools``, ``tool_choice``, ``images``) of
    one class mapping; raises what ``fail`` makes for a bad value (a field of a non-chat class
    included). ``size(value, path)`` reads a size distribution (``llm_fields.token_size``)."""
    out: dict[str, Any] = {}
    for key in sorted(FEATURE_FIELDS & set(data)):
        if api != "openai-chat":
            _raise(fail, at + (key,), "only for api: openai-chat classes")
    effort = data.get("reasoning_effort")
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            _raise(fail, at + ("reasoning_effort",), f"expected one of {', '.join(REASONING_EFFORTS)}, got {effort!r}")
        out["reasoning_effort"] = effort
    tools = data.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            _raise(fail, at + ("tools",), "expected a non-empty list of tools such as "
                                          "{type: function, function: {name: get_weather}}")
        for index, tool in enumerate(tools):
            names.append(_tool_name(tool, fail, at + ("tools", index)))
        if len(set(names)) != len(names):
            _raise(fail, at + ("tools",), f"tool names must differ, got {names}")
        out["tools"] = tuple(json.loads(json.dumps(tool)) for tool in tools)
    choice = data.get("tool_choice")
    if choice is not None:
        if tools is None:
            _raise(fail, at + ("tool_choice",), "only with `tools`")
        if not isinstance(choice, str) or (choice not in TOOL_CHOICES and choice not in names):
            _raise(fail, at + ("tool_choice",), f"expected {', '.join(TOOL_CHOICES)} or one of the tools' names "
                                                f"({', '.join(names)}), got {choice!r}")
        out["tool_choice"] = choice
    if data.get("images") is not None:
        out["images"] = _images(data["images"], fail, at + ("images",), size)
    for key in sorted(RANKING_FIELDS & set(data)):
        if api not in RANKING_APIS or (key == "top_n" and api != "rerank"):
            _raise(fail, at + (key,), "only for api: rerank" if key == "top_n" else
                   f"only for api: {' or '.join(RANKING_APIS)} classes")
    if api in RANKING_APIS:
        out["ranking"] = _ranking(data, fail, at, size)
    return out


@dataclass(frozen=True)
class RankingSpec:
    """A rerank or score class's documents: how many per request (``documents``) and each one's length
    in tokens (``document_tokens``), size distributions; ``top_n`` (rerank) sent when set."""

    documents: Any
    document_tokens: Any
    top_n: int | None = None

    def describe(self) -> dict:
        """The settings as plain JSON values (for the manifest)."""
        from tailscope.loadgen.spec import _describe_size
        out = {"documents": _describe_size(self.documents), "document_tokens": _describe_size(self.document_tokens)}
        if self.top_n is not None:
            out["top_n"] = self.top_n
        return out


def _ranking(data: dict, fail: Fail, at: tuple, size) -> RankingSpec:
    documents = size(data.get("documents", DEFAULT_DOCUMENTS), at + ("documents",))
    low, high = _bounds(documents)
    if low < 1 or high > MAX_DOCUMENTS:
        _raise(fail, at + ("documents",), f"must stay within 1..{MAX_DOCUMENTS} documents, got {low}..{high}")
    lengths = size(data.get("document_tokens", DEFAULT_DOCUMENT_TOKENS), at + ("document_tokens",))
    if _bounds(lengths)[0] < 1:
        _raise(fail, at + ("document_tokens",), "a document has at least 1 token")
    top_n = data.get("top_n")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
        _raise(fail, at + ("top_n",), f"expected an integer >= 1, got {top_n!r}")
    return RankingSpec(documents, lengths, top_n)


def _images(value: Any, fail: Fail, at: tuple, size) -> ImageSpec:
    if not isinstance(value, dict):
        _raise(fail, at, f"expected a mapping such as {{count: 1, width: 512, height: 512}}, got {value!r}")
    for key in value:
        if key not in IMAGE_FIELDS:
            _raise(fail, at + (key,), f"unknown field {key!r}; expected one of {', '.join(IMAGE_FIELDS)}")
    for key in ("width", "height"):
        if key not in value:
            _raise(fail, at + (key,), "missing: pixels, a number or a size distribution such as "
                                      "{dist: uniform, min: 256, max: 1024}")
    sizes = {key: size(value.get(key, 1), at + (key,)) for key in IMAGE_FIELDS}
    for key, top in (("count", MAX_IMAGES), ("width", MAX_SIDE), ("height", MAX_SIDE)):
        low, high = _bounds(sizes[key])
        if low < (0 if key == "count" else 1) or high > top:
            _raise(fail, at + (key,), f"must stay within {0 if key == 'count' else 1}..{top}"
                                      f"{' images' if key == 'count' else ' pixels'}, got {low}..{high}")
    return ImageSpec(**sizes)


def _bounds(spec) -> tuple[int, int]:
    """The smallest and largest value a size distribution gives."""
    if spec.dist == "fixed":
        return spec.value, spec.value
    if spec.dist == "empirical":
        return int(spec.values.min()), int(spec.values.max())
    return spec.min, spec.max


def _tool_name(tool: Any, fail: Fail, at: tuple) -> str:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        _raise(fail, at + ("type",), "expected a function tool: {type: function, function: {name: ...}}")
    function = tool.get("function")
    if not isinstance(function, dict):
        _raise(fail, at + ("function",), "expected a mapping with a name (and optional description, parameters)")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        _raise(fail, at + ("function", "name"), f"expected the function's name (a string), got {name!r}")
    if "parameters" in function and not isinstance(function["parameters"], dict):
        _raise(fail, at + ("function", "parameters"), "expected a JSON Schema mapping")
    try:
        json.dumps(tool)
    except (TypeError, ValueError) as exc:
        _raise(fail, at, f"not JSON: {exc}")
    return name


def ranking_body(api: str, spec: RankingSpec, query: str, documents: list[str]) -> dict[str, Any]:
    """The request fields of a rerank (``query``, ``documents``, ``top_n``) or score (``text_1``,
    ``text_2``) request."""
    if api == "rerank":
        body: dict[str, Any] = {"query": query, "documents": documents}
        if spec.top_n is not None:
            body["top_n"] = spec.top_n
        return body
    return {"text_1": query, "text_2": documents}


def feature_body(reasoning_effort: str | None, tools: tuple, tool_choice: str | None) -> dict[str, Any]:
    """The JSON fields a chat request carries for these options (``{}`` without any)."""
    body: dict[str, Any] = {}
    if reasoning_effort is not None:
        body["reasoning_effort"] = reasoning_effort
    if tools:
        body["tools"] = list(tools)
        if tool_choice is not None:
            body["tool_choice"] = (tool_choice if tool_choice in TOOL_CHOICES
                                   else {"type": "function", "function": {"name": tool_choice}})
    return body


def _raise(fail: Fail, path: tuple, message: str):
    exc = fail(path, message)
    if isinstance(exc, BaseException):
        raise exc
    raise ValueError(f"{'.'.join(str(p) for p in path)}: {message}")
