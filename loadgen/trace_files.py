"""Public LLM request traces, read for timed replay: Mooncake (FAST'25), Azure LLM inference, BurstGPT.

No Locust or gevent import. Each reader reads the whole file once, before any
load is sent, and rejects the first bad row with a
:class:`~.datafiles.DataFileError` naming the file and the line
(``trace.csv:17: ContextTokens: expected an integer >= 0, got 'x'``). The
formats, as the projects that publish them define them:

- ``mooncake`` — kvcache-ai/Mooncake ``FAST25-release/traces`` (and AIPerf's
  ``mooncake_trace``): JSON lines ``{"timestamp": ms, "input_length": tokens,
  "output_length": tokens, "hash_ids": [int, ...]}``; ``timestamp`` is the
  arrival in milliseconds since the first request; ``hash_ids`` name the
  prompt's blocks of ``block_tokens`` (512) tokens, equal ids meaning equal
  blocks (a shared prefix). Other keys are ignored.
- ``azure`` — Azure/AzurePublicDataset ``AzureLLMInferenceTrace_{code,conv}``
  (2023) and the 2024 week-long traces: CSV with the header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` a wall-clock
  time ``YYYY-MM-DD HH:MM:SS[.fraction]`` (up to 9 digits; a ``Z`` or
  ``+HH:MM`` zone accepted, none read as UTC).
- ``burstgpt`` — HPMLL/BurstGPT ``data/BurstGPT_*.csv``: CSV with the header
  ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
  (columns found by name, in any order); ``Timestamp`` seconds from 0:00:00 of
  the trace's first day. Rows with 0 ``Response tokens`` (the failed requests
  BurstGPT_1.csv and BurstGPT_2.csv keep) are left out and counted
  (:attr:`TraceRequests.skipped`).

Rows are put in time order (a stable sort: rows with equal times keep their
file order). Offsets are int64 ns from the first kept row. Memory: about 24
bytes per row plus the hash ids (Python ints).
"""

from __future__ import annotations

import calendar
import csv
import json
import os
import re
from dataclasses import dataclass

import numpy as np

from tailscope.loadgen.datafiles import DataFileError

#: Trace formats :func:`load_trace` reads, in the order errors list them.
TRACE_FORMATS = ("mooncake", "azure", "burstgpt")
#: Tokens per hash-id block in Mooncake traces (the FAST'25 release's block size).
MOONCAKE_BLOCK_TOKENS = 512
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_AZURE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True, eq=False)
class TraceRequests:
    """What each row of a replayed trace asks for, in arrival order (row ``i`` is the
    ``i``-th arrival of the replayed log).

    ``input_tokens`` / ``output_tokens``: int64 arrays, tokens. ``hash_ids``
    (Mooncake only, else None): each row's prompt blocks, ``block_tokens`` tokens
    each; the last block of a row may be cut short by ``input_tokens``.
    ``models``: BurstGPT's ``Model`` column (else None). ``skipped``: rows left
    out (BurstGPT failures)."""

    format: str
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    models: tuple[str, ...] | None = None
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.input_tokens)

    def take(self, rows: np.ndarray) -> TraceRequests:
        """The rows ``rows`` (an index array), in that order."""
        pick = rows.tolist()
        return TraceRequests(
            self.format, self.input_tokens[rows], self.output_tokens[rows],
            tuple(self.hash_ids[i] for i in pick) if self.hash_ids is not None else None,
            self.block_tokens, tuple(self.models[i] for i in pick) if self.models is not None else None,
            self.skipped)

    def describe(self) -> dict:
        """Plain JSON values for the manifest: rows, token totals, hash-id reuse (Mooncake)."""
        out = {"format": self.format, "rows": len(self), "skipped_rows": self.skipped,
               "input_tokens": int(self.input_tokens.sum()), "output_tokens": int(self.output_tokens.sum())}
        if self.hash_ids is not None:
            reused, total = hash_id_reuse(self.hash_ids)
            out.update(block_tokens=self.block_tokens, blocks=total, reused_blocks=reused,
                       block_reuse=round(reused / total, 6) if total else None)
        if self.models is not None:
            out["models"] = sorted(set(self.models))
        return out


def hash_id_reuse(hash_ids) -> tuple[int, int]:
    """(block references that repeat an earlier one, all block references) over rows in order:
    the trace's prefix-cache reuse as an unbounded cache would see it."""
    seen: set[int] = set()
    reused = total = 0
    for row in hash_ids:
        for block in row:
            total += 1
            if block in seen:
                reused += 1
            else:
                seen.add(block)
    return reused, total


def load_trace(path: str | os.PathLike, fmt: str,
               block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> tuple[np.ndarray, TraceRequests]:
    """(int64 ns offsets from the first row, non-decreasing; the rows' requests) of a trace file."""
    path = os.fspath(path)
    if fmt not in TRACE_FORMATS:
        raise DataFileError(path, 0, f"unknown trace format {fmt!r}; expected one of {', '.join(TRACE_FORMATS)}")
    if fmt == "mooncake":
        times_ns, inputs, outputs, hash_ids, models, skipped = _read_mooncake(path)
    else:
        times_ns, inputs, outputs, hash_ids, models, skipped = _read_csv(path, fmt)
    if not times_ns:
        raise DataFileError(path, 0, "no requests in the trace")
    times = np.asarray(times_ns, dtype=np.int64)
    order = np.argsort(times, kind="stable")
    requests = TraceRequests(fmt, np.asarray(inputs, dtype=np.int64), np.asarray(outputs, dtype=np.int64),
                             tuple(hash_ids) if hash_ids is not None else None, block_tokens,
                             tuple(models) if models is not None else None, skipped)
    if not np.all(order == np.arange(len(order))):
        requests = requests.take(order)
        times = times[order]
    return times - times[0], requests


def slice_trace(offsets_ns: np.ndarray, requests: TraceRequests, start_ns: int,
                end_ns: int | None) -> tuple[np.ndarray, TraceRequests]:
    """The rows whose offset is in ``[start_ns, end_ns)`` (``end_ns`` None: to the end), their
    offsets counted from the first of them. Raises ``ValueError`` when none is inside."""
    first = int(np.searchsorted(offsets_ns, start_ns, side="left"))
    last = len(offsets_ns) if end_ns is None else int(np.searchsorted(offsets_ns, end_ns, side="left"))
    if last <= first:
        raise ValueError("no request of the trace falls inside the slice")
    kept = offsets_ns[first:last]
    return kept - kept[0], requests.take(np.arange(first, last))


def _count(value, line: int, path: str, name: str, minimum: int = 0) -> int:
    """An integer token count >= ``minimum`` (a float with no fraction accepted, as CSV exports write them)."""
    number = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise DataFileError(path, line, f"{name}: expected an integer >= {minimum}, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number != number \
            or int(number) != number or number < minimum:
        raise DataFileError(path, line, f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(number)


def _read_mooncake(path: str):
    times, inputs, outputs, hash_ids = [], [], [], []
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            try:
                row = json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise DataFileError(path, number, f"not a JSON document: {exc}") from None
            if not isinstance(row, dict):
                raise DataFileError(path, number, "expected a JSON object with timestamp, input_length, "
                                                  "output_length, hash_ids")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in row:
                    raise DataFileError(path, number, f"{key}: missing")
            stamp = row["timestamp"]
            if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not np.isfinite(stamp) or stamp < 0:
                raise DataFileError(path, number, f"timestamp: expected milliseconds >= 0, got {stamp!r}")
            blocks = row.get("hash_ids", [])
            if not isinstance(blocks, list) or not all(
                    isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in blocks):
                raise DataFileError(path, number, f"hash_ids: expected a list of integers >= 0, got {blocks!r}"[:200])
            times.append(int(round(stamp * 1_000_000)))
            inputs.append(_count(row["input_length"], number, path, "input_length", 1))
            outputs.append(_count(row["output_length"], number, path, "output_length", 1))
            hash_ids.append(tuple(blocks))
    return times, inputs, outputs, hash_ids, None, 0


def _read_csv(path: str, fmt: str):
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    times, inputs, outputs, models = [], [], [], []
    skipped = 0
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DataFileError(path, 1, f"not CSV text: {exc}") from None
        if header is None:
            raise DataFileError(path, 0, "no requests in the trace")
        names = [name.strip().lstrip("\ufeff") for name in header]
        wanted = AZURE_COLUMNS if fmt == "azure" else BURSTGPT_COLUMNS
        missing = [name for name in wanted if name not in names]
        if missing:
            raise DataFileError(path, 1, f"the header lacks {', '.join(missing)} (a {fmt} trace has "
                                         f"{', '.join(wanted)}); got {', '.join(names)[:200]}")
        time_at, input_at, output_at = (names.index(name) for name in wanted)
        model_at = names.index("Model") if fmt == "burstgpt" and "Model" in names else None
        width = max(time_at, input_at, output_at, model_at or 0) + 1
        try:
            for row in reader:
                number = reader.line_num
                if not row or not any(cell.strip() for cell in row):
                    continue
                if len(row) < width:
                    raise DataFileError(path, number, f"expected {len(names)} columns, got {len(row)}")
                if fmt == "azure":
                    stamp = _azure_time_ns(row[time_at], path, number)
                else:
                    stamp = _seconds_ns(row[time_at], path, number)
                prompt = _count(row[input_at], number, path, wanted[1], 1)
                output = _count(row[output_at], number, path, wanted[2], 0)
                if output == 0:
                    if fmt == "burstgpt":
                        skipped += 1
                        continue
                    raise DataFileError(path, number, f"{wanted[2]}: expected an integer >= 1, got 0")
                times.append(stamp)
                inputs.append(prompt)
                outputs.append(output)
                if model_at is not None:
                    models.append(row[model_at].strip())
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DataFileError(path, reader.line_num, f"not CSV text: {exc}") from None
    return times, inputs, outputs, None, (models if model_at is not None else None), skipped


def _seconds_ns(text: str, path: str, line: int) -> int:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value) or value < 0:
        raise DataFileError(path, line, f"Timestamp: expected seconds >= 0, got {text!r}")
    return int(round(value * 1e9))


def _azure_time_ns(text: str, path: str, line: int) -> int:
    """Epoch ns of an Azure trace's ``TIMESTAMP`` (exact to the ns: the fraction is read as digits)."""
    match = _AZURE_TIME.match(text.strip())
    if match is None:
        raise DataFileError(path, line, f"TIMESTAMP: expected YYYY-MM-DD HH:MM:SS[.fraction], got {text!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        seconds = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second)))
    except (ValueError, OverflowError):
        raise DataFileError(path, line, f"TIMESTAMP: not a date and time, got {text!r}") from None
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31 and int(hour) < 24 and int(minute) < 60
            and int(second) < 61):
        raise DataFileError(path, line, f"TIMESTAMP: not a date and time, got {text!r}")
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))
