"""OpenAI-API request classes: the scenario fields (openai_class_fields) and
their errors, the JSON bodies, synthetic prompts of an exact length (words, or
a real tokenizer.json built here with `tokenizers`), the shared prefix, and
dataset replay of multi-turn conversations with their history."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailscope.loadgen.llm_fields import LLM_CLASS_FIELDS, openai_class_fields
from tailscope.loadgen.llm_requests import LLMRequestMaker
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.spec import DEFAULT_OUTPUT_TOKENS, PayloadSpec, RequestClass, SpecError


class Located(Exception):
    """What the scenario parser's fail() would make: the path and the message."""

    def __init__(self, path, message):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _fail(path, message):
    return Located(path, message)


def _class(fields: dict, name: str = "chat", base_dir: str = "") -> RequestClass:
    extra = openai_class_fields(fields, _fail, at=("classes", 0), base_dir=base_dir)
    return RequestClass(name=name, path=fields.get("path", ""), **extra)


def _bodies(cls: RequestClass, n: int, seed: int = 1) -> list[tuple[dict, object]]:
    mix = RequestMix((cls,), seed)
    out = []
    for _ in range(n):
        request = mix.prepare(0)
        out.append((json.loads(request.body), request.llm))
    return out


# -- fields ------------------------------------------------------------------------------


def test_chat_class_defaults():
    cls = _class({"api": "openai-chat", "model": "m"})
    assert cls.path == "/v1/chat/completions" and cls.method == "POST" and cls.stream and cls.api == "openai-chat"
    body, info = _bodies(cls, 1)[0]
    assert body["model"] == "m" and body["max_tokens"] == DEFAULT_OUTPUT_TOKENS == info.max_tokens
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    assert len(body["messages"][0]["content"].split()) == 256 == info.prompt_tokens  # SizeSpec's default value
    assert cls.llm.describe()["api"] == "openai-chat"


def test_completions_embeddings_and_overrides():
    completions = _class({"api": "openai-completions", "model": "m", "prompt_tokens": 12, "output_tokens": 5,
                          "ignore_eos": False, "stream": False, "path": "/proxy/v1/completions",
                          "extra_body": {"temperature": 0, "max_tokens": 9, "stream_options": None}})
    assert completions.path == "/proxy/v1/completions" and not completions.stream
    body, info = _bodies(completions, 1)[0]
    assert isinstance(body["prompt"], str) and len(body["prompt"].split()) == 12 == info.prompt_tokens
    assert "ignore_eos" not in body and body["stream"] is False
    assert body["temperature"] == 0 and body["max_tokens"] == 9  # extra_body wins, key by key
    assert body["stream_options"] is None and info.max_tokens == 5
    embeddings = _class({"api": "openai-embeddings", "model": "e", "prompt_tokens": {"dist": "uniform",
                                                                                    "min": 3, "max": 6}})
    assert embeddings.path == "/v1/embeddings" and not embeddings.stream
    for body, info in _bodies(embeddings, 20):
        assert set(body) == {"model", "input"} and 3 <= len(body["input"].split()) == info.prompt_tokens <= 6
        assert info.max_tokens is None


@pytest.mark.parametrize("fields,path,message", [
    ({"api": "openai-chatt", "model": "m"}, ("api",), "expected one of openai-chat"),
    ({"api": "openai-chat"}, ("model",), "missing"),
    ({"api": "openai-chat", "model": 3}, ("model",), "expected a model name"),
    ({"model": "m"}, ("model",), "only for OpenAI-API classes"),
    ({"api": "openai-chat", "model": "m", "stream": "yes"}, ("stream",), "expected true or false"),
    ({"api": "openai-embeddings", "model": "m", "output_tokens": 4}, ("output_tokens",), "embeddings generate"),
    ({"api": "openai-embeddings", "model": "m", "stream": True}, ("stream",), "not streamed"),
    ({"api": "openai-chat", "model": "m", "output_tokens": 0}, ("output_tokens",), ">= 1 token"),
    ({"api": "openai-chat", "model": "m", "prompt_tokens": "many"}, ("prompt_tokens",), "expected a number"),
    ({"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "normal"}}, ("prompt_tokens", "dist"),
     "unknown size distribution"),
    ({"api": "openai-chat", "model": "m", "prompt_tokens": {"median": 5, "size": 3}}, ("prompt_tokens", "size"),
     "unknown field"),
    ({"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "uniform", "min": 9, "max": 3}},
     ("prompt_tokens", "max"), "below min"),
    ({"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "uniform", "min": 1.5}},
     ("prompt_tokens", "min"), "expected an integer"),
    ({"api": "openai-chat", "model": "m", "output_tokens": {"dist": "empirical"}}, ("output_tokens", "file"),
     "missing"),
    ({"api": "openai-chat", "model": "m", "shared_prefix_tokens": -1}, ("shared_prefix_tokens",), "integer >= 0"),
    ({"api": "openai-chat", "model": "m", "extra_body": [1]}, ("extra_body",), "mapping"),
    ({"api": "openai-chat", "model": "m", "dataset_order": "random"}, ("dataset_order",), "only with `dataset`"),
    ({"api": "openai-chat", "model": "m", "tokenizer": "nope/tokenizer.json"}, ("tokenizer",), "no such file"),
    ({"api": "openai-chat", "model": "m", "dataset": "nope.jsonl"}, ("dataset",), "cannot read"),
])
def test_bad_fields_are_named(fields, path, message):
    with pytest.raises(Located) as info:
        openai_class_fields(fields, _fail, at=("classes", 2))
    assert info.value.path == ("classes", 2, *path) and message in info.value.message


def test_without_fail_a_spec_error_names_the_field():
    with pytest.raises(SpecError) as info:
        openai_class_fields({"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "lognormal",
                                                                                   "median": -1}})
    assert info.value.field == "prompt_tokens.median"
    assert openai_class_fields({"name": "plain", "path": "/x"}) == {}
    assert "prompt_tokens" in LLM_CLASS_FIELDS and "name" not in LLM_CLASS_FIELDS


def test_request_class_rejects_a_payload_or_another_method():
    extra = openai_class_fields({"api": "openai-chat", "model": "m"})
    with pytest.raises(SpecError, match="payload"):
        RequestClass(name="c", path="", payload=PayloadSpec(kind="fixed", body="{}"), **extra)
    with pytest.raises(SpecError, match="POST"):
        RequestClass(name="c", path="", method="GET", **extra)


def test_empirical_token_lengths_from_a_file(tmp_path):
    (tmp_path / "lengths.txt").write_text("# output lengths\n3\n7\n")
    cls = _class({"api": "openai-chat", "model": "m", "output_tokens": {"dist": "empirical", "file": "lengths.txt"}},
                 base_dir=str(tmp_path))
    assert {info.max_tokens for _, info in _bodies(cls, 40)} == {3, 7}
    (tmp_path / "bad.txt").write_text("3\nlots\n")
    with pytest.raises(Located) as info:
        openai_class_fields({"api": "openai-chat", "model": "m", "output_tokens": {"dist": "empirical",
                                                                                  "file": "bad.txt"}},
                            _fail, base_dir=str(tmp_path))
    assert info.value.path == ("output_tokens", "file") and "bad.txt:2:" in info.value.message


# -- synthetic prompts ----------------------------------------------------------------------


def test_synthetic_prompts_are_deterministic_per_seed_with_a_common_prefix():
    fields = {"api": "openai-chat", "model": "m", "prompt_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.8,
                                                                   "min": 1, "max": 300},
              "output_tokens": {"dist": "uniform", "min": 1, "max": 50}, "shared_prefix_tokens": 16}
    cls = _class(fields)
    first = _bodies(cls, 50, seed=7)
    assert first == _bodies(_class(fields), 50, seed=7)
    other = _bodies(cls, 50, seed=8)
    assert [b["messages"] for b, _ in first] != [b["messages"] for b, _ in other]
    prefixes = set()
    for body, info in first + other:
        words = body["messages"][0]["content"].split(" ")
        assert all(words) and len(words) == info.prompt_tokens >= 17  # one token per word, single spaces
        assert 1 <= body["max_tokens"] == info.max_tokens <= 50
        prefixes.add(" ".join(words[:16]))
    assert len(prefixes) == 1  # the same prefix for every request, in every seed (worker)
    assert len({info.prompt_tokens for _, info in first}) > 10


def test_long_prompts_wrap_around_the_pool():
    cls = _class({"api": "openai-completions", "model": "m", "prompt_tokens": 70_000})
    body, info = _bodies(cls, 1)[0]
    assert len(body["prompt"].split(" ")) == 70_000 == info.prompt_tokens


def _word_level_tokenizer(path) -> str:
    tokenizers = pytest.importorskip("tokenizers", reason="the `tokenizers` package is not installed")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<s>"])
    tokenizer.save(str(path))
    return str(path)


def _bpe_tokenizer(path) -> str:
    tokenizers = pytest.importorskip("tokenizers", reason="the `tokenizers` package is not installed")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    corpus = ["the quick brown fox jumps over the lazy dog", "load tests find the tail of the latency",
              "a queue that fills drops requests and retries them", "tokens arrive in chunks of several"] * 50
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.save(str(path))
    return str(path)


def test_a_tokenizer_gives_exact_prompt_lengths(tmp_path):
    from tokenizers import Tokenizer

    path = _word_level_tokenizer(tmp_path / "tokenizer.json")
    cls = _class({"api": "openai-chat", "model": "m", "tokenizer": "tokenizer.json", "shared_prefix_tokens": 4,
                  "prompt_tokens": {"dist": "uniform", "min": 1, "max": 40}}, base_dir=str(tmp_path))
    assert cls.llm.tokenizer == path
    tokenizer = Tokenizer.from_file(path)
    for body, info in _bodies(cls, 30):
        text = body["messages"][0]["content"]
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert len(ids) == info.prompt_tokens and 5 <= info.prompt_tokens <= 44
        assert 0 not in ids  # no unknown token, no special token
    # a directory holding tokenizer.json works too
    assert openai_class_fields({"api": "openai-chat", "model": "m", "tokenizer": str(tmp_path)})["llm"].tokenizer == path


def test_a_bpe_tokenizer_reaches_the_length_after_re_encoding(tmp_path):
    from tokenizers import Tokenizer

    path = _bpe_tokenizer(tmp_path / "bpe.json")
    cls = _class({"api": "openai-completions", "model": "m", "tokenizer": path,
                  "prompt_tokens": {"dist": "uniform", "min": 20, "max": 200}})
    tokenizer = Tokenizer.from_file(path)
    for body, info in _bodies(cls, 40):
        count = len(tokenizer.encode(body["prompt"], add_special_tokens=False).ids)
        assert count == info.prompt_tokens  # the recorded count is always the tokenizer's count of the text sent
        assert 20 <= count <= 200
    maker = LLMRequestMaker("c", cls.llm, np.random.default_rng(4))
    for n in (1, 2, 7, 50, 333, 1000):
        text, count = maker.synthetic_prompt(n)
        assert count == n == len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_a_file_that_is_not_a_tokenizer_is_named(tmp_path):
    pytest.importorskip("tokenizers", reason="the `tokenizers` package is not installed")
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(Located) as info:
        openai_class_fields({"api": "openai-chat", "model": "m", "tokenizer": "tokenizer.json"}, _fail,
                            base_dir=str(tmp_path))
    assert info.value.path == ("tokenizer",) and "not a Hugging Face tokenizer.json" in info.value.message


# -- dataset replay -------------------------------------------------------------------------

CONVERSATIONS = [
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Name a prime."},
                  {"role": "assistant", "content": "Seven is prime."},
                  {"role": "user", "content": "And an even one?"},
                  {"role": "assistant", "content": "Two."}]},
    {"conversations": [{"from": "human", "value": "Hello there"},
                       {"from": "gpt", "value": "Hi! How can I help you today?"}]},
    {"prompt": "Just one turn"},
]


def _dataset(tmp_path, items=CONVERSATIONS, name="convs.jsonl") -> str:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(item) for item in items) + "\n")
    return str(path)


def test_dataset_replay_carries_the_history(tmp_path):
    path = _dataset(tmp_path)
    cls = _class({"api": "openai-chat", "model": "m", "dataset": path})
    assert cls.llm.dataset.turns == 4 and cls.llm.describe()["dataset"]["conversations"] == 3
    requests = _bodies(cls, 5)
    messages = [body["messages"] for body, _ in requests]
    assert messages[0] == [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Name a prime."}]
    assert messages[1] == [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Name a prime."},
                           {"role": "assistant", "content": "Seven is prime."},
                           {"role": "user", "content": "And an even one?"}]
    assert messages[2] == [{"role": "user", "content": "Hello there"}]
    assert messages[3] == [{"role": "user", "content": "Just one turn"}]
    assert messages[4] == messages[0]  # wraps around
    infos = [info for _, info in requests]
    assert [i.turn for i in infos] == [(0, 0), (0, 1), (1, 0), (2, 0), (0, 0)]
    # prompt: words of the whole history; max_tokens: the recorded reply's length, else the default
    assert [i.prompt_tokens for i in infos[:4]] == [6, 13, 2, 3]
    assert [i.max_tokens for i in infos[:4]] == [3, 1, 7, DEFAULT_OUTPUT_TOKENS]


def test_dataset_with_a_prefix_output_lengths_and_other_apis(tmp_path):
    path = _dataset(tmp_path)
    chat = _class({"api": "openai-chat", "model": "m", "dataset": path, "output_tokens": 9,
                   "shared_prefix_tokens": 5})
    body, info = _bodies(chat, 1)[0]
    assert body["messages"][0]["role"] == "system" and len(body["messages"][0]["content"].split()) == 5
    assert body["messages"][1:] == [{"role": "system", "content": "You are terse."},
                                    {"role": "user", "content": "Name a prime."}]
    assert info.prompt_tokens == 11 and body["max_tokens"] == 9
    completions = _bodies(_class({"api": "openai-completions", "model": "m", "dataset": path}), 2)
    assert completions[1][0]["prompt"] == "You are terse.\n\nName a prime.\n\nSeven is prime.\n\nAnd an even one?"
    embeddings = _bodies(_class({"api": "openai-embeddings", "model": "m", "dataset": path}), 3)
    assert [b["input"] for b, _ in embeddings] == ["Name a prime.", "And an even one?", "Hello there"]
    assert [info.prompt_tokens for _, info in embeddings] == [3, 4, 2]


def test_random_dataset_order_keeps_each_conversation_in_order(tmp_path):
    items = [{"messages": [{"role": "user", "content": f"c{c} t{t}"} if k % 2 == 0 else
                           {"role": "assistant", "content": "ok"} for k in range(5) for t in [k // 2]]}
             for c in range(6)]
    cls = _class({"api": "openai-chat", "model": "m", "dataset": _dataset(tmp_path, items), "dataset_order": "random"})
    turns = [info.turn for _, info in _bodies(cls, 60, seed=3)]
    assert len({c for c, _ in turns}) > 2
    i = 0
    while i < len(turns):  # each conversation's turns 0, 1, 2 back to back
        assert [t for _, t in turns[i:i + 3]] == list(range(len(turns[i:i + 3])))
        assert len({c for c, _ in turns[i:i + 3]}) == 1
        i += 3
    assert turns == [info.turn for _, info in _bodies(cls, 60, seed=3)]


def test_sharegpt_json_array_and_dataset_errors(tmp_path):
    array = tmp_path / "sharegpt.json"
    array.write_text(json.dumps([{"id": "x", "conversations": [{"from": "human", "value": "Q?"},
                                                                {"from": "gpt", "value": "A."}]}]))
    cls = _class({"api": "openai-chat", "model": "m", "dataset": str(array)})
    assert _bodies(cls, 1)[0][0]["messages"] == [{"role": "user", "content": "Q?"}]
    bad = [({"messages": [{"role": "assistant", "content": "only me"}]}, "convs.jsonl:2: the conversation has no user"),
           ({"messages": [{"role": "robot", "content": "x"}]}, "convs.jsonl:2: message 0: unknown role 'robot'"),
           ({"messages": [{"role": "user", "content": 5}]}, "convs.jsonl:2: message 0: content must be"),
           ({"text": "x"}, "convs.jsonl:2: expected a non-empty 'messages'")]
    for item, message in bad:
        path = _dataset(tmp_path, [CONVERSATIONS[2], item])
        with pytest.raises(Located) as info:
            openai_class_fields({"api": "openai-chat", "model": "m", "dataset": path}, _fail, at=("classes", 1))
        assert info.value.path == ("classes", 1, "dataset") and message in info.value.message, info.value.message
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(Located, match="broken.jsonl:2: not a JSON document"):
        openai_class_fields({"api": "openai-chat", "model": "m", "dataset": "broken.jsonl"}, _fail,
                            base_dir=str(tmp_path))
    with pytest.raises(Located, match="not used with `dataset`"):
        openai_class_fields({"api": "openai-chat", "model": "m", "dataset": str(array), "prompt_tokens": 5}, _fail)
