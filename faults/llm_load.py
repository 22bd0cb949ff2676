"""Faults of an LLM server made of another client's chat requests (other traffic).

Each kind runs :mod:`.llm_traffic` as a child process for its window: OpenAI
chat requests over loopback with ``ignore_eos`` and no ``traceparent``, so the
server's spans of them join none of the harness's requests (other traffic).
The child is stopped (SIGTERM, then SIGKILL) on revert and cleanup; its open
requests are cancelled, which aborts them on the server and frees their KV
blocks. The counts it wrote are the fault's observed ground truth.

Prompts are ``prompt_tokens`` tokens of the server (:mod:`.llm_traffic`: exact with a
tokenizer — the ``tokenizer`` parameter, else the scenario's — or words calibrated from the
server's ``usage``); the traffic backs off after errors and stops with a ``failure`` in its
counts after repeated 4xx answers, which the fault's ground truth then records as its error.

- ``llm_long_generations``: ``streams`` requests kept open, each a
  ``prompt_tokens`` prompt asking for ``max_tokens`` tokens: every stream's
  context grows by a token per engine step and holds its KV blocks, until the
  cache is full and the engine preempts (expected cause: ``kv_cache_pressure``).
- ``llm_prompt_storm``: Poisson arrivals of long prompts (``prompt_tokens``)
  asking for 1–4 tokens: the engine prefills them in the steps where the
  running streams decode, so every stream's time per output token grows
  (``prefill_interference``).
- ``llm_overload``: Poisson arrivals of ordinary chat requests above the
  engine's capacity: its running batch is at ``--max-num-seqs`` and the
  waiting queue grows while the KV cache still has room (``queue_saturation``).

Needs a loopback LLM server (OpenAI chat API); nothing else.
"""

from __future__ import annotations

from abc import abstractmethod

from tailscope.faults.injector import Param
from tailscope.faults.traffic_injector import TrafficChildInjector

_SEED = Param("integer", 1, "seed of the prompts' words and of the arrivals")
_MODEL = Param("string", "", "'model' of the requests (empty: none given; the server takes its own)")
#: The parameter the run fills from its scenario (conductor/fault_companion.py) when left empty.
TOKENIZER_PARAM = "tokenizer"
_TOKENIZER = Param("string", "", "a local tokenizer.json: prompts of exactly prompt_tokens of its tokens (empty: the "
                                 "scenario's tokenizer when a class names one, else words calibrated from the "
                                 "server's usage.prompt_tokens)")


class LlmTraffic(TrafficChildInjector):
    """Runs :mod:`.llm_traffic` for the window with the kind's shape (``_shape_args``)."""

    requires = "a loopback LLM server with the OpenAI chat API"
    target_kind = "llm"
    module = "tailscope.faults.llm_traffic"

    @abstractmethod
    def _shape_args(self) -> list[str]:
        """``--streams N`` or ``--rate R`` (and ``--max-in-flight``) of this kind."""

    def _child_args(self) -> list[str]:
        params = self.spec.params
        args = ["--url", self.require_url(), *self._shape_args(), "--duration", str(self.spec.duration_s),
                "--prompt-tokens", str(params["prompt_tokens"]), "--max-tokens", str(params["max_tokens"]),
                "--seed", str(params["seed"])]
        if params["model"]:
            args += ["--model", params["model"]]
        if params[TOKENIZER_PARAM]:
            args += ["--tokenizer", params[TOKENIZER_PARAM]]
        return args

    def _applied(self) -> dict:
        return {"traceparent": False, **self.spec.params}


class LlmLongGenerations(LlmTraffic):
    kind = "llm_long_generations"
    summary = "long generations kept open (ignore_eos) that fill the LLM server's KV cache"
    params = {
        "streams": Param("integer", 8, "requests kept open at once", minimum=1, maximum=256),
        "prompt_tokens": Param("integer", 512, "tokens of each prompt", minimum=1, maximum=100_000),
        "max_tokens": Param("integer", 2048, "tokens each request asks for (ignore_eos)", minimum=16, maximum=100_000),
        "seed": _SEED,
        "model": _MODEL,
        TOKENIZER_PARAM: _TOKENIZER,
    }

    def _shape_args(self) -> list[str]:
        return ["--streams", str(self.spec.params["streams"])]


class LlmPromptStorm(LlmTraffic):
    kind = "llm_prompt_storm"
    summary = "a storm of long prompts asking for 1-4 tokens (other traffic): prefill slows the running streams"
    params = {
        "rate": Param("number", 8.0, "long prompts per second (Poisson)", minimum=0.1, maximum=1000.0),
        "prompt_tokens": Param("integer", 1500, "tokens of each prompt", minimum=16, maximum=100_000),
        "max_tokens": Param("integer", 2, "tokens each request asks for", minimum=1, maximum=4),
        "max_in_flight": Param("integer", 64, "most open storm requests", minimum=1, maximum=10_000),
        "seed": _SEED,
        "model": _MODEL,
        TOKENIZER_PARAM: _TOKENIZER,
    }

    def _shape_args(self) -> list[str]:
        return ["--rate", str(self.spec.params["rate"]), "--max-in-flight", str(self.spec.params["max_in_flight"])]


class LlmOverload(LlmTraffic):
    kind = "llm_overload"
    summary = "open-loop chat requests above the LLM server's capacity: its batch is full and requests queue"
    params = {
        "rate": Param("number", 30.0, "requests per second (Poisson, open loop)", minimum=0.1, maximum=10_000.0),
        "prompt_tokens": Param("integer", 64, "tokens of each prompt", minimum=1, maximum=100_000),
        "max_tokens": Param("integer", 64, "tokens each request asks for (ignore_eos)", minimum=1, maximum=100_000),
        "max_in_flight": Param("integer", 512, "most open requests", minimum=1, maximum=10_000),
        "seed": _SEED,
        "model": _MODEL,
        TOKENIZER_PARAM: _TOKENIZER,
    }

    def _shape_args(self) -> list[str]:
        return ["--rate", str(self.spec.params["rate"]), "--max-in-flight", str(self.spec.params["max_in_flight"])]
