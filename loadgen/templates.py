"""Body templates with random fields: ``{"user": {{int:1:100}}, "q": "{{text:40}}"}``.

No Locust or gevent import. A template is literal text with fields in double
braces; every request gets fresh values, drawn from the class's seeded
generator (same seed, same bodies):

| field | value |
| --- | --- |
| ``{{int:LO:HI}}`` | an integer in [LO, HI] |
| ``{{float:LO:HI}}`` | a number in [LO, HI), 4 decimals |
| ``{{choice:a|b|c}}`` | one of the options, equally likely (``|`` separates them) |
| ``{{text:N}}`` | N characters of random lowercase words |
| ``{{text:MIN:MAX}}`` | random words, length uniform in [MIN, MAX] |
| ``{{text}}`` | random words, length from the payload's ``size`` |
| ``{{uuid}}`` | a random UUID (version 4 layout) |

Text is ASCII letters and spaces, so it needs no JSON escaping. A ``{{``
always opens a field; an unknown or malformed field is a :class:`TemplateError`
naming it. Cost per request: one join of the parts; random values are drawn
in batches of ``DRAW_BATCH``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Random values drawn per batch, per field.
DRAW_BATCH = 1024
#: Longest text a ``{{text:...}}`` field may ask for, characters.
MAX_TEXT_CHARS = 1 << 20

_FIELD = re.compile(r"\{\{(.*?)\}\}", re.S)
_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)$")


class TemplateError(ValueError):
    """A template that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Field:
    """One parsed field: its ``kind`` and arguments."""

    kind: str  # int | float | choice | text | uuid
    args: tuple = ()
    source: str = ""  # the field as written, for messages


def parse_template(text: str) -> list:
    """The template as a list of literal ``str`` parts and :class:`Field` values."""
    if not isinstance(text, str) or not text:
        raise TemplateError("a template payload needs a non-empty body")
    parts: list = []
    position = 0
    for match in _FIELD.finditer(text):
        if match.start() > position:
            parts.append(text[position:match.start()])
        parts.append(_parse_field(match.group(1).strip(), match.group(0)))
        position = match.end()
    rest = text[position:]
    if "{{" in rest:
        raise TemplateError(f"unclosed field starting at {rest[rest.index('{{'):][:30]!r}")
    if rest:
        parts.append(rest)
    return parts


def _parse_field(body: str, source: str) -> Field:
    name, _, arguments = body.partition(":")
    name = name.strip()
    if name == "uuid" and not arguments:
        return Field("uuid", (), source)
    if name == "text":
        return _text_field(arguments, source)
    if name == "choice":
        if not arguments:
            raise TemplateError(f"{source}: expected {{{{choice:a|b|...}}}} with at least one option")
        return Field("choice", tuple(arguments.split("|")), source)
    if name in ("int", "float"):
        bounds = arguments.split(":")
        pattern = _INT if name == "int" else _NUMBER
        if len(bounds) != 2 or not all(pattern.match(b.strip()) for b in bounds):
            raise TemplateError(f"{source}: expected {{{{{name}:LO:HI}}}} with two {name} bounds")
        low, high = (int(b) if name == "int" else float(b) for b in bounds)
        if high < low:
            raise TemplateError(f"{source}: HI ({high}) is below LO ({low})")
        return Field(name, (low, high), source)
    raise TemplateError(f"{source}: unknown field {name!r}; expected int, float, choice, text or uuid")


def _text_field(arguments: str, source: str) -> Field:
    if not arguments:
        return Field("text", (), source)
    bounds = arguments.split(":")
    if len(bounds) not in (1, 2) or not all(_INT.match(b.strip()) for b in bounds):
        raise TemplateError(f"{source}: expected {{{{text}}}}, {{{{text:N}}}} or {{{{text:MIN:MAX}}}}")
    low, high = int(bounds[0]), int(bounds[-1])
    if low < 0 or high < low or high > MAX_TEXT_CHARS:
        raise TemplateError(f"{source}: text length must be 0..{MAX_TEXT_CHARS} with MIN <= MAX")
    return Field("text", (low, high), source)


class _Batched:
    """Serves values one by one from batches made by ``draw()``."""

    def __init__(self, draw: Callable[[], list]):
        self._draw = draw
        self._values: list = []
        self._next = 0

    def __call__(self):
        if self._next >= len(self._values):
            self._values = self._draw()
            self._next = 0
        value = self._values[self._next]
        self._next += 1
        return value


class TemplateMaker:
    """Fills a template per request. ``text_pool`` is random words (bytes, at
    least as long as the longest text field plus some); ``draw_size`` gives a
    length for a bare ``{{text}}``. Not thread-safe."""

    def __init__(self, template: str, rng: np.random.Generator, text_pool: bytes,
                 draw_size: Callable[[], int]):
        self._rng = rng
        self._pool = text_pool
        self._makers = [self._maker(part, draw_size) if isinstance(part, Field)
                        else (lambda literal=part.encode("utf-8"): literal)
                        for part in parse_template(template)]

    @staticmethod
    def longest_text(template: str) -> int:
        """The longest fixed-length text field of ``template``, characters."""
        return max((p.args[1] for p in parse_template(template) if isinstance(p, Field)
                    and p.kind == "text" and p.args), default=0)

    def make(self) -> bytes:
        """One body, bytes."""
        return b"".join(maker() for maker in self._makers)

    def _maker(self, spec: Field, draw_size: Callable[[], int]) -> Callable[[], bytes]:
        rng = self._rng
        if spec.kind == "int":
            low, high = spec.args
            ints = _Batched(lambda: rng.integers(low, high, size=DRAW_BATCH, endpoint=True).tolist())
            return lambda: str(ints()).encode()
        if spec.kind == "float":
            low, high = spec.args
            floats = _Batched(lambda: rng.uniform(low, high, size=DRAW_BATCH).tolist())
            return lambda: f"{floats():.4f}".encode()
        if spec.kind == "choice":
            options = [o.encode("utf-8") for o in spec.args]
            picks = _Batched(lambda: rng.integers(0, len(options), size=DRAW_BATCH).tolist())
            return lambda: options[picks()]
        if spec.kind == "uuid":
            return self._uuid_maker()
        if spec.args:
            low, high = spec.args
            lengths = _Batched(lambda: rng.integers(low, high, size=DRAW_BATCH, endpoint=True).tolist())
            return lambda: self._text(lengths())
        return lambda: self._text(draw_size())

    def _text(self, length: int) -> bytes:
        length = min(length, len(self._pool))
        start = int(self._rng.integers(0, len(self._pool) - length + 1))
        return self._pool[start:start + length]

    def _uuid_maker(self) -> Callable[[], bytes]:
        rng = self._rng

        def draw() -> list:
            raw = rng.integers(0, 256, size=(DRAW_BATCH, 16), dtype=np.uint8)
            raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
            raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
            return [_uuid_text(row.tobytes()) for row in raw]

        uuids = _Batched(draw)
        return uuids


def _uuid_text(raw: bytes) -> bytes:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode()
