"""OpenAI-compatible request parsing and response bodies (chat, completions, embeddings, models, errors).

Parsing turns a JSON body into a :class:`GenerationRequest` or
:class:`EmbeddingRequest`, or raises :class:`OpenAIError` (rendered by
:func:`error_body` as ``{"error": {"message", "type", "param", "code"}}``).
What is honoured: ``model`` (must be the served name when given; else 404),
``max_tokens`` (``max_completion_tokens`` for chat), ``ignore_eos``,
``stream``, ``stream_options.include_usage``; ``temperature``, ``top_p`` and
``n`` are validated and recorded on the span but do not change sampling (``n``
must be 1). Prompts: ``prompt`` is a string (or a one-element list of one);
chat ``messages`` contribute every content text (a string, or ``text`` parts)
joined in order. Token counts are words (:mod:`.tokens`).

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

from tailscope.targets.llm.config import LlmServerConfig
from tailscope.targets.llm.tokens import VOCAB_SIZE, tokenize, tokenize_texts

CHAT = "chat"
COMPLETION = "completion"

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
    texts: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{index}] must be an object with a string role", "messages")
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
        elif content is not None:
            raise _bad(f"messages[{index}].content must be a string or a list of parts", "messages")
    return tokenize_texts(texts)


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
    return GenerationRequest(kind, prompt_ids, max_tokens, ignore_eos, stream, include_usage, params)


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


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < VOCAB_SIZE


# --------------------------------------------------------------------------- responses


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


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
                completion_tokens: int) -> dict[str, Any]:
    """The last chunk of a stream with ``stream_options.include_usage``: no choices, the usage."""
    return {"id": response_id, "object": "chat.completion.chunk" if kind == CHAT else "text_completion",
            "created": created, "model": model, "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def full_response(kind: str, response_id: str, created: int, model: str, text: str, finish_reason: str | None,
                  prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """A non-streamed chat or completions response with its usage."""
    if kind == CHAT:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": response_id, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens)}


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
