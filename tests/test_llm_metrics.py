"""Token-level metrics (tailscope.analyzers.stats.llm_metrics) on hand-computed cases,
and the 1.2 run-format columns: old chunk files read as one token per chunk,
old writers of 14-column request rows still fit."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from tailscope.analyzers.stats.llm_metrics import (
    aggregate_output_tokens_per_s,
    chunk_tokens,
    itl_samples_by_request_ns,
    itl_samples_ns,
    output_tokens_per_s,
    tpot_ns,
    tpot_ns_array,
    ttft_ns,
    ttft_ns_array,
)
from tailscope.rundir import Appender, read_stream, schema

MS = 1_000_000


def test_ttft_and_tpot():
    assert ttft_ns(1_000, 51_000) == 50_000 and ttft_ns(1_000, None) is None
    # 11 tokens, first at 100 ms, last at 300 ms: 10 gaps over 200 ms
    assert tpot_ns(100 * MS, 300 * MS, 11) == 20 * MS
    assert tpot_ns(100 * MS, 100 * MS, 1) is None and tpot_ns(None, 5, 3) is None
    tpot = tpot_ns_array(np.array([100 * MS, 0, 5]), pa.array([300 * MS, None, 9]), [11, 4, 1])
    assert tpot[0] == 20 * MS and math.isnan(tpot[1]) and math.isnan(tpot[2])
    ttft = ttft_ns_array(pa.array([0, 10]), pa.array([40, None]))
    assert ttft[0] == 40 and math.isnan(ttft[1])


def test_itl_spreads_a_chunk_over_its_tokens():
    # chunks at 0 (2 tokens), 30 ms (3 tokens), 40 ms (1 token), 100 ms (0 tokens), 120 ms (2 tokens)
    times = [0, 30 * MS, 40 * MS, 100 * MS, 120 * MS]
    samples = itl_samples_ns(times, [2, 3, 1, 0, 2])
    assert samples.tolist() == [10 * MS] * 3 + [10 * MS] + [40 * MS] * 2
    assert itl_samples_ns(times).tolist() == [30 * MS, 10 * MS, 60 * MS, 20 * MS]  # one token per chunk
    assert itl_samples_ns([5]).size == 0 and itl_samples_ns([]).size == 0
    # the mean ITL over tokens after the first chunk = (last - first) / those tokens
    assert samples.mean() == pytest.approx(120 * MS / 6)


def test_itl_of_many_requests_from_chunk_columns():
    rng = np.random.default_rng(3)
    rows, expected = [], []
    for r in range(20):
        n = int(rng.integers(1, 12))
        times = np.cumsum(rng.integers(1, 50, size=n)) * MS
        tokens = rng.integers(0, 5, size=n)
        expected.append(itl_samples_ns(times, tokens))
        rows += [(f"{r:032x}", i, int(t), int(k)) for i, (t, k) in enumerate(zip(times, tokens))]
    order = rng.permutation(len(rows))
    trace, index, t_ns, tokens = zip(*(rows[i] for i in order))
    got = itl_samples_by_request_ns(list(trace), list(index), list(t_ns), pa.array(tokens, pa.int32()))
    assert sorted(got.tolist()) == sorted(np.concatenate(expected).tolist())


def test_chunk_tokens_reads_nulls_as_one():
    assert chunk_tokens(pa.array([3, None, 2], pa.int32())).tolist() == [3, 1, 2]
    assert chunk_tokens([None, 4]).tolist() == [1, 4]
    assert chunk_tokens(pa.chunked_array([[None], [5]], pa.int32())).tolist() == [1, 5]


def test_output_rates():
    rate = output_tokens_per_s([100, None, 5], pa.array([2_000 * MS, 1_000 * MS, 0]))
    assert rate[0] == 50 and math.isnan(rate[1]) and math.isnan(rate[2])
    assert aggregate_output_tokens_per_s(pa.array([100, None, 300]), 0, 4 * 1_000 * MS) == 100
    assert aggregate_output_tokens_per_s([1], 5, 5) == 0.0


def test_old_chunk_files_and_short_request_rows_still_read(tmp_path):
    old_chunks = pa.schema([("trace_id", pa.string()), ("index", pa.int32()), ("t_ns", pa.int64())])
    path = tmp_path / schema.CHUNKS
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, old_chunks) as writer:
        writer.write_table(pa.table({"trace_id": ["a", "a"], "index": [0, 1], "t_ns": [5, 9]}, schema=old_chunks))
    table = read_stream(path, schema.CHUNKS_SCHEMA).table
    assert table.column("tokens").null_count == 2
    assert itl_samples_ns(table.column("t_ns").to_pylist(), table.column("tokens")).tolist() == [4.0]
    # a writer that predates the token columns appends 14 values: the rest are null
    requests = Appender(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA)
    requests.append(1, 2, 3, None, "c", 200, 10, 20, "0" * 32, None, None, 0, None, 0)
    requests.append(1, 2, 3, 3, "c", 200, 10, 20, "1" * 32, None, None, 4, 1, 0, 7, 4, "usage", "stop", 3, None)
    requests.close()
    rows = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA).table.to_pylist()
    assert rows[0]["prompt_tokens"] is None and rows[0]["token_count_source"] is None
    assert rows[1]["output_tokens"] == 4 and rows[1]["finish_reason"] == "stop" and rows[1]["last_token_ns"] == 3
