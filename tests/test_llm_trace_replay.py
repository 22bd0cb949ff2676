"""Timed replay of public LLM traces (Mooncake, Azure, BurstGPT): readers, scenario fields,
prompts whose shared blocks follow Mooncake's hash ids, and a replay against the LLM reference
server whose scheduled times are the trace's and whose prompts and outputs are the rows'."""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pyarrow.compute as pc
import pytest
from cli_helpers import only_run_dir, run_tailscope
from test_llm_server import LlmServer

from tailscope.loadgen.arrivals import replayed_offsets_ns, schedule_offsets_ns
from tailscope.loadgen.datafiles import DataFileError
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.trace_files import hash_id_reuse, load_trace, slice_trace
from tailscope.loadgen.trace_prompts import block_reuse
from tailscope.rundir import read_stream, schema
from tailscope.scenario_model.scenario import ScenarioError, load_scenario

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "scenarios", "traces")
MOONCAKE = os.path.join(TRACES, "mooncake-sample.jsonl")
AZURE = os.path.join(TRACES, "azure-sample.csv")
BURSTGPT = os.path.join(TRACES, "burstgpt-sample.csv")
MS = 1_000_000


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _scenario(tmp_path, arrival: str, classes: str | None = None) -> str:
    classes = classes or "[{name: chat, api: openai-chat, model: tailscope-llm}]"
    return _write(tmp_path, "trace.yaml", f"""\
        target: http://127.0.0.1:9
        duration: 30s
        timeout: 30s
        arrival: {arrival}
        classes: {classes}
        """)


# -- readers ---------------------------------------------------------------------------------------

def test_the_samples_read_in_their_published_shapes():
    offsets, rows = load_trace(MOONCAKE, "mooncake")
    assert 590e9 < offsets[-1] <= 600e9 and np.all(np.diff(offsets) >= 0) and offsets[0] == 0
    assert np.any(np.diff(offsets) == 0)  # bursts: several rows on one millisecond
    assert len(rows.hash_ids) == len(offsets) and rows.block_tokens == 512
    for length, ids in zip(rows.input_tokens.tolist(), rows.hash_ids):
        assert len(ids) == -(-length // 512)  # one hash id per 512-token block, the last one cut short
    reused, total = hash_id_reuse(rows.hash_ids)
    assert 0.2 < reused / total < 0.8
    offsets, rows = load_trace(AZURE, "azure")
    assert rows.hash_ids is None and len(offsets) > 200 and np.all(rows.output_tokens >= 1)
    offsets, rows = load_trace(BURSTGPT, "burstgpt")
    assert rows.skipped > 0 and set(rows.models) == {"ChatGPT", "GPT-4"} and np.all(rows.output_tokens >= 1)


def test_azure_timestamps_are_exact_to_the_tick_and_rows_are_put_in_time_order(tmp_path):
    path = _write(tmp_path, "azure.csv", """\
        TIMESTAMP,ContextTokens,GeneratedTokens
        2023-11-16 18:15:46.6805900,100,5
        2023-11-16 18:15:46.6805901,7,3
        2023-11-16 18:15:46.1,9,2
        2023-11-16 18:15:47+00:00,11,1
        """)
    offsets, rows = load_trace(path, "azure")
    assert offsets.tolist() == [0, 580_590_000, 580_590_100, 900_000_000]
    assert rows.input_tokens.tolist() == [9, 100, 7, 11] and rows.output_tokens.tolist() == [2, 5, 3, 1]


def test_burstgpt_columns_are_found_by_name_and_failed_rows_left_out(tmp_path):
    path = _write(tmp_path, "b.csv", """\
        Model,Log Type,Timestamp,Request tokens,Response tokens,Total tokens
        ChatGPT,Conversation log,5,100,20,120
        GPT-4,API log,7,50,0,50
        GPT-4,API log,7.5,60,4,64
        """)
    offsets, rows = load_trace(path, "burstgpt")
    assert offsets.tolist() == [0, 2_500_000_000] and rows.skipped == 1 and rows.models == ("ChatGPT", "GPT-4")


@pytest.mark.parametrize("fmt, text, where", [
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                 '{"timestamp": 5, "input_length": 0, "output_length": 2, "hash_ids": [1]}\n', ":2: input_length"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}\n', ":1: hash_ids"),
    ("mooncake", '{"timestamp": 0, "output_length": 2}\n', ":1: input_length: missing"),
    ("azure", "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,1,1\n", ":1: the header lacks ContextTokens"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n16/11/2023,1,1\n",
     ":3: TIMESTAMP: expected"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,x,3\n", ":2: Request tokens"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path, fmt, text, where):
    path = _write(tmp_path, "t", text)
    with pytest.raises(DataFileError) as caught:
        load_trace(path, fmt)
    assert where in str(caught.value) and str(caught.value).startswith(path)


def test_a_slice_keeps_its_rows_from_the_first_of_them():
    offsets, rows = load_trace(MOONCAKE, "mooncake")
    kept, kept_rows = slice_trace(offsets, rows, 60 * 10**9, 120 * 10**9)
    inside = (offsets >= 60 * 10**9) & (offsets < 120 * 10**9)
    assert len(kept) == inside.sum() and kept[0] == 0
    assert np.array_equal(kept + offsets[inside][0], offsets[inside])
    assert kept_rows.hash_ids == tuple(h for h, i in zip(rows.hash_ids, inside) if i)


def test_max_rate_spaces_a_burst_and_shifts_what_follows():
    log = np.array([0, 0, 0, 0, 3_000_000_000, 9_000_000_000])
    assert replayed_offsets_ns(log, 1.0, 2.0).tolist() == [0, 500 * MS, 1000 * MS, 1500 * MS, 3000 * MS, 9000 * MS]
    assert replayed_offsets_ns(log, 2.0, 1.0).tolist() == [0, 1000 * MS, 2000 * MS, 3000 * MS, 4000 * MS, 5000 * MS]
    assert replayed_offsets_ns(log, 1.0).tolist() == log.tolist()


# -- scenario ----------------------------------------------------------------------------------------

def test_the_scenario_gives_the_trace_to_its_one_class_and_describes_it(tmp_path):
    scenario = load_scenario(_scenario(
        tmp_path, f"{{process: replay, file: {MOONCAKE}, format: mooncake, speed: 20, loop: true, "
                  "slice: {from: 1m, to: 3m}, max_rate: 50}"))
    arrival = scenario.arrival.describe()
    assert arrival["format"] == "mooncake" and arrival["slice_s"] == [60.0, 180.0] and arrival["max_rate"] == 50
    assert arrival["trace"]["rows"] == arrival["arrivals"] and 0 < arrival["trace"]["block_reuse"] < 1
    llm = scenario.classes[0].llm
    assert llm.trace is scenario.arrival.log.requests and llm.describe()["prompt_tokens"] == "trace"
    offsets = np.concatenate(list(schedule_offsets_ns(scenario.arrival, 30.0, 10**6, 1)))
    assert np.all(np.diff(offsets) >= 20 * MS) and offsets[-1] < 30e9  # looped, at most 50/s


@pytest.mark.parametrize("arrival, classes, message", [
    ("{process: replay, file: TRACE, format: mooncake, unit: ms}", None, "arrival.unit: not for a mooncake trace"),
    ("{process: replay, file: AZURE, format: azure, block_tokens: 64}", None, "arrival.block_tokens: only for a mooncake"),
    ("{process: replay, file: TRACE, format: mooncake, slice: {from: 20m}}", None, "arrival.slice: no request"),
    ("{process: poisson, rate: 5, slice: {from: 1m}}", None, "arrival.slice: only for `process: replay`"),
    ("{process: replay, file: TRACE, format: mooncake}",
     "[{name: a, api: openai-chat, model: m}, {name: b, api: openai-chat, model: m}]", "one request class"),
    ("{process: replay, file: TRACE, format: mooncake}",
     "[{name: a, api: openai-chat, model: m, prompt_tokens: 10}]", "classes[0].prompt_tokens: not with a mooncake"),
    ("{process: replay, file: TRACE, format: mooncake}",
     "[{name: a, api: openai-embeddings, model: m, stream: false}]", "classes[0].api"),
])
def test_scenario_errors_name_the_field(tmp_path, arrival, classes, message):
    path = _scenario(tmp_path, arrival.replace("TRACE", MOONCAKE).replace("AZURE", AZURE), classes)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert message in str(caught.value)


# -- prompts -----------------------------------------------------------------------------------------

def test_sent_prompts_reuse_blocks_exactly_as_the_trace_reuses_hash_ids(tmp_path):
    scenario = load_scenario(_scenario(tmp_path, f"{{process: replay, file: {MOONCAKE}, format: mooncake}}"))
    rows = scenario.classes[0].llm.trace
    mix = RequestMix(scenario.classes, 1)
    words = []
    for row in range(len(rows)):
        request = mix.prepare(0)
        body = json.loads(request.body)
        text = body["messages"][0]["content"].split()
        assert len(text) == request.llm.prompt_tokens == rows.input_tokens[row]
        assert body["max_tokens"] == rows.output_tokens[row]
        words.append(text)
    assert block_reuse(words, 512) == hash_id_reuse(rows.hash_ids)
    # worker 1 of 3 (other seed) sends rows 1, 4, 7, ... with the same blocks
    other = RequestMix(scenario.classes, 77, share=(1, 3))
    for row in (1, 4, 7):
        assert json.loads(other.prepare(0).body)["messages"][0]["content"].split() == words[row]


# -- against the LLM reference server ----------------------------------------------------------------

@pytest.fixture(scope="module")
def llm_server():
    server = LlmServer(["--max-num-seqs", "32", "--max-model-len", "4096", "--max-num-batched-tokens", "4096",
                        "--num-kv-blocks", "4096", "--tokens-per-chunk", "4"])
    try:
        yield server
    finally:
        server.close()


def test_a_mooncake_replay_sends_at_the_trace_times_with_the_rows_lengths(tmp_path, llm_server):
    speed = 10.0
    path = _write(tmp_path, "mc.yaml", f"""\
        name: mooncake-replay
        duration: 20s
        timeout: 30s
        arrival: {{process: replay, file: {MOONCAKE}, format: mooncake, speed: {speed}, slice: {{from: 0s, to: 40s}}}}
        classes: [{{name: chat, api: openai-chat, model: tailscope-llm}}]
        slo: ["error_rate < 1%"]
        """)
    out = tmp_path / "runs"
    proc = run_tailscope("run", path, "--target", f"http://127.0.0.1:{llm_server.port}", "--out", str(out),
                         "--receiver-port", "0", timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(out)
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    assert manifest["arrival"]["trace"]["format"] == "mooncake"
    offsets, rows = slice_trace(*load_trace(MOONCAKE, "mooncake"), 0, 40 * 10**9)
    table = read_stream(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA).table
    assert table.num_rows == len(offsets) and pc.all(pc.is_null(table.column("error_kind"))).as_py()
    scheduled, sent = (table.column(c).to_numpy() for c in ("scheduled_ns", "sent_ns"))
    expected = np.rint(offsets / speed).astype(np.int64)
    # scheduled times are the trace's (sped up) to the ns; sends follow them (their P99 against the
    # trace on a quiet machine is benchmarks/trace_replay.py's figure; a shared CI machine adds lateness)
    assert np.array_equal(np.sort(scheduled) - scheduled.min(), expected)
    assert np.all(sent >= scheduled) and np.median(sent - scheduled) < 50 * MS
    # the server counted each row's prompt and generated its output length (ignore_eos)
    got = sorted(zip((scheduled - scheduled.min()).tolist(), table.column("prompt_tokens").to_pylist(),
                     table.column("output_tokens").to_pylist()))
    want = sorted(zip(expected.tolist(), rows.input_tokens.tolist(), rows.output_tokens.tolist()))
    assert [g[0] for g in got] == [w[0] for w in want]
    assert sorted(g[1:] for g in got) == sorted(w[1:] for w in want)
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert f"{len(offsets)} requests of a mooncake trace from" in html and "trace time 0 s to 40 s" in html
    assert "512-token prompt blocks repeat an earlier one" in html


def test_the_cli_names_a_bad_trace_row_and_exits_2(tmp_path):
    trace = _write(tmp_path, "bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                                          '{"timestamp": 7, "input_length": 12, "output_length": -1, "hash_ids": [1]}\n')
    path = _scenario(tmp_path, f"{{process: replay, file: {trace}, format: mooncake}}")
    proc = run_tailscope("run", path, "--out", str(tmp_path / "runs"), timeout=60)
    assert proc.returncode == 2
    assert f"trace.yaml:4: arrival.file: {trace}:2: output_length: expected an integer >= 1, got -1" in proc.stderr


@pytest.mark.parametrize("fmt, path", [("azure", AZURE), ("burstgpt", BURSTGPT)])
def test_azure_and_burstgpt_rows_are_prompts_of_their_lengths_without_shared_blocks(tmp_path, fmt, path):
    scenario = load_scenario(_scenario(tmp_path, f"{{process: replay, file: {path}, format: {fmt}, speed: 4}}"))
    rows = scenario.classes[0].llm.trace
    mix = RequestMix(scenario.classes, 1)
    words = []
    for row in range(len(rows)):
        body = json.loads(mix.prepare(0).body)
        text = body["messages"][0]["content"].split()
        assert len(text) == rows.input_tokens[row] and body["max_tokens"] == rows.output_tokens[row]
        words.append(text)
    reused, total = block_reuse(words, 512)
    # drawn prompts: what repeats is two prompts drawn from the same start of the 65,536-word pool (rare)
    assert total > len(rows) and reused <= 0.01 * total


def test_two_workers_send_every_row_once_with_its_lengths(tmp_path, llm_server):
    path = _write(tmp_path, "mc2.yaml", f"""\
        name: mooncake-workers
        duration: 10s
        timeout: 30s
        arrival: {{process: replay, file: {MOONCAKE}, format: mooncake, speed: 10, slice: {{from: 60s, to: 90s}}}}
        classes: [{{name: chat, api: openai-chat, model: tailscope-llm}}]
        """)
    out = tmp_path / "runs"
    proc = run_tailscope("run", path, "--target", f"http://127.0.0.1:{llm_server.port}", "--out", str(out),
                         "--receiver-port", "0", "--workers", "2", timeout=180)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    table = read_stream(os.path.join(only_run_dir(out), schema.REQUESTS), schema.REQUESTS_SCHEMA).table
    offsets, rows = slice_trace(*load_trace(MOONCAKE, "mooncake"), 60 * 10**9, 90 * 10**9)
    assert set(table.column("worker").to_pylist()) == {0, 1} and pc.all(pc.is_null(table.column("error_kind"))).as_py()
    scheduled = table.column("scheduled_ns").to_numpy()
    got = sorted(zip((scheduled - scheduled.min()).tolist(), table.column("prompt_tokens").to_pylist(),
                     table.column("output_tokens").to_pylist()))
    want = sorted(zip(np.rint(offsets / 10).astype(np.int64).tolist(), rows.input_tokens.tolist(),
                      rows.output_tokens.tolist()))
    assert got == want
