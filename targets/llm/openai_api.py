"""OpenAI-compatible request parsing and response bodies (chat, completions, embeddings, models, errors).

Parsing turns a JSON body into a :class:`GenerationRequest` or
:class:`EmbeddingRequest`, or raises :class:`OpenAIError` (rendered by
:func:`error_body` as ``{"error": {"message", "type", "param", "code"}}``).
What is honoured: ``model`` (must be the served name when given; else 404),
``max_tokens`` (``max_completion_tokens`` for chat), ``ignore_eos``,
``stream``, ``stream_options.include_usage``; ``temperature``, ``top_p`` and
``n`` are validated and recorded on the span but do not change sampling (``n``
must be 1). Chat only: ``reasoning_effort`` (``low``, ``medium``, ``high``: a
quarter, half or three quarters of ``max_tokens``, else the server's
``reasoning_share``) makes the first output tokens reasoning, streamed as
``reasoning_content`` (usage: ``completion_tokens_details.reasoning_tokens``);
``tools`` (a list of ``{"type": "function", "function": {"name", ...}}``) with
``tool_choice`` ``auto`` (the default with tools), ``required`` or a named
function makes the answer one call of that function (``auto``/``required``:
the first tool) whose arguments are ``{"text": <the generated words>}``,
streamed piece by piece as vLLM does (``tool_calls[0].function.arguments``;
finish reason ``tool_calls``); ``tool_choice: none`` answers in text.
Prompts: ``prompt`` is a string (or a one-element list of one);
chat ``messages`` contribute every content text (a string, or ``text`` parts)
joined in order, and each ``image_url`` part (a base64 data URL of a PNG; no URL
is fetched) ceil(width / 28) × ceil(height / 28) tokens, as Qwen2-VL counts. Token counts are words (:mod:`.tokens`).

Response builders return plain dicts in the shapes of the OpenAI API: chat
chunks (``chat.completion.chunk``), completion chunks (``text_completion``), the
final usage chunk (``choices: []``), non-streamed responses with ``usage``,
embedding lists (``float`` or ``base64`` little-endian float32) and the model list.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailscope.support.png import png_size
from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.llm.tokens import VOCAB_SIZE, tokenize

CHAT = "chat"
COMPLETION = "completion"

#: Pixels per side of the square patch one image token stands for (Qwen2-VL's 14-px patches merged 2×2).
IMAGE_PATCH = 28
#: The token id an image's tokens take (any id but EOS: the decoder only needs their count).
IMAGE_TOKEN = 1
#: Share of max_tokens streamed as reasoning per ``reasoning_effort``.
REASONING_EFFORTS = {"low": 0.25, "medium": 0.5, "high": 0.75}

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
                413: "RequestTooLargeError", 429: "RateLimitError", 499: "ClientClosedRequest",
                503: "ServiceUnavailableError"}


class OpenAIError(Exception):
    """An error answered as OpenAI error JSON with HTTP ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def error_body(error: OpenAIError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` (``code`` is the HTTP status, as vLLM sends it)."""
    return {"error": {"message": error.message, "type": _ERROR_TYPES.get(error.status, "InternalServerError"),
                      "param": error.param, "code": error.status}}


@dataclass
class GenerationRequest:
    """A parsed chat or completions request."""

    kind: str
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    #: Request parameters as given (None when absent), recorded on the span.
    params: dict[str, Any] = field(default_factory=dict)
    #: Output tokens streamed as reasoning before the answer (chat).
    reasoning_tokens: int = 0
    #: The function the answer calls (chat with ``tools``), else None: the answer is text.
    tool_name: str | None = None


@dataclass
class RankingRequest:
    """A parsed rerank or score request: the query's tokens against each document's."""

    query: list[int]
    documents: list[list[int]]
    texts: list[str]
    top_n: int | None


@dataclass
class EmbeddingRequest:
    """A parsed embeddings request: one token list per input."""

    inputs: list[list[int]]
    encoding_format: str


def _bad(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param)


def _optional(document: Mapping[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    value = document.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise _bad(f"{name} must be {what}, got {value!r}", name)
    return value


def check_model(document: Mapping[str, Any], config: LlmServerConfig) -> None:
    """404 when ``model`` names another model than the served one (an absent ``model`` is accepted)."""
    model = document.get("model")
    if model is not None and model != config.served_model_name:
        raise OpenAIError(404, f"The model `{model}` does not exist.", "model")


def _chat_prompt(document: Mapping[str, Any]) -> list[int]:
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list", "messages")
    ids: list[int] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{index}] must be an object with a string role", "messages")
        content = message.get("content")
        if isinstance(content, str):
            ids.extend(tokenize(content))
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    ids.extend(_image_tokens(part, index))
                elif isinstance(part, dict):
                    ids.extend(tokenize(str(part.get("text", ""))))
        elif content is not None:
            raise _bad(f"messages[{index}].content must be a string or a list of parts", "messages")
    return ids


def _image_tokens(part: Mapping[str, Any], index: int) -> list[int]:
    """The prompt tokens of one ``image_url`` part: ceil(width / 28) × ceil(height / 28) (module docstring)."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url[:64]:
        raise _bad(f"messages[{index}]: image_url.url must be a base64 data URL (this server fetches nothing)",
                   "messages")
    head = url[url.index(";base64,") + 8:][:64]
    try:
        size = png_size(base64.b64decode(head[: len(head) // 4 * 4]))
    except ValueError:
        size = None
    if size is None or not all(size):
        raise _bad(f"messages[{index}]: the image is not a PNG (this server reads PNG sizes only)", "messages")
    count = -(-size[0] // IMAGE_PATCH) * -(-size[1] // IMAGE_PATCH)
    return [IMAGE_TOKEN] * count


def _completion_prompt(document: Mapping[str, Any]) -> list[int]:
    prompt = document.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("prompt must be a string (or a list of one string)", "prompt")
    return tokenize(prompt)


def parse_generation(kind: str, document: Any, config: LlmServerConfig) -> GenerationRequest:
    """A chat (``kind`` :data:`CHAT`) or completions request; OpenAIError 400/404 when invalid."""
    if not isinstance(document, dict):
        raise _bad("the request body must be a JSON object")
    check_model(document, config)
    prompt_ids = _chat_prompt(document) if kind == CHAT else _completion_prompt(document)
    if not prompt_ids:
        raise _bad("the prompt has no tokens (no words)", "messages" if kind == CHAT else "prompt")
    limit = config.max_model_len
    requested = _optional(document, "max_tokens", (int,), "an integer")
    if kind == CHAT and document.get("max_completion_tokens") is not None:
        requested = _optional(document, "max_completion_tokens", (int,), "an integer")
    if requested is not None and requested < 1:
        raise _bad(f"max_tokens must be at least 1, got {requested}", "max_tokens")
    max_tokens = requested if requested is not None else min(config.default_max_tokens, limit - len(prompt_ids))
    if len(prompt_ids) + max_tokens > limit or max_tokens < 1:
        raise _bad(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{len(prompt_ids) + max(max_tokens, 1)} tokens ({len(prompt_ids)} in the prompt, {max(max_tokens, 1)} "
            "in the completion). Please reduce the length of the prompt or completion.", "max_tokens")
    stream = _optional(document, "stream", (bool,), "a boolean") or False
    options = _optional(document, "stream_options", (dict,), "an object")
    if options is not None and not stream:
        raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
    include_usage = bool(options and _optional(options, "include_usage", (bool,), "a boolean"))
    n = _optional(document, "n", (int,), "an integer")
    if n not in (None, 1):
        raise _bad(f"only n=1 is supported, got n={n}", "n")
    params = {
        "max_tokens": max_tokens,
        "temperature": _optional(document, "temperature", (int, float), "a number"),
        "top_p": _optional(document, "top_p", (int, float), "a number"),
        "n": n,
    }
    ignore_eos = _optional(document, "ignore_eos", (bool,), "a boolean") or False
    reasoning, tool = (_reasoning_tokens(document, config, max_tokens), _tool_name(document)) if kind == CHAT \
        else (0, None)
    return GenerationRequest(kind, prompt_ids, max_tokens, ignore_eos, stream, include_usage, params,
                             reasoning, tool)


def _reasoning_tokens(document: Mapping[str, Any], config: LlmServerConfig, max_tokens: int) -> int:
    effort = document.get("reasoning_effort")
    if effort is None:
        share = config.reasoning_share
    elif effort in REASONING_EFFORTS:
        share = REASONING_EFFORTS[effort]
    else:
        raise _bad(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, got {effort!r}",
                   "reasoning_effort")
    return int(share * max_tokens)


def _tool_name(document: Mapping[str, Any]) -> str | None:
    """The function a chat request's answer calls (module docstring), or None."""
    tools = document.get("tools")
    choice = document.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise _bad("tool_choice needs tools", "tool_choice")
        return None
    names = []
    if not isinstance(tools, list) or not tools:
        raise _bad("tools must be a non-empty list", "tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(tool, dict) and tool.get("type") == "function" and isinstance(function, dict)
                and isinstance(function.get("name"), str) and function["name"]):
            raise _bad(f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                       "tools")
        names.append(function["name"])
    if choice in (None, "auto", "required"):
        return names[0]
    if choice == "none":
        return None
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or name not in names:
        raise _bad(f"tool_choice must be none, auto, required or a function of tools, got {choice!r}",
                   "tool_choice")
    return name


def parse_embedding(document: Any, config: LlmServerConfig) -> EmbeddingRequest:
    """An embeddings request (``input``: a string, a list of strings, token ids or lists of token ids)."""
    if not isinstance(document, dict):
        raise _bad("the request body must be a JSON object")
    check_model(document, config)
    raw = document.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(_is_token(t) for t in raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise _bad("input must be a string, a list of strings or token ids", "input")
    inputs: list[list[int]] = []
    for item in raw:
        if isinstance(item, str):
            ids = tokenize(item)
        elif isinstance(item, list) and all(_is_token(t) for t in item):
            ids = list(item)
        else:
            raise _bad("each input must be a string or a list of token ids", "input")
        if not ids or len(ids) > config.max_model_len:
            raise _bad(f"each input must have 1..{config.max_model_len} tokens, got {len(ids)}", "input")
        inputs.append(ids)
    encoding = document.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _bad(f"encoding_format must be float or base64, got {encoding!r}", "encoding_format")
    return EmbeddingRequest(inputs, encoding)


def parse_ranking(kind: str, document: Any, config: LlmServerConfig) -> RankingRequest:
    """A rerank (``kind`` ``rerank``: ``query``, ``documents``, ``top_n``) or score (``text_1`` a
    string, ``text_2`` a string or a list of strings) request; each query + document pair must fit
    ``max_model_len``. OpenAIError 400/404 when invalid."""
    if not isinstance(document, dict):
        raise _bad("the request body must be a JSON object")
    check_model(document, config)
    query_key, documents_key = ("query", "documents") if kind == "rerank" else ("text_1", "text_2")
    query, texts = document.get(query_key), document.get(documents_key)
    if isinstance(texts, str) and kind == "score":
        texts = [texts]
    if not isinstance(query, str) or not tokenize(query):
        raise _bad(f"{query_key} must be a non-empty string", query_key)
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.split() for t in texts):
        raise _bad(f"{documents_key} must be a non-empty list of non-empty strings", documents_key)
    query_ids = tokenize(query)
    documents = [tokenize(t) for t in texts]
    longest = max(len(ids) for ids in documents)
    if len(query_ids) + longest > config.max_model_len:
        raise _bad(f"a query and document pair of {len(query_ids) + longest} tokens exceeds the maximum context "
                   f"length {config.max_model_len}", documents_key)
    top_n = _optional(document, "top_n", (int,), "an integer") if kind == "rerank" else None
    if top_n is not None and top_n < 1:
        raise _bad(f"top_n must be at least 1, got {top_n}", "top_n")
    return RankingRequest(query_ids, documents, texts, top_n)


def pair_score(vector: list[float]) -> float:
    """A pair's relevance in [0, 1] from its pooled unit vector: (1 + its first component) / 2."""
    return min(1.0, max(0.0, (1.0 + float(vector[0])) / 2.0))


def ranking_response(kind: str, response_id: str, created: int, model: str, request: RankingRequest,
                     scores: list[float], prompt_tokens: int) -> dict[str, Any]:
    """vLLM's score (``data`` of ``{index, object: score, score}`` in input order, usage with prompt and
    total tokens) or rerank (``results`` sorted by relevance, cut to ``top_n``, each ``{index,
    document: {text}, relevance_score}``; usage ``{total_tokens}``) response."""
    if kind == "score":
        return {"id": response_id, "object": "list", "created": created, "model": model,
                "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0}}
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: request.top_n or len(scores)]
    return {"id": response_id, "model": model, "usage": {"total_tokens": prompt_tokens},
            "results": [{"index": i, "document": {"text": request.texts[i]}, "relevance_score": scores[i]}
                        for i in order]}


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < VOCAB_SIZE


# --------------------------------------------------------------------------- responses


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    """OpenAI usage; ``completion_tokens_details.reasoning_tokens`` only when there was reasoning."""
    out: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens}
    if reasoning_tokens:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


#: The tool call's arguments: this before the generated words, :data:`ARGUMENTS_CLOSE` after.
ARGUMENTS_OPEN = '{"text": "'
ARGUMENTS_CLOSE = '"}'


def tool_call_id(response_id: str) -> str:
    return f"chatcmpl-tool-{response_id.removeprefix('chatcmpl-')}"


def chat_delta_chunk(response_id: str, created: int, model: str, delta: dict[str, Any],
                     finish_reason: str | None = None, include_usage: bool = False) -> dict[str, Any]:
    """A streamed chat chunk with one choice whose ``delta`` is given (reasoning, tool-call pieces)."""
    chunk = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    if include_usage:
        chunk["usage"] = None
    return chunk


def tool_call_delta(response_id: str, name: str, arguments: str, first: bool) -> dict[str, Any]:
    """A ``delta`` with one piece of the tool call's arguments (the first piece also carries id and name)."""
    call: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
    if first:
        call = {"index": 0, "id": tool_call_id(response_id), "type": "function",
                "function": {"name": name, "arguments": arguments}}
    return {"tool_calls": [call]}


def stream_chunk(kind: str, response_id: str, created: int, model: str, *, text: str | None = None,
                 role: bool = False, finish_reason: str | None = None, include_usage: bool = False) -> dict[str, Any]:
    """One streamed chunk with one choice: chat (``delta``) or completion (``text``)."""
    if kind == CHAT:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
        if text:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": [choice]}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        chunk = {"id": response_id, "object": "text_completion", "created": created, "model": model,
                 "choices": [choice]}
    if include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk(kind: str, response_id: str, created: int, model: str, prompt_tokens: int,
                completion_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    """The last chunk of a stream with ``stream_options.include_usage``: no choices, the usage."""
    return {"id": response_id, "object": "chat.completion.chunk" if kind == CHAT else "text_completion",
            "created": created, "model": model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens, reasoning_tokens)}


def full_response(kind: str, response_id: str, created: int, model: str, text: str, finish_reason: str | None,
                  prompt_tokens: int, completion_tokens: int, reasoning: str = "", reasoning_tokens: int = 0,
                  tool_name: str | None = None) -> dict[str, Any]:
    """A non-streamed chat or completions response with its usage (chat: ``reasoning_content`` when
    ``reasoning``; with ``tool_name`` the answer ``text`` is that call's arguments' ``text``)."""
    if kind == CHAT:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_name is not None:
            message["content"] = None
            message["tool_calls"] = [{"id": tool_call_id(response_id), "type": "function", "function": {
                "name": tool_name, "arguments": ARGUMENTS_OPEN + text + ARGUMENTS_CLOSE}}]
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": response_id, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens, reasoning_tokens)}


def embedding_response(model: str, embeddings: list[list[float]], encoding: str,
                       prompt_tokens: int) -> dict[str, Any]:
    data = []
    for index, vector in enumerate(embeddings):
        value: Any = vector
        if encoding == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def models_response(config: LlmServerConfig, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{
        "id": config.served_model_name, "object": "model", "created": created, "owned_by": "tailscope",
        "root": config.served_model_name, "parent": None, "max_model_len": config.max_model_len,
    }]}
