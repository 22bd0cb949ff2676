"""The scenario fields of an OpenAI-API request class, from plain values to an :class:`~.spec.LLMSpec`.

No Locust or gevent import. The scenario parser hands every class mapping to
:func:`openai_class_fields` with its own ``fail(path, message)`` (which
returns, or raises, the exception naming the scenario file, line and field)
and merges what it returns into the ``RequestClass`` arguments::

    classes:
      - name: chat
        api: openai-chat                  # openai-completions | openai-embeddings | rerank | score
        model: llama-3-8b
        prompt_tokens: {dist: lognormal, median: 512, sigma: 0.6, min: 16, max: 4096}
        output_tokens: 128                # sets max_tokens (an integer is `fixed`)
        ignore_eos: true                  # default; false leaves the field out
        stream: true                      # default for chat and completions
        shared_prefix_tokens: 256         # or a pool: {prompts: 8, tokens: 512, choice: zipf}
        tokenizer: tokenizer.json         # exact prompt lengths, chunk token counts
        dataset: conversations.jsonl      # replay instead of synthetic prompts
        dataset_order: sequential         # or random
        extra_body: {temperature: 0}
        reasoning_effort: medium          # chat: reasoning_effort, tools, tool_choice (llm_features)

Files are resolved relative to ``base_dir`` (the scenario file's folder) and
read now, before any load is sent; their errors carry the file's line
(``classes[0].dataset: convs.jsonl:7: the conversation has no user message``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from tailscope.loadgen.datafiles import DataFileError, load_conversations, load_sizes
from tailscope.loadgen.llm_features import FEATURE_FIELDS, RANKING_FIELDS, feature_fields
from tailscope.loadgen.llm_tokens import TokenizerError, load_tokenizer
from tailscope.loadgen.spec import (
    LLM_APIS,
    NON_GENERATING_APIS,
    REPLAY_ORDERS,
    LLMDataset,
    LLMSpec,
    PrefixPool,
    SizeSpec,
    SpecError,
)

#: Class fields only a class with ``api`` may have (the scenario parser adds them to its known fields).
LLM_CLASS_FIELDS = frozenset({
    "api", "model", "prompt_tokens", "output_tokens", "ignore_eos", "extra_body",
    "shared_prefix_tokens", "tokenizer", "dataset", "dataset_order",
}) | FEATURE_FIELDS | RANKING_FIELDS
#: Fields of a ``shared_prefix_tokens`` pool.
PREFIX_POOL_FIELDS = frozenset({"prompts", "tokens", "choice", "zipf_s"})
#: Fields of a token-length distribution (as the payload ``size`` grammar).
TOKEN_SIZE_FIELDS = frozenset({"dist", "value", "min", "max", "median", "sigma", "file"})

Fail = Callable[[tuple, str], BaseException]


def openai_class_fields(data: dict, fail: Fail | None = None, *, at: tuple = (), base_dir: str = "") -> dict:
    """``RequestClass`` keyword arguments for the OpenAI-API fields of one class mapping.

    Returns ``{}`` when ``data`` has no ``api`` (a plain HTTP class; then none of
    :data:`LLM_CLASS_FIELDS` may be present), else ``{"llm": LLMSpec, "stream":
    bool}``. ``fail(path, message)`` makes the error for a bad field (``path``
    is ``at`` plus the field's keys); it may return the exception or raise it.
    Without ``fail`` a :class:`~.spec.SpecError` is raised with a dotted field."""
    fail = fail or _spec_error
    api = data.get("api")
    if api is None:
        for key in sorted(LLM_CLASS_FIELDS & set(data)):
            _raise(fail, at + (key,), f"only for OpenAI-API classes (set api: to one of {', '.join(LLM_APIS)})")
        return {}
    if api not in LLM_APIS:
        _raise(fail, at + ("api",), f"expected one of {', '.join(LLM_APIS)}, got {api!r}")
    model = data.get("model")
    if model is None:
        _raise(fail, at + ("model",), "missing: the served model's name (as the server's /v1/models lists it)")
    if not isinstance(model, str) or not model:
        _raise(fail, at + ("model",), f"expected a model name (a string), got {model!r}")
    generates = api not in NON_GENERATING_APIS
    stream = _boolean(data, "stream", generates, fail, at)
    dataset = _dataset(data, fail, at, base_dir)
    if dataset is not None and "prompt_tokens" in data:
        _raise(fail, at + ("prompt_tokens",), "not used with `dataset` (the prompts come from the dataset)")
    if dataset is None and "dataset_order" in data:
        _raise(fail, at + ("dataset_order",), "only with `dataset`")
    tokenizer = data.get("tokenizer")
    if tokenizer is not None:
        tokenizer = _tokenizer_path(tokenizer, fail, at, base_dir)
    extra_body = data.get("extra_body", {})
    if extra_body is None:
        extra_body = {}
    if not isinstance(extra_body, dict) or not all(isinstance(k, str) for k in extra_body):
        _raise(fail, at + ("extra_body",), "expected a mapping of JSON fields, e.g. {temperature: 0}")
    try:
        json.dumps(extra_body)
    except (TypeError, ValueError) as exc:
        _raise(fail, at + ("extra_body",), f"not JSON: {exc}")
    prefix = data.get("shared_prefix_tokens", 0)
    pool = None
    if isinstance(prefix, dict):
        pool, prefix = prefix_pool(prefix, fail, at + ("shared_prefix_tokens",), base_dir), 0
    elif isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        _raise(fail, at + ("shared_prefix_tokens",), f"expected an integer >= 0 (tokens) or a pool such as "
                                                     f"{{prompts: 8, tokens: 512}}, got {prefix!r}")
    kwargs: dict[str, Any] = dict(
        api=api, model=model, stream=stream, extra_body=dict(extra_body), shared_prefix_tokens=prefix,
        tokenizer=tokenizer, dataset=dataset, ignore_eos=_boolean(data, "ignore_eos", True, fail, at),
    )
    kwargs["prefix_pool"] = pool
    if "prompt_tokens" in data:
        kwargs["prompt_tokens"] = token_size(data["prompt_tokens"], fail, at + ("prompt_tokens",), base_dir)
    if "output_tokens" in data:
        kwargs["output_tokens"] = token_size(data["output_tokens"], fail, at + ("output_tokens",), base_dir)
    kwargs.update(feature_fields(data, api, fail, at, lambda value, path: token_size(value, fail, path, base_dir)))
    try:
        spec = LLMSpec(**kwargs)
    except SpecError as exc:
        _raise(fail, at + tuple(exc.field.split(".")), exc.message)
    return {"llm": spec, "stream": spec.stream}


def token_size(value: Any, fail: Fail | None = None, at: tuple = (), base_dir: str = "") -> SizeSpec:
    """A token-length distribution: an integer (``fixed``) or a mapping in the
    payload ``size`` grammar (``dist: fixed|uniform|lognormal|empirical``,
    ``value``, ``min``, ``max``, ``median``, ``sigma``, ``file`` of lengths, one
    per line), in tokens."""
    fail = fail or _spec_error
    if isinstance(value, int) and not isinstance(value, bool):
        return _build_size(fail, at, dist="fixed", value=value)
    if not isinstance(value, dict):
        _raise(fail, at, f"expected a number of tokens or a mapping such as {{dist: uniform, min: 100, "
                         f"max: 1000}}, got {value!r}")
    for key in value:
        if key not in TOKEN_SIZE_FIELDS:
            _raise(fail, at + (key,), f"unknown field {key!r}; expected one of {', '.join(sorted(TOKEN_SIZE_FIELDS))}")
    dist = value.get("dist", "fixed")
    kwargs: dict[str, Any] = {"dist": dist}
    for key in ("value", "min", "max"):
        if key in value:
            number = value[key]
            if isinstance(number, bool) or not isinstance(number, int):
                _raise(fail, at + (key,), f"expected an integer (tokens), got {number!r}")
            kwargs[key] = number
    for key in ("median", "sigma"):
        if key in value:
            number = value[key]
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                _raise(fail, at + (key,), f"expected a number, got {number!r}")
            kwargs[key] = float(number)
    if dist == "empirical":
        name = value.get("file")
        if not isinstance(name, str) or not name:
            _raise(fail, at + ("file",), "missing: a file of token lengths, one per line")
        path = _resolve(name, base_dir)
        try:
            kwargs["values"] = load_sizes(path)
        except DataFileError as exc:
            _raise(fail, at + ("file",), str(exc).replace("size in bytes", "token length"))
        kwargs["file"] = path
    elif "file" in value:
        _raise(fail, at + ("file",), "only for `dist: empirical`")
    return _build_size(fail, at, **kwargs)


def prefix_pool(value: dict, fail: Fail, at: tuple, base_dir: str = "") -> PrefixPool:
    """``shared_prefix_tokens: {prompts: K, tokens: <token length>, choice: uniform | zipf, zipf_s: 1}``:
    K shared system prompts, their lengths from ``tokens`` (an integer or a distribution), one
    chosen per request (:class:`~.spec.PrefixPool`)."""
    for key in value:
        if key not in PREFIX_POOL_FIELDS:
            _raise(fail, at + (key,), f"unknown field {key!r}; expected one of {', '.join(sorted(PREFIX_POOL_FIELDS))}")
    for key in ("prompts", "tokens"):
        if key not in value:
            _raise(fail, at + (key,), "missing: a prefix pool needs `prompts` (how many) and `tokens` (their length)")
    prompts = value["prompts"]
    if isinstance(prompts, bool) or not isinstance(prompts, int):
        _raise(fail, at + ("prompts",), f"expected an integer, got {prompts!r}")
    tokens = token_size(value["tokens"], fail, at + ("tokens",), base_dir)
    zipf_s = value.get("zipf_s", 1.0)
    if isinstance(zipf_s, bool) or not isinstance(zipf_s, (int, float)):
        _raise(fail, at + ("zipf_s",), f"expected a number, got {zipf_s!r}")
    if "zipf_s" in value and value.get("choice") != "zipf":
        _raise(fail, at + ("zipf_s",), "only with `choice: zipf`")
    try:
        return PrefixPool(prompts=prompts, tokens=tokens, choice=value.get("choice", "uniform"), zipf_s=float(zipf_s))
    except SpecError as exc:
        _raise(fail, at + (exc.field,), exc.message)


def _build_size(fail: Fail, at: tuple, **kwargs) -> SizeSpec:
    try:
        return SizeSpec(**kwargs)
    except SpecError as exc:
        _raise(fail, at + (exc.field,), exc.message.replace("sizes must", "token lengths must"))


def _dataset(data: dict, fail: Fail, at: tuple, base_dir: str) -> LLMDataset | None:
    name = data.get("dataset")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        _raise(fail, at + ("dataset",), f"expected a path to a JSONL file of conversations, got {name!r}")
    order = data.get("dataset_order", "sequential")
    if order not in REPLAY_ORDERS:
        _raise(fail, at + ("dataset_order",), f"expected one of {', '.join(REPLAY_ORDERS)}, got {order!r}")
    path = _resolve(name, base_dir)
    try:
        conversations = load_conversations(path)
    except DataFileError as exc:
        _raise(fail, at + ("dataset",), str(exc))
    return LLMDataset(path=path, conversations=conversations, order=order)


def _tokenizer_path(value: Any, fail: Fail, at: tuple, base_dir: str) -> str:
    if not isinstance(value, str) or not value:
        _raise(fail, at + ("tokenizer",), f"expected a path to a tokenizer.json, got {value!r}")
    path = _resolve(value, base_dir)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    try:
        load_tokenizer(path)
    except TokenizerError as exc:
        _raise(fail, at + ("tokenizer",), str(exc))
    return path


def _boolean(data: dict, key: str, default: bool, fail: Fail, at: tuple) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        _raise(fail, at + (key,), f"expected true or false, got {value!r}")
    return value


def _resolve(name: str, base_dir: str) -> str:
    return name if os.path.isabs(name) else os.path.normpath(os.path.join(base_dir, name))


def _spec_error(path: tuple, message: str) -> SpecError:
    return SpecError(".".join(str(p) for p in path) or "class", message)


def _raise(fail: Fail, path: tuple, message: str):
    """Raise what ``fail`` returns (or let it raise)."""
    exc = fail(path, message)
    if isinstance(exc, BaseException):
        raise exc
    raise SpecError(".".join(str(p) for p in path), message)
