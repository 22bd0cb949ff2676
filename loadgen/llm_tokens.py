"""Counting tokens on the client: a local Hugging Face tokenizer, or words.

No Locust or gevent import. ``tokenizer: PATH`` in an OpenAI-API class names
a ``tokenizer.json`` read with the ``tokenizers`` package (nothing is
downloaded); it is loaded once per process and path (:func:`load_tokenizer`).
Without one, a text's length is its number of whitespace-separated words, the
way the reference LLM server counts (one token per word).

Counts never include special tokens (``add_special_tokens=False``) nor a chat
template's framing: they are the tokens of the text itself. Cost: one
``encode`` per text (Rust; about 1 µs per token for BPE vocabularies).
"""

from __future__ import annotations

import os
import threading


class TokenizerError(ValueError):
    """A tokenizer that cannot be used: the package is missing, or the file is not one."""


_CACHE: dict[str, object] = {}
_CACHE_LOCK = threading.Lock()


def tokenizers_available() -> bool:
    """True when the ``tokenizers`` package can be imported."""
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def load_tokenizer(path: str | os.PathLike):
    """The ``tokenizers.Tokenizer`` in ``path`` (a ``tokenizer.json``), loaded once per process.

    Raises :class:`TokenizerError` naming the problem (package missing, file
    missing or not a tokenizer)."""
    path = os.path.abspath(os.fspath(path))
    with _CACHE_LOCK:
        if path in _CACHE:
            return _CACHE[path]
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError("the `tokenizers` package is needed to read a tokenizer.json "
                             "(python3 -m pip install tokenizers)") from None
    if not os.path.isfile(path):
        raise TokenizerError(f"{path}: no such file (a local Hugging Face tokenizer.json; nothing is downloaded)")
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # noqa: BLE001  (the Rust side raises plain Exception)
        raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({str(exc)[:200]})") from None
    with _CACHE_LOCK:
        _CACHE.setdefault(path, tokenizer)
        return _CACHE[path]


class TokenCounter:
    """Counts the tokens of texts: with a tokenizer when given, else words.

    ``exact`` is True with a tokenizer. Not thread-safe in its use of the
    tokenizer's state (none is kept); safe to share within one event loop."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self.exact = tokenizer is not None

    def count(self, text: str) -> int:
        """Tokens in ``text`` (words without a tokenizer)."""
        if not text:
            return 0
        if self.tokenizer is None:
            return len(text.split())
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (tokenizer only)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """Text of token ids (tokenizer only), special tokens left out."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def ordinary_ids(self) -> list[int]:
        """Ids of the vocabulary's ordinary tokens (added, special and unknown tokens left out), ascending."""
        vocab = self.tokenizer.get_vocab(with_added_tokens=False)
        added = set(self.tokenizer.get_added_tokens_decoder()) if hasattr(
            self.tokenizer, "get_added_tokens_decoder") else set()
        unknown = getattr(self.tokenizer.model, "unk_token", None)
        if unknown in vocab:
            added.add(vocab[unknown])
        return sorted(i for i in vocab.values() if i not in added)


def counter_for(path: str | None) -> TokenCounter:
    """A :class:`TokenCounter` for a class's ``tokenizer`` path (None: words)."""
    return TokenCounter(load_tokenizer(path) if path else None)
