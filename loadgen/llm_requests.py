"""Request bodies for OpenAI-compatible API classes: prompts of a token length, or replayed conversations.

No Locust or gevent import. :class:`LLMRequestMaker` makes the JSON body of
one request of an :class:`~.spec.LLMSpec` class:

- ``openai-chat``: ``{"model", "messages", "max_tokens", "ignore_eos",
  "stream", "stream_options": {"include_usage": true}}``;
- ``openai-completions``: the same with ``"prompt"`` (a text) for ``messages``;
- ``openai-embeddings``: ``{"model", "input"}``;

then the chat options of :mod:`.llm_features` (``reasoning_effort``,
``tools``, ``tool_choice``), then ``extra_body`` merged key by key (it wins).
A chat class with ``images`` (:mod:`.llm_images`) sends its last message's text
as a ``text`` part followed by the request's ``image_url`` parts. A ``rerank`` or
``score`` class sends the prompt as the query against ``documents`` drawn
documents of ``document_tokens`` tokens (user texts without the shared prefix);
its prompt count is the query's plus the documents'. ``ignore_eos`` is left out
when the class sets it false; ``stream_options`` only goes with ``stream: true``.

Synthetic prompts are deterministic per seed (the mix's per-class generator):

- without a tokenizer, words of 2–7 random lowercase letters separated by
  single spaces, one token per word, taken at a random start from a pool of
  :data:`POOL_WORDS` words (wrapping around): a prompt of ``n`` tokens costs
  one ``n``-word slice;
- with a tokenizer, ``n`` *one-token words*: vocabulary tokens that, decoded
  and written with a leading space, encode back to exactly one token (found
  among :data:`UNIT_CANDIDATES` random ordinary tokens when the maker is
  built), so that with the usual pre-tokenizers (whitespace, byte-level,
  metaspace) a text of ``n`` of them is ``n`` tokens. The text is encoded once
  to check; when it is not exactly ``n`` tokens (or the vocabulary has too few
  such words), token ids are decoded and re-encoded until it is: too many,
  cut to ``n − 1`` and draw the last afresh; too few, append more (at most
  :data:`MAX_FIXUPS` rounds). The count recorded is always the tokenizer's
  count of the text sent. Cost: one encode per request (about 1 µs a token).

The shared prefix (``shared_prefix_tokens``) is made from a generator seeded
by the class name alone, so it is the same in every worker and every run.
A prefix pool (``shared_prefix_tokens: {prompts: K, ...}``) is K such
prefixes, their lengths drawn from the pool's distribution by that generator;
each request (each session) takes one, drawn with the pool's weights.

A replayed LLM trace (``LLMSpec.trace``) gives each request's prompt length
and ``max_tokens`` from its row, and Mooncake's hash ids the same blocks for
equal ids (:mod:`.trace_prompts`).

Multi-turn sessions (``arrival.sessions``): :meth:`LLMRequestMaker.start_session`
opens a :class:`Conversation` (the shared prefix, and a dataset conversation's
system prompt, as system messages); each :meth:`LLMRequestMaker.make_turn` adds
the next user message (drawn tokens without the prefix, or the dataset
conversation's next user message) and sends the whole history; the caller
appends the model's actual answer (:meth:`Conversation.answer`) before the next
turn. A dataset's recorded replies are never sent: they only set ``max_tokens``
when ``output_tokens`` is absent.

Replayed conversations (``dataset``): each request is the next user turn,
sent with the conversation's history before it; for completions the history's
contents are joined with blank lines into one prompt, for embeddings the
user message alone (after the shared prefix, when set) is the input.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field

import numpy as np

from tailscope.loadgen.llm_features import feature_body, ranking_body
from tailscope.loadgen.llm_images import ImageMaker
from tailscope.loadgen.llm_tokens import TokenCounter, counter_for
from tailscope.loadgen.payloads import SizeSampler
from tailscope.loadgen.spec import DEFAULT_OUTPUT_TOKENS, LLMSpec
from tailscope.loadgen.trace_prompts import TracePrompts

#: Words in the pool synthetic prompts are cut from (about 5 bytes each).
POOL_WORDS = 1 << 16
#: Distinct words the pool is drawn from.
VOCABULARY_WORDS = 4096
#: Token ids (and one-token words) in a tokenizer class's pools.
POOL_TOKEN_IDS = 1 << 16
#: Random ordinary tokens tried as one-token words when a tokenizer class is built.
UNIT_CANDIDATES = 4096
#: Fewest one-token words for the word method; fewer: decode / re-encode only.
MIN_UNITS = 16
#: Decode / re-encode rounds to reach an exact token length with a tokenizer.
MAX_FIXUPS = 16
CONTENT_TYPE = "application/json"


@dataclass
class LLMRequestInfo:
    """What the client knows of one OpenAI-API request, for its record."""

    prompt_tokens: int  # the client's count of the prompt (tokenizer: exact; else words)
    max_tokens: int | None  # the output length asked for; None for embeddings
    counter: TokenCounter = field(compare=False)  # counts a streamed chunk's text (tokenizer or words)
    turn: tuple[int, int] | None = None  # dataset replay: (conversation, user turn), from 0
    #: A session's turn (:meth:`LLMRequestMaker.make_turn`): the conversation it belongs to; None otherwise.
    session: Conversation | None = None
    #: Chat classes with ``images``: (images sent, their pixels in total); None otherwise.
    images: tuple[int, int] | None = None
    #: Rerank / score classes: (documents sent, their tokens in total by the client's count); None otherwise.
    ranking: tuple[int, int] | None = None


@dataclass(eq=False)
class Conversation:
    """One multi-turn session's state (:class:`~.spec.SessionSpec`): the messages sent so far
    and the answers received, counted with the class's counter.

    ``turn`` is the number of turns made (the last one's index, 1-based); ``turns`` the
    session's planned turn count; ``session_id`` a random positive int64 (unique per run
    with overwhelming probability, also across distributed workers)."""

    session_id: int
    turns: int
    messages: list[dict]
    prompt_tokens: int  # the client's count of ``messages``
    turn: int = 0
    #: A dataset conversation's user turns: (text, its count, the recorded reply's count or None).
    script: list[tuple[str, int, int | None]] | None = None

    @property
    def finished(self) -> bool:
        """True once every planned turn was made."""
        return self.turn >= self.turns

    def answer(self, text: str, tokens: int) -> None:
        """Append the model's actual answer to the last turn (``tokens``: its client count) to the history."""
        self.messages.append({"role": "assistant", "content": text})
        self.prompt_tokens += tokens


class LLMRequestMaker:
    """Makes request bodies for one OpenAI-API class. ``make()`` returns
    ``(body bytes, LLMRequestInfo)``. Not thread-safe: one maker per class per
    event loop. Memory: a pool of :data:`POOL_WORDS` words (or token ids)."""

    content_type = CONTENT_TYPE

    def __init__(self, name: str, spec: LLMSpec, rng: np.random.Generator, share: tuple[int, int] = (0, 1)):
        self.spec = spec
        self._rng = rng
        self.counter = counter_for(spec.tokenizer)
        self._prompt_sizes = SizeSampler(spec.prompt_tokens, rng)
        self._output_sizes = SizeSampler(spec.output_tokens, rng) if spec.output_tokens is not None else None
        self._uniform: list[float] = []
        prefix_rng = np.random.default_rng(zlib.crc32(name.encode("utf-8")))
        self._units: list[str] | None = None
        if self.counter.exact:
            ordinary = np.asarray(self.counter.ordinary_ids(), dtype=np.int64)
            if len(ordinary) == 0:
                raise ValueError(f"{spec.tokenizer}: the tokenizer has no ordinary tokens")
            self._id_pool = rng.choice(ordinary, size=POOL_TOKEN_IDS).tolist()
            units = one_token_words(self.counter, np.random.default_rng(0).choice(
                ordinary, size=min(UNIT_CANDIDATES, len(ordinary)), replace=False).tolist())
            self._ordinary, self._unit_words = ordinary, units
            if len(units) >= MIN_UNITS:
                self._units = [units[i] for i in rng.integers(0, len(units), size=POOL_TOKEN_IDS).tolist()]
                prefix = "".join(units[i] for i in prefix_rng.integers(0, len(units),
                                                                        size=spec.shared_prefix_tokens).tolist())
            else:
                self._prefix_ids = prefix_rng.choice(ordinary, size=spec.shared_prefix_tokens).tolist()
                prefix = self.counter.decode(self._prefix_ids)
            self._prefix_text, self._prefix_count = self._exact(prefix, spec.shared_prefix_tokens)
        else:
            self._pool, self._starts = word_pool(rng, POOL_WORDS)
            self._prefix_text = random_words(prefix_rng, spec.shared_prefix_tokens)
            self._prefix_count = spec.shared_prefix_tokens
        self._prefix_pool = self._prefixes(name, spec.prefix_pool) if spec.prefix_pool is not None else None
        self._trace = self._trace_prompts(name, spec.trace, share) if spec.trace is not None else None
        self._dataset = _DatasetWalker(spec, rng, self.counter) if spec.dataset is not None else None
        self._features = feature_body(spec.reasoning_effort, spec.tools, spec.tool_choice)
        self._images = ImageMaker(spec.images, rng) if spec.images is not None else None
        self._ranking = spec.ranking
        if spec.ranking is not None:
            self._ranking_counts = SizeSampler(spec.ranking.documents, rng)
            self._document_sizes = SizeSampler(spec.ranking.document_tokens, rng)

    def make(self) -> tuple[bytes, LLMRequestInfo]:
        """One request's JSON body and what the client knows of it."""
        turn = None
        if self._prefix_pool is not None:
            self._choose_prefix()
        if self._trace is not None:
            text, prompt_count, reply_count = self._trace.next()
            text, prompt_count = self._exact(text, prompt_count) if self.counter.exact else (text, prompt_count)
            messages = [{"role": "user", "content": text}]
        elif self._dataset is not None:
            turn, messages, prompt_count, reply_count = self._dataset.next()
            if self._prefix_text:
                messages = [{"role": "system", "content": self._prefix_text}, *messages]
                prompt_count += self._prefix_count
        else:
            text, prompt_count = self.synthetic_prompt(self._prompt_sizes.draw())
            messages = [{"role": "user", "content": text}]
            reply_count = None
        return self._request(messages, prompt_count, reply_count, turn)

    def start_session(self, session_id: int, turns: int | None) -> Conversation:
        """A new session of ``turns`` turns (None: a dataset class's next conversation, all its
        user turns), its history opened with the shared prefix as a system message when set."""
        if self._prefix_pool is not None:
            self._choose_prefix()
        messages = [{"role": "system", "content": self._prefix_text}] if self._prefix_text else []
        script = None
        prompt_count = self._prefix_count if self._prefix_text else 0
        if turns is None:
            if self._dataset is None:
                raise ValueError("a session without a turn count needs a dataset class")
            prelude, script = self._dataset.conversation_script()
            messages += [{"role": role, "content": content} for role, content in prelude]
            prompt_count += sum(self.counter.count(content) for _, content in prelude)
            turns = len(script)
        return Conversation(session_id, turns, messages, prompt_count, script=script)

    def make_turn(self, conversation: Conversation) -> tuple[bytes, LLMRequestInfo]:
        """The next turn of ``conversation``: its history (every earlier user message and actual
        answer) and a new user message (the dataset's next, else ``prompt_tokens`` drawn tokens),
        which joins the history. The body and what the client knows of it (``info.session``)."""
        if conversation.finished:
            raise ValueError(f"session {conversation.session_id} has made its {conversation.turns} turns")
        reply_count = None
        if conversation.script is not None:
            text, count, reply_count = conversation.script[conversation.turn]
        else:
            text, count = self.user_text(self._prompt_sizes.draw())
        conversation.messages.append({"role": "user", "content": text})
        conversation.prompt_tokens += count
        conversation.turn += 1
        body, info = self._request(conversation.messages, conversation.prompt_tokens, reply_count, None)
        info.session = conversation
        return body, info

    def user_text(self, n: int) -> tuple[str, int]:
        """A user message of ``n`` drawn tokens, without the shared prefix: (text, its token count)."""
        if self.counter.exact:
            if self._units is not None:
                return self._exact("".join(self._circular(self._units, n)), n)
            return self._exact(self.counter.decode(self._circular(self._id_pool, n)), n)
        return self._words(n), n

    def _request(self, messages: list[dict], prompt_count: int, reply_count: int | None,
                 turn: tuple[int, int] | None) -> tuple[bytes, LLMRequestInfo]:
        """The JSON body of ``messages`` (chat; joined for completions; the last for embeddings)."""
        spec = self.spec
        body: dict = {"model": spec.model}
        max_tokens = None
        images = ranking = None
        if spec.api == "openai-chat":
            body["messages"] = messages
            if self._images is not None:  # the images join the last message (a copy: a session's history keeps text)
                parts, count, pixels = self._images.make()
                last = messages[-1]
                body["messages"] = [*messages[:-1], {**last, "content": [{"type": "text", "text": last["content"]},
                                                                       *parts]}]
                images = (count, pixels)
        elif spec.api == "openai-completions":
            body["prompt"] = "\n\n".join(m["content"] for m in messages)
        elif self._ranking is not None:  # rerank / score: the query against drawn documents
            documents = [self.user_text(self._document_sizes.draw()) for _ in range(self._ranking_counts.draw())]
            body.update(ranking_body(spec.api, spec.ranking, messages[-1]["content"], [d for d, _ in documents]))
            query_count = self.counter.count(messages[-1]["content"]) if self._dataset is not None else prompt_count
            document_count = sum(count for _, count in documents)
            prompt_count = query_count + document_count
            ranking = (len(documents), document_count)
        elif self._dataset is None:
            body["input"] = messages[-1]["content"]
        else:  # a replayed turn: its user message, after the shared prefix
            body["input"] = (self._prefix_text + " " if self._prefix_text else "") + messages[-1]["content"]
            prompt_count = self.counter.count(body["input"])
        if spec.generates:
            max_tokens = self._max_tokens(reply_count)
            body["max_tokens"] = max_tokens
            if spec.ignore_eos:
                body["ignore_eos"] = True
            body["stream"] = spec.stream
            if spec.stream:
                body["stream_options"] = {"include_usage": True}
        body.update(self._features)
        body.update(spec.extra_body)
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return data, LLMRequestInfo(prompt_count, max_tokens, self.counter, turn, images=images, ranking=ranking)

    def synthetic_prompt(self, n: int) -> tuple[str, int]:
        """A prompt of the shared prefix and ``n`` drawn tokens: (text, its token count)."""
        total = self._prefix_count + n
        if self.counter.exact:
            if self._units is not None:
                return self._exact(self._prefix_text + "".join(self._circular(self._units, n)), total)
            return self._exact(self.counter.decode(self._prefix_ids + self._circular(self._id_pool, n)), total)
        words = self._words(n)
        if self._prefix_text and words:
            return self._prefix_text + " " + words, total
        return self._prefix_text or words, total

    def _prefixes(self, name: str, pool) -> tuple[list[tuple[str, int]], np.ndarray]:
        """The prefix pool's prompts ``(text, tokens)``, lengths and texts from a generator seeded
        by the class name (the same in every worker and run), and their cumulative weights."""
        pool_rng = np.random.default_rng([zlib.crc32(name.encode("utf-8")), pool.prompts])
        lengths = SizeSampler(pool.tokens, pool_rng)
        prompts = []
        for _ in range(pool.prompts):
            n = int(lengths.draw())
            if not self.counter.exact:
                prompts.append((random_words(pool_rng, n), n))
            elif self._units is not None:
                words = self._unit_words
                prompts.append(self._exact("".join(words[i] for i in pool_rng.integers(0, len(words), size=n)
                                                   .tolist()), n))
            else:
                prompts.append(self._exact(self.counter.decode(pool_rng.choice(self._ordinary, size=n).tolist()), n))
        return prompts, np.cumsum(pool.weights())

    def _choose_prefix(self) -> int:
        """Draw this request's prefix from the pool (it becomes the shared prefix); its index."""
        prompts, cumulative = self._prefix_pool
        index = min(int(np.searchsorted(cumulative, self._fraction() * cumulative[-1], side="right")),
                    len(prompts) - 1)
        self._prefix_text, self._prefix_count = prompts[index]
        return index

    def _trace_prompts(self, name: str, trace, share: tuple[int, int]) -> TracePrompts:
        """The prompts of a replayed trace's rows (Mooncake blocks from a pool seeded by the class name)."""
        block_rng = np.random.default_rng([zlib.crc32(name.encode("utf-8")), 0x7ACE])
        if not self.counter.exact:
            return TracePrompts(trace, self.synthetic_prompt, words=word_pool(block_rng, POOL_WORDS), share=share)
        if self._units is None:
            raise ValueError(f"{self.spec.tokenizer}: too few one-token words to build a trace's shared blocks")
        words = self._unit_words
        block_units = [words[i] for i in block_rng.integers(0, len(words), size=POOL_TOKEN_IDS).tolist()]
        return TracePrompts(trace, self.synthetic_prompt, units=words, block_units=block_units, share=share)

    def _max_tokens(self, reply_count: int | None) -> int:
        if self._output_sizes is not None:
            return max(1, int(self._output_sizes.draw()))
        if reply_count:
            return reply_count
        return DEFAULT_OUTPUT_TOKENS

    def _words(self, n: int) -> str:
        """``n`` pool words from a random start (wrapping around), space-separated."""
        if n <= 0:
            return ""
        pool, starts = self._pool, self._starts
        size = len(starts) - 1
        first = int(self._fraction() * size)
        pieces = []
        while n > 0:
            take = min(n, size - first)
            pieces.append(pool[starts[first]: starts[first + take] - 1])
            n -= take
            first = 0
        return b" ".join(pieces).decode("ascii")

    def _circular(self, pool: list, n: int) -> list:
        """``n`` items of ``pool`` from a random start (wrapping around)."""
        if n <= 0:
            return []
        first = int(self._fraction() * len(pool))
        out = pool[first: first + n]
        while len(out) < n:
            out += pool[: n - len(out)]
        return out

    def _exact(self, text: str, target: int) -> tuple[str, int]:
        """``text`` when it is ``target`` tokens, else a text of ``target`` tokens made
        from its ids (decode, re-encode, cut or extend, repeat): (text, its token count)."""
        if target <= 0:
            return "", 0
        counter = self.counter
        got = counter.encode(text)
        for _ in range(MAX_FIXUPS):
            if len(got) == target:
                return text, target
            if len(got) > target:  # cut, and draw the last token afresh: a cut can split a merge
                ids = got[: target - 1] + self._circular(self._id_pool, 1)
            else:
                ids = got + self._circular(self._id_pool, target - len(got))
            text = counter.decode(ids)
            got = counter.encode(text)
        return text, len(got)

    def _fraction(self) -> float:
        """A uniform number in [0, 1), drawn in batches."""
        if not self._uniform:
            self._uniform = self._rng.random(1024).tolist()[::-1]
        return self._uniform.pop()


class _DatasetWalker:
    """Walks a dataset's user turns: conversations in order (or at random), turns in order."""

    def __init__(self, spec: LLMSpec, rng: np.random.Generator, counter: TokenCounter):
        self._conversations = spec.dataset.conversations
        self._random = spec.dataset.order == "random"
        self._rng = rng
        self._counter = counter
        self._counts: dict[tuple[int, int], tuple[int, int | None]] = {}
        self._conversation = -1
        self._turns: list[int] = []  # indices of the current conversation's user messages
        self._turn = 0

    def next(self) -> tuple[tuple[int, int], list[dict], int, int | None]:
        """((conversation, turn), messages with history, prompt tokens, recorded reply tokens or None)."""
        if self._turn >= len(self._turns):
            self._start_next_conversation()
        conversation = self._conversations[self._conversation]
        at = self._turns[self._turn]
        key = (self._conversation, self._turn)
        self._turn += 1
        messages = [{"role": role, "content": content} for role, content in conversation[: at + 1]]
        counts = self._counts.get(key)
        if counts is None:
            prompt = sum(self._counter.count(content) for _, content in conversation[: at + 1])
            reply = (self._counter.count(conversation[at + 1][1])
                     if at + 1 < len(conversation) and conversation[at + 1][0] == "assistant" else None)
            counts = self._counts[key] = (prompt, reply or None)
        return key, messages, counts[0], counts[1]

    def conversation_script(self) -> tuple[list[tuple[str, str]], list[tuple[str, int, int | None]]]:
        """The next conversation for a session: its messages before the first user message (its
        system prompt: ``(role, content)``), and its user turns: (text, its count, the recorded
        reply's count or None), in order; the recorded replies themselves are never sent."""
        self._start_next_conversation()
        conversation = self._conversations[self._conversation]
        prelude = [(role, content) for role, content in conversation[: self._turns[0]] if role == "system"]
        script = []
        for at in self._turns:
            role, content = conversation[at]
            reply = (self._counter.count(conversation[at + 1][1])
                     if at + 1 < len(conversation) and conversation[at + 1][0] == "assistant" else None)
            script.append((content, self._counter.count(content), reply or None))
        self._turns = []  # the sequential walk moves on to the next conversation
        return prelude, script

    def _start_next_conversation(self) -> None:
        count = len(self._conversations)
        if self._random:
            self._conversation = int(self._rng.integers(0, count))
        else:
            self._conversation = (self._conversation + 1) % count
        conversation = self._conversations[self._conversation]
        self._turns = [i for i, (role, _) in enumerate(conversation) if role == "user"]
        self._turn = 0


def one_token_words(counter: TokenCounter, ids: list[int]) -> list[str]:
    """``" word"`` for each of ``ids`` whose decoded text, stripped and written
    after one space, is one token, alone and after another word (no inner
    space, not empty). Cost: three encodes per id."""
    units = []
    base = len(counter.encode("a"))
    for token_id in ids:
        word = counter.decode([token_id]).strip()
        if not word or any(c.isspace() for c in word):
            continue
        unit = " " + word
        if len(counter.encode(unit)) == 1 and len(counter.encode("a" + unit)) == base + 1:
            units.append(unit)
    return units


def word_pool(rng: np.random.Generator, n_words: int) -> tuple[bytes, list[int]]:
    """``n_words`` random words (2–7 lowercase letters) from a vocabulary of
    :data:`VOCABULARY_WORDS`, as ``(bytes "w1 w2 … wn ", start offsets)``:
    word ``i`` is ``pool[starts[i]: starts[i + 1] - 1]``."""
    vocabulary = [random_word(rng) for _ in range(VOCABULARY_WORDS)]
    picks = rng.integers(0, VOCABULARY_WORDS, size=n_words)
    words = [vocabulary[i] for i in picks.tolist()]
    starts = [0]
    for word in words:
        starts.append(starts[-1] + len(word) + 1)
    return (b" ".join(words) + b" "), starts


def random_word(rng: np.random.Generator) -> bytes:
    """One word of 2–7 random lowercase letters."""
    length = int(rng.integers(2, 8))
    return rng.integers(ord("a"), ord("z") + 1, size=length, dtype=np.uint8).tobytes()


def random_words(rng: np.random.Generator, n: int) -> str:
    """``n`` random words separated by single spaces ("" for 0)."""
    return b" ".join(random_word(rng) for _ in range(n)).decode("ascii")
