"""The ``llm.sessions`` figures: multi-turn sessions (``arrival.sessions``), per turn and per session.

Pure numpy over ``requests.arrow``'s session columns (format 1.3: ``session_id``,
``turn`` — 1 the first —, ``session_turns``) and the streamed chunks already
joined to their requests (:class:`~.streaming.StreamTimes`). A run without any
session turn has no figures (``None``).

- ``by_turn``: one row per turn index 1 … :data:`MAX_TURN_ROWS` (the last row
  pools every later turn, ``"label": "20+"``): the turns sent, those that
  ended without error, their TTFT (:func:`~.percentiles.typed_percentile_set`, ms
  from the scheduled send, streamed turns) and the mean prompt tokens (the
  server's count, history included: it grows turn by turn). A server that
  caches the history's prefix answers a later turn's first token as fast as
  turn 1's although its prompt is longer; one that does not, slower as the
  history grows.
- ``ttft_first_turn_ms`` / ``ttft_later_turns_ms``: TTFT of turn 1 and of
  every later turn, pooled; ``ttft_later_vs_first``: the later turns' P50
  over turn 1's (None unless both P50s are claimed).
- ``duration_ms``: per *complete* session (every planned turn recorded and
  none failed) its turn 1's scheduled send to its last turn's end, ms
  (think times included) — a percentile set; ``turns``: ``{sum, mean, p50,
  p99}`` of the turns per complete session; ``prompt_tokens`` and
  ``output_tokens``: the same of the tokens per complete session (prompt
  tokens summed over its turns, each turn's history counted again, as the
  server processed them).
- ``sessions`` (distinct session ids), ``complete``, ``failed`` (a turn ended
  with an error: the session stopped there) and ``cut`` (neither: the run
  ended, or its records were sampled, before every turn).

Cost: O(n log n) (one sort by session id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tailscope.analysis_model.llm import Sessions, TokenStats, TurnRow
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column
from tailscope.analyzers.stats.percentiles import nearest_rank, typed_percentile_set

#: Turn indices with their own ``by_turn`` row; later turns share the last row.
MAX_TURN_ROWS = 20


@dataclass(frozen=True)
class SessionArrays:
    """The session columns of the request table, aligned with :class:`RequestArrays`."""

    is_turn: np.ndarray  # bool: the request is a session's turn
    session_id: np.ndarray  # int64, 0 where not a turn
    turn: np.ndarray  # int64, 1 = the first; 0 where not a turn
    session_turns: np.ndarray  # int64, the session's planned turns; 0 where not a turn


@dataclass(frozen=True)
class SessionTable:
    """One row per session (sorted by id): its first scheduled send and last end (epoch ns),
    the turns recorded, whether it is complete or failed, and its prompt and output tokens."""

    session_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    turns: np.ndarray
    complete: np.ndarray
    failed: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def session_arrays(requests: pa.Table) -> SessionArrays | None:
    """The session columns, or None when no row is a session's turn (or the run predates 1.3)."""
    if "session_id" not in requests.column_names or not len(requests):
        return None
    session_id, present = int_column(requests, "session_id")
    if not present.any():
        return None
    turn, _ = int_column(requests, "turn")
    planned, _ = int_column(requests, "session_turns")
    present = np.asarray(present, dtype=bool)
    return SessionArrays(is_turn=present, session_id=np.where(present, session_id, 0),
                         turn=np.where(present, turn, 0), session_turns=np.where(present, planned, 0))


def session_table(req: RequestArrays, sessions: SessionArrays, prompt_tokens: np.ndarray,
                  output_tokens: np.ndarray) -> SessionTable:
    """Per-session figures (:class:`SessionTable`) from the turns' rows; token arrays are float64
    with NaN where null (a failed turn's output counts as 0)."""
    rows = np.flatnonzero(sessions.is_turn)
    rows = rows[np.argsort(sessions.session_id[rows], kind="stable")]
    ids = sessions.session_id[rows]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, np.int64)
    counts = np.diff(np.r_[starts, len(ids)])

    def per(values: np.ndarray, reduce) -> np.ndarray:
        return reduce.reduceat(values, starts) if len(starts) else np.zeros(0, values.dtype)
    ok = req.is_ok[rows]
    failed = per((req.is_error[rows]).astype(np.int64), np.add) > 0
    turns_ok = per(ok.astype(np.int64), np.add)
    planned = per(sessions.session_turns[rows], np.maximum)
    distinct_turns = counts  # one row per turn index
    complete = (turns_ok == planned) & (distinct_turns == planned) & ~failed
    end = np.where(req.has_end[rows], req.end_ns[rows], np.iinfo(np.int64).min)
    return SessionTable(
        session_id=ids[starts] if len(ids) else ids,
        start_ns=per(req.scheduled_ns[rows], np.minimum),
        end_ns=per(end, np.maximum),
        turns=counts,
        complete=complete,
        failed=failed,
        prompt_tokens=per(np.nan_to_num(prompt_tokens[rows]), np.add),
        output_tokens=per(np.nan_to_num(output_tokens[rows]), np.add),
    )


def _stats(values: np.ndarray) -> TokenStats:
    """Sum, mean, P50 and P99 (nearest rank); Nones (and 0) when empty."""
    if not len(values):
        return TokenStats(sum=0, mean=None, p50=None, p99=None)
    ordered = np.sort(values.astype(np.float64))
    return TokenStats(sum=int(ordered.sum()), mean=float(ordered.mean()),
                      p50=float(ordered[nearest_rank(len(ordered), 0.50) - 1]),
                      p99=float(ordered[nearest_rank(len(ordered), 0.99) - 1]))


def turn_ttft_ms(sessions: SessionArrays, ttft_ms: np.ndarray, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT of turn 1, of every later turn), ms, over the turns ``usable`` selects."""
    has = usable & sessions.is_turn & ~np.isnan(ttft_ms)
    return ttft_ms[has & (sessions.turn == 1)], ttft_ms[has & (sessions.turn > 1)]


def sessions_section(req: RequestArrays, sessions: SessionArrays | None, ttft_ms: np.ndarray,
                     streamed: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> Sessions | None:
    """The ``llm.sessions`` figures (module docstring; analysis_model/llm.py ``Sessions``); None without session turns. ``ttft_ms``:
    per request TTFT (NaN where none); ``streamed``: the successful streamed requests."""
    if sessions is None:
        return None
    ok = req.is_ok
    by_turn = []
    last = int(sessions.turn.max())
    for index in range(1, min(last, MAX_TURN_ROWS) + 1):
        pooled = index == MAX_TURN_ROWS and last > MAX_TURN_ROWS
        mask = sessions.is_turn & ((sessions.turn >= index) if pooled else (sessions.turn == index))
        ttft = ttft_ms[mask & streamed]
        prompts = prompt_tokens[mask & ok]
        prompts = prompts[~np.isnan(prompts)]
        by_turn.append(TurnRow(
            turn=index, label=f"{index}+" if pooled else str(index),
            requests=int(mask.sum()), completed=int((mask & ok).sum()),
            ttft_ms=typed_percentile_set(ttft[~np.isnan(ttft)]),
            prompt_tokens_mean=float(prompts.mean()) if len(prompts) else None,
        ))
    first, later = turn_ttft_ms(sessions, ttft_ms, streamed)
    first_set, later_set = typed_percentile_set(first), typed_percentile_set(later)
    both = first_set.p50.claimed and later_set.p50.claimed and first_set.p50.value_ms
    table = session_table(req, sessions, prompt_tokens, output_tokens)
    done = table.complete
    return Sessions(
        sessions=int(len(table.session_id)),
        complete=int(done.sum()),
        failed=int(table.failed.sum()),
        cut=int((~done & ~table.failed).sum()),
        by_turn=by_turn,
        ttft_first_turn_ms=first_set,
        ttft_later_turns_ms=later_set,
        ttft_later_vs_first=(later_set.p50.value_ms / first_set.p50.value_ms) if both else None,
        duration_ms=typed_percentile_set((table.end_ns[done] - table.start_ns[done]) / NS_PER_MS),
        turns=_stats(table.turns[done]),
        prompt_tokens=_stats(table.prompt_tokens[done]),
        output_tokens=_stats(table.output_tokens[done]),
    )
