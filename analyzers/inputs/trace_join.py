"""Joining W3C trace ids column-wise without hashing strings.

A trace id is 32 lowercase hex characters: four 8-byte words of its UTF-8 text.
The words are read as a zero-copy view of the Arrow data and mixed into one
uint64 key per id (a few integer operations); joins hash those keys
(``pyarrow.compute.index_in``) and every match is then confirmed on all four
words, so two different ids are never joined even when their keys collide.
Columns with nulls or with ids of another length take the plain string join.
Both paths give the same answers; the key path is 2–3× faster and builds no
hash table of strings (at 10 million requests and 30 million spans: seconds
and gigabytes saved). The same view gives :func:`sampled_mask`: which ids the
head-sampling rule picks, from their low 16 hex digits, without a string each;
:func:`hex64_values` reads span ids (16 hex digits) as their exact 64-bit values.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.rundir.retention_policy import sample_threshold, trace_sampled

#: Characters of a W3C trace id (16 bytes as lowercase hex).
ID_CHARS = 32
#: Characters of a span id (8 bytes as hex).
SPAN_ID_CHARS = 16
_WORDS = ID_CHARS // 8
#: Odd multipliers (from splitmix64) mixing the words of an id into its key.
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
#: Spans verified per block (bounds the temporaries of the verification to ~100 MB).
_BLOCK = 1 << 21


def _hex_digit_table() -> np.ndarray:
    """Value of each byte as a hex digit (either case); 255 for a byte that is not one."""
    table = np.full(256, 255, np.uint8)
    for digits, first in (("0123456789", 0), ("abcdef", 10), ("ABCDEF", 10)):
        table[np.frombuffer(digits.encode(), np.uint8)] = np.arange(first, first + len(digits))
    return table


_HEX_DIGIT = _hex_digit_table()


def _chunk_words(chunk: pa.Array) -> np.ndarray | None:
    """(n, 4) uint64 view of a string chunk whose every value has ID_CHARS bytes; None otherwise."""
    if chunk.type != pa.string() or chunk.null_count:
        return None
    n = len(chunk)
    if n == 0:
        return np.zeros((0, _WORDS), np.uint64)
    offsets = np.frombuffer(chunk.buffers()[1], np.int32, n + 1, chunk.offset * 4)
    if np.any(np.diff(offsets) != ID_CHARS):
        return None
    return np.frombuffer(chunk.buffers()[2], np.uint64, n * _WORDS, int(offsets[0])).reshape(n, _WORDS)


def id_words(ids: pa.ChunkedArray | pa.Array) -> list[np.ndarray] | None:
    """Per chunk, the (n, 4) uint64 words of every id; None when an id is null or not ID_CHARS long."""
    words = []
    for chunk in (ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]):
        view = _chunk_words(chunk)
        if view is None:
            return None
        words.append(view)
    return words


def id_keys(words: np.ndarray) -> np.ndarray:
    """One uint64 key per id (equal ids, equal keys; different ids rarely collide)."""
    key = words[:, 0] * _MIX[0]
    key ^= words[:, 1] * _MIX[1]
    key ^= words[:, 2] * _MIX[2]
    key ^= words[:, 3]
    return key


def _keys_of(words: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([id_keys(w) for w in words]) if words else np.zeros(0, np.uint64)


def _string_positions(values: pa.ChunkedArray | pa.Array, value_set: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(value_set, pa.ChunkedArray):
        value_set = value_set.combine_chunks()
    found = pc.fill_null(pc.index_in(values, value_set=value_set), -1)
    return found.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _distinct_keys(keys: np.ndarray) -> bool:
    """Whether no two keys are equal (a numpy sort: several times faster than a hash count)."""
    ordered = np.sort(keys)
    return not np.any(ordered[1:] == ordered[:-1])


def trace_positions(values: pa.ChunkedArray | pa.Array, value_set: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """For each of ``values`` (trace ids), the index in ``value_set`` of its first equal entry,
    -1 when there is none (nulls match nulls, as ``pyarrow.compute.index_in``).
    O(len(values) + len(value_set))."""
    position = distinct_positions(values, value_set)
    return _string_positions(values, value_set) if position is None else position


def distinct_positions(values: pa.ChunkedArray | pa.Array,
                       value_set: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """:func:`trace_positions` when the non-null ids of ``value_set`` are pairwise different;
    None when two of them are equal."""
    set_words, value_words = id_words(value_set), id_words(values)
    if set_words is None or value_words is None:
        if pc.count_distinct(value_set, mode="only_valid").as_py() != len(value_set) - value_set.null_count:
            return None
        return _string_positions(values, value_set)
    set_keys = _keys_of(set_words)
    if not _distinct_keys(set_keys):  # repeated ids, or a rare key collision between two ids
        if pc.count_distinct(value_set).as_py() != len(value_set):
            return None
        return _string_positions(values, value_set)
    found = pc.fill_null(pc.index_in(pa.array(_keys_of(value_words)), value_set=pa.array(set_keys)), -1)
    position = found.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    del set_keys
    _confirm(position, value_words, np.concatenate(set_words) if len(set_words) > 1 else set_words[0])
    return position


def _confirm(position: np.ndarray, value_words: list[np.ndarray], set_words: np.ndarray) -> None:
    """Set to -1 every position whose id differs from the value set's (a key collision), in place.

    With distinct set keys a key names at most one candidate, so a value whose words differ
    from its candidate's has no equal entry at all."""
    start = 0
    for words in value_words:
        for lo in range(0, len(words), _BLOCK):
            block = words[lo:lo + _BLOCK]
            pos = position[start + lo:start + lo + len(block)]
            hit = np.flatnonzero(pos >= 0)
            candidate = pos[hit]
            same = np.ones(len(hit), dtype=bool)
            for word in range(_WORDS):
                same &= block[hit, word] == set_words[candidate, word]
            pos[hit[~same]] = -1
        start += len(words)


def hex64_values(ids: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of 16-hex-digit ids (W3C / OTLP span ids): each id's exact 64-bit value
    (no hashing, so equal values are equal ids) and whether it was one — null, another length
    or a non-hex digit is not (its value is 0). One copy of the column's bytes, O(n)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.string())
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, dtype=bool)
    text = ids.cast(pa.string()) if ids.type != pa.string() else ids
    valid = pc.fill_null(pc.equal(pc.binary_length(text), SPAN_ID_CHARS), False)
    if not (text.null_count == 0 and pc.all(valid).as_py()):
        text = pc.if_else(valid, text, pa.scalar("0" * SPAN_ID_CHARS))
    first = int(np.frombuffer(text.buffers()[1], np.int32, 1, text.offset * 4)[0])
    raw = np.frombuffer(text.buffers()[2], np.uint8, n * SPAN_ID_CHARS, first).reshape(n, SPAN_ID_CHARS)
    # Branch-free hex: '0'-'9' are 0x30-0x39, 'a'-'f' / 'A'-'F' are 0x61-0x66 / 0x41-0x46, so a
    # digit's value is (c & 15) + 9 * (c >> 6); uint8 arithmetic wraps, so one compare bounds a range.
    is_hex = ((raw - np.uint8(0x30)) <= 9) | (((raw | np.uint8(0x20)) - np.uint8(0x61)) <= 5)
    ok = valid.to_numpy(zero_copy_only=False) & np.all(
        is_hex.view(np.uint64).reshape(n, SPAN_ID_CHARS // 8) == np.uint64(0x0101010101010101), axis=1)
    digits = (raw & np.uint8(15)) + np.uint8(9) * (raw >> np.uint8(6))
    packed = (digits[:, 0::2] << np.uint8(4)) | digits[:, 1::2]  # (n, 8) bytes, most significant first
    value = packed.view(">u8").ravel().astype(np.uint64)
    value[~ok] = 0
    return value, ok


def sampled_mask(ids: pa.ChunkedArray | pa.Array, rate: float) -> np.ndarray:
    """For each trace id, whether it is in the head-sampling / retention sample at ``rate``
    (:func:`tailscope.rundir.retention_policy.trace_sampled`, column-wise: the low 16 hex digits of
    each id read from a zero-copy view, O(n) integer operations). A null or malformed id is
    not sampled below rate 1."""
    if rate >= 1.0:
        return np.ones(len(ids), dtype=bool)
    out = []
    for chunk in (ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]):
        words = _chunk_words(chunk)
        if words is None:  # nulls or ids of another length: the rule one id at a time
            out.append(np.fromiter((trace_sampled(t, rate) for t in chunk.to_pylist()), bool, len(chunk)))
        else:
            out.append(_sampled_words(words, rate))
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)


def _sampled_words(words: np.ndarray, rate: float) -> np.ndarray:
    """:func:`sampled_mask` of one chunk's (n, 4) id words."""
    threshold = np.uint64(sample_threshold(max(rate, 0.0)))
    sampled = np.zeros(len(words), dtype=bool)
    for lo in range(0, len(words), _BLOCK):
        digits = _HEX_DIGIT[words[lo:lo + _BLOCK].view(np.uint8)[:, ID_CHARS // 2:]]
        low = np.zeros(len(digits), np.uint64)
        for column in range(digits.shape[1]):
            low = (low << np.uint64(4)) | digits[:, column].astype(np.uint64)
        sampled[lo:lo + len(digits)] = (low < threshold) & np.all(digits < 16, axis=1)
    return sampled
