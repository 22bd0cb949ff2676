"""Reading the recorded data a scenario can replay: arrival logs, sizes, bodies.

No Locust or gevent import. Each loader reads the whole file once, before
any load is sent, and rejects the first bad line with a :class:`DataFileError`
naming the file and the line (``arrivals.txt:17: ...``). Blank lines and
lines starting with ``#`` are skipped in the text formats.

- :func:`load_arrival_log`: one number per line, in ``unit`` (s, ms, us, ns):
  absolute ``timestamps`` (any origin, non-decreasing; e.g. epoch seconds from
  an access log) or inter-arrival ``gaps``. Returns int64 ns offsets from the
  first arrival. Memory: 8 bytes per arrival.
- :func:`load_sizes`: one non-negative integer (bytes) per line.
- :func:`load_bodies`: JSON lines, each a complete JSON document sent verbatim
  (its bytes as they are in the file, without the line break).
- :func:`load_conversations`: JSON lines of chat conversations (OpenAI
  ``messages`` or ShareGPT ``conversations``), or one JSON array of them.
"""

from __future__ import annotations

import json
import os

import numpy as np

TIME_UNITS_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


class DataFileError(ValueError):
    """A data file that cannot be used. ``str()`` is ``path:line: message``
    (``line`` 0 when the problem is the file as a whole)."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.line = line
        self.message = message


def _lines(path: str):
    """(line number, stripped text) of every non-blank, non-comment line."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DataFileError(path, number, "not UTF-8 text") from None
            if text and not text.startswith("#"):
                yield number, text


def load_arrival_log(path: str | os.PathLike, fmt: str = "timestamps", unit: str = "s") -> np.ndarray:
    """Send offsets (int64 ns from the first arrival, non-decreasing) from an arrival log."""
    path = os.fspath(path)
    if unit not in TIME_UNITS_NS:
        raise DataFileError(path, 0, f"unknown time unit {unit!r}; expected one of {', '.join(TIME_UNITS_NS)}")
    if fmt not in ("timestamps", "gaps"):
        raise DataFileError(path, 0, f"unknown format {fmt!r}; expected timestamps or gaps")
    scale = TIME_UNITS_NS[unit]
    values: list[float] = []
    previous = None
    for number, text in _lines(path):
        try:
            value = float(text.split()[0].rstrip(","))
        except ValueError:
            raise DataFileError(path, number, f"expected a number ({unit}), got {text[:40]!r}") from None
        if not np.isfinite(value):
            raise DataFileError(path, number, f"expected a finite number, got {text[:40]!r}")
        if fmt == "gaps" and value < 0:
            raise DataFileError(path, number, f"a gap must be >= 0, got {value:g}")
        if fmt == "timestamps" and previous is not None and value < previous:
            raise DataFileError(path, number, f"timestamps must not decrease ({value:g} after {previous:g})")
        previous = value
        values.append(value)
    if not values:
        raise DataFileError(path, 0, "no arrivals in the file")
    array = np.asarray(values, dtype=np.float64)
    offsets = np.cumsum(array) - array[0] if fmt == "gaps" else array - array[0]
    return np.rint(offsets * scale).astype(np.int64)


def load_sizes(path: str | os.PathLike) -> np.ndarray:
    """Sizes in bytes (int64), one per line, for an empirical size distribution."""
    path = os.fspath(path)
    sizes = []
    for number, text in _lines(path):
        try:
            size = int(text.split()[0].rstrip(","))
        except ValueError:
            raise DataFileError(path, number, f"expected a size in bytes (an integer), got {text[:40]!r}") from None
        if size < 0:
            raise DataFileError(path, number, f"a size must be >= 0, got {size}")
        sizes.append(size)
    if not sizes:
        raise DataFileError(path, 0, "no sizes in the file")
    return np.asarray(sizes, dtype=np.int64)


def load_bodies(path: str | os.PathLike) -> tuple[bytes, ...]:
    """Request bodies from a JSON-lines file, each checked to be valid JSON."""
    path = os.fspath(path)
    bodies = []
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise DataFileError(path, number, f"not a JSON document: {exc}") from None
            bodies.append(bytes(line))
    if not bodies:
        raise DataFileError(path, 0, "no bodies in the file")
    return tuple(bodies)


#: ShareGPT speaker names (``from``) and OpenAI roles, mapped to OpenAI roles.
_SPEAKERS = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "model": "assistant",
             "system": "system"}


def load_conversations(path: str | os.PathLike) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Conversations to replay, each a tuple of ``(role, content)`` messages
    (role ``system``, ``user`` or ``assistant``), from a JSONL file whose every
    line is one of:

    - ``{"messages": [{"role": "user", "content": "..."}, ...]}`` (OpenAI chat;
      ``content`` a string or a list of ``{"type": "text", "text": ...}`` parts);
    - ``{"conversations": [{"from": "human", "value": "..."}, ...]}`` (ShareGPT:
      ``human``/``gpt``/``system``; ``role``/``content`` keys are accepted too);
    - ``{"prompt": "..."}`` (one user turn).

    A file whose first character is ``[`` is read as one JSON array of such
    objects (ShareGPT's own files), its items numbered from 1 in errors.
    Every conversation needs at least one user message. Memory: the text of
    the whole file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataFileError(path, line, "not UTF-8 text") from None
    if text.lstrip()[:1] == "[":
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise DataFileError(path, getattr(exc, "lineno", 0), f"not a JSON array: {exc}") from None
        numbered = [(f"item {i}", item) for i, item in enumerate(items, 1)]
    else:
        numbered = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                numbered.append((number, json.loads(line)))
            except ValueError as exc:
                raise DataFileError(path, number, f"not a JSON document: {exc}") from None
    conversations = []
    for where, item in numbered:
        try:
            conversations.append(_conversation(item))
        except ValueError as exc:
            if isinstance(where, int):
                raise DataFileError(path, where, str(exc)) from None
            raise DataFileError(path, 0, f"{where}: {exc}") from None
    if not conversations:
        raise DataFileError(path, 0, "no conversations in the file")
    return tuple(conversations)


def _conversation(item) -> tuple[tuple[str, str], ...]:
    """One conversation's ``(role, content)`` messages; ValueError names what is wrong."""
    if not isinstance(item, dict):
        raise ValueError(f"expected a JSON object with messages or conversations, got {type(item).__name__}")
    if isinstance(item.get("prompt"), str) and "messages" not in item and "conversations" not in item:
        return (("user", item["prompt"]),)
    entries = item.get("messages", item.get("conversations"))
    if not isinstance(entries, list) or not entries:
        raise ValueError("expected a non-empty 'messages' (OpenAI) or 'conversations' (ShareGPT) list")
    messages = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"message {index}: expected an object, got {type(entry).__name__}")
        speaker = entry.get("role", entry.get("from"))
        role = _SPEAKERS.get(str(speaker).lower()) if isinstance(speaker, str) else None
        if role is None:
            raise ValueError(f"message {index}: unknown role {speaker!r}; expected user/assistant/system "
                             "(or ShareGPT's human/gpt)")
        messages.append((role, _message_text(entry.get("content", entry.get("value")), index)))
    if not any(role == "user" for role, _ in messages):
        raise ValueError("the conversation has no user message")
    return tuple(messages)


def _message_text(content, index: int) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ValueError(f"message {index}: content must be a string or a list of text parts")
