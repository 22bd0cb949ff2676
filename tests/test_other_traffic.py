"""Other traffic (analyzers/inputs/other_traffic.py): requests the server answered that tailscope
did not send.

End to end with real parts: the LLM reference server (vLLM's ``llm_request`` SERVER span, exported
over OTLP to the run's receiver) is loaded by a real ``tailscope run`` of a ``stages: {preset:
vllm}`` scenario while a second client — plain ``urllib``, no ``traceparent`` — sends its own
requests to the same server. Those requests' spans join none of the run's requests: the analysis
counts them as other traffic, with their tokens from ``gen_ai.usage.*``. The second client asks
for OUTSIDE_MAX_TOKENS output tokens, fewer than any request of the scenario, so the spans counted
are recognisably its own.

A second test builds a spans table by hand to pin the counting rules: one request per foreign
trace (however many SERVER spans it has), the preset's request span counts even when it is not a
SERVER span, joined traces never count, tokens at the span's start (prompt) and end (output).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.inputs.other_traffic import foreign_spans, other_traffic
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.rundir import load_run

OUTSIDE_MAX_TOKENS = 3
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
SCENARIO = """\
name: other-traffic
duration: 4s
seed: 7
timeout: 30s
arrival: {process: poisson, rate: 10}
classes:
  - name: chat
    api: openai-chat
    model: tailscope-llm
    prompt_tokens: {dist: uniform, min: 20, max: 60}
    output_tokens: {dist: uniform, min: 6, max: 16}
stages: {preset: vllm}
"""


def _outside_client(url: str, stop: threading.Event, sent: list) -> None:
    """Send chat requests without a traceparent, one every 50 ms, until ``stop``."""
    body = json.dumps({"model": "tailscope-llm", "max_tokens": OUTSIDE_MAX_TOKENS, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "other traffic " * 30}]}).encode()
    while not stop.is_set():
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            sent.append(json.loads(response.read())["usage"])
        stop.wait(0.05)


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("other-traffic")
    receiver_port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver_port}", PYTHONUNBUFFERED="1")
    server = subprocess.Popen([sys.executable, "-m", "tailscope.targets.llm", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    stop, sent = threading.Event(), []
    try:
        line = server.stdout.readline()
        assert line.startswith("LISTENING"), f"the LLM server did not start: {line!r}"
        target = f"http://127.0.0.1:{line.split()[1]}"
        client = threading.Thread(target=_outside_client, args=(f"{target}/v1/chat/completions", stop, sent),
                                  daemon=True)
        client.start()
        scenario = tmp / "mixed.yaml"
        scenario.write_text(SCENARIO)
        done = run_tailscope("run", str(scenario), "--target", target, "--out", str(tmp / "runs"),
                             "--receiver-port", str(receiver_port), "--receiver-grpc-port", "-1", timeout=240)
        stop.set()
        client.join(timeout=30)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        return only_run_dir(tmp / "runs"), sent
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=30)


def test_a_second_client_without_traceparent_is_counted_as_other_traffic(mixed_run):
    run_dir, sent = mixed_run
    analysis = load_analysis(run_dir)
    run = load_run(run_dir)
    ours = set(run.requests.column("trace_id").to_pylist())
    spans = [s for s in run.spans.to_pylist() if s["name"] == "llm_request"]
    foreign = [json.loads(s["attributes"]) for s in spans if s["trace_id"] not in ours]
    joined = [json.loads(s["attributes"]) for s in spans if s["trace_id"] in ours]
    assert len(joined) >= 20 and min(a["gen_ai.usage.completion_tokens"] for a in joined) >= 6
    # every foreign span is the second client's (its requests ask for fewer tokens than any of ours)
    assert len(foreign) >= 20 and all(a["gen_ai.usage.completion_tokens"] == OUTSIDE_MAX_TOKENS for a in foreign)
    assert len(foreign) <= len(sent)  # the client's requests before the receiver listened left no span
    other = analysis["other_traffic"]
    assert other["requests"] == len(foreign)
    assert other["prompt_tokens"] == sum(a["gen_ai.usage.prompt_tokens"] for a in foreign)
    assert other["output_tokens"] == OUTSIDE_MAX_TOKENS * len(foreign)
    assert other["token_attributes"]["prompt"] == "gen_ai.usage.prompt_tokens"
    windows = other["windows"]
    assert len(windows) == len(analysis["windows"]) and windows[0]["start_ns"] == analysis["windows"][0]["start_ns"]
    in_load = sum(w["requests"] for w in windows)
    # the windows count the foreign requests that started in the load period (the client also ran
    # while the harness started and while it waited for late spans: those are outside every window)
    load_start = windows[0]["start_ns"]
    load_end = windows[-1]["start_ns"] + round(other["window_s"] * 1e9)
    starts = [s["start_ns"] for s in spans if s["trace_id"] not in ours]
    expected = sum(1 for t in starts if load_start <= t < load_end)
    assert in_load >= 10 and abs(in_load - expected) <= 2, (in_load, expected, len(foreign))
    assert sum(w["output_tokens"] for w in windows) <= other["output_tokens"]
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))


def _spans(rows: list[tuple]) -> pa.Table:
    names = ("trace_id", "name", "kind", "start_ns", "end_ns", "attributes")
    return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)},
                    schema=pa.schema([("trace_id", pa.string()), ("name", pa.string()), ("kind", pa.int32()),
                                      ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("attributes", pa.string())]))


def test_one_request_per_foreign_trace_with_its_tokens_at_start_and_end():
    tokens = rules_for_scenario({"stages": {"preset": "vllm"}}).rules.tokens
    usage = json.dumps({"gen_ai.usage.prompt_tokens": 100, "gen_ai.usage.completion_tokens": 7})
    s = 1_000_000_000
    table = _spans([
        ("a" * 32, "llm_request", 2, 0, 3 * s, usage),          # ours: never counted
        ("b" * 32, "proxy", 2, 1 * s, 4 * s, "{}"),            # foreign, two SERVER spans: one request at 1 s
        ("b" * 32, "llm_request", 2, 1 * s + 5, 2 * s + 5, usage),
        ("c" * 32, "llm_request", 1, 2 * s, 5 * s, usage),     # foreign, the preset's span (INTERNAL kind)
        ("d" * 32, "db", 3, 2 * s, 3 * s, "{}"),               # foreign, but neither SERVER nor the request span
    ])
    foreign = foreign_spans(table, None, pa.array(["a" * 32]))
    assert foreign.tolist() == [False, True, True, True, True]
    traffic = other_traffic(table, foreign, tokens)
    assert traffic.starts_ns.tolist() == [1 * s, 2 * s]
    rates = traffic.per_second(np.arange(7, dtype=np.int64) * s)
    assert rates["requests"].tolist() == [0, 1, 1, 0, 0, 0]
    assert rates["prompt_tokens"].tolist() == [0, 100, 100, 0, 0, 0]
    assert rates["output_tokens"].tolist() == [0, 0, 7, 0, 0, 7]
    section = encode(traffic.section(0, 6 * s, 2.0))  # as analysis.json states it
    assert (section["requests"], section["prompt_tokens"], section["output_tokens"]) == (2, 200, 14)
    assert [w["requests"] for w in section["windows"]] == [1, 1, 0]
    assert [w["prompt_tokens"] for w in section["windows"]] == [100, 100, 0]
    assert [w["output_tokens"] for w in section["windows"]] == [0, 7, 7]
    without = other_traffic(table, foreign, None)  # no preset: SERVER spans only, no tokens
    assert without.starts_ns.tolist() == [1 * s] and without.section(0, 6 * s, 1.0).prompt_tokens is None
