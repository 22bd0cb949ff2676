"""The LLM traffic child (faults/llm_traffic.py) against a loopback server that counts tokens
the way a BPE server does: prompts are sized in the server's tokens, errors back off, and
repeated 4xx answers stop the traffic with a failure instead of a resend loop.

The server here is a real asyncio HTTP server over loopback that answers like vLLM: a prompt
is ``TOKENS_PER_WORD`` tokens per word plus ``TEMPLATE_TOKENS`` of chat framing (as a byte-level
BPE makes of random letter strings), over ``MAX_MODEL_LEN`` is HTTP 400. The same against real
vLLM is tests/real_servers/test_vllm.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest

from tailscope.faults.llm_traffic import MAX_CONSECUTIVE_4XX

TOKENS_PER_WORD = 5
TEMPLATE_TOKENS = 6
MAX_MODEL_LEN = 1024


class BpeLikeServer:
    """``POST /v1/chat/completions`` answered at once; records each prompt's token count."""

    def __init__(self, refuse_all: bool = False) -> None:
        self.refuse_all = refuse_all
        self.prompts: list[int] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> BpeLikeServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._answer, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _answer(self, reader, writer) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        body = json.loads(await reader.readexactly(length))
        tokens = TOKENS_PER_WORD * len(body["messages"][0]["content"].split()) + TEMPLATE_TOKENS
        self.prompts.append(tokens)
        if self.refuse_all or tokens + body["max_tokens"] > MAX_MODEL_LEN:
            status, reply = 400, {"error": {"message": f"This model's maximum context length is {MAX_MODEL_LEN} "
                                                       f"tokens; your request has {tokens} input tokens"}}
        else:
            status, reply = 200, {"usage": {"prompt_tokens": tokens, "completion_tokens": body["max_tokens"]}}
        data = json.dumps(reply).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()


def _traffic(port: int, tmp_path, *args: str) -> dict:
    report = tmp_path / "counts.json"
    subprocess.run([sys.executable, "-m", "tailscope.faults.llm_traffic", "--url", f"http://127.0.0.1:{port}",
                    *args, "--report", str(report)], check=True, timeout=60)
    return json.loads(report.read_text())


def test_prompts_are_sized_in_the_servers_tokens_calibrated_from_usage(tmp_path):
    with BpeLikeServer() as server:
        counts = _traffic(server.port, tmp_path, "--streams", "4", "--duration", "2", "--prompt-tokens", "200",
                          "--max-tokens", "16")
    print(counts)
    assert counts["prompt_sizing"] == "calibrated" and counts["failure"] is None
    assert counts["tokens_per_word"] == pytest.approx(TOKENS_PER_WORD, rel=0.2)
    assert counts["rejected_4xx"] == 0 and counts["ok"] >= 20
    sized = server.prompts[1:]  # after the calibration request
    # each prompt within a word of 200 tokens (framing included): not 5x over the server's limit
    assert all(abs(tokens - 200) <= TOKENS_PER_WORD + TEMPLATE_TOKENS for tokens in sized), sized[:10]


@pytest.mark.parametrize("shape", [["--streams", "8"], ["--rate", "200"]])
def test_repeated_4xx_back_off_and_stop_the_traffic_with_a_failure(tmp_path, shape):
    with BpeLikeServer(refuse_all=True) as server:
        counts = _traffic(server.port, tmp_path, *shape, "--duration", "20", "--prompt-tokens", "200",
                          "--max-tokens", "16")
    print(counts)
    assert counts["failure"].startswith(f"stopped after {MAX_CONSECUTIVE_4XX} consecutive HTTP 4xx answers")
    assert "maximum context length" in counts["failure"]
    assert counts["ok"] == 0 and counts["rejected_4xx"] == counts["sent"] - counts["cancelled"]
    # no resend loop: the back off (0.1 s doubling, at most 2 s) caps what 20 s could have sent at once
    assert counts["sent"] < MAX_CONSECUTIVE_4XX + 8 + 2, counts
    assert counts["sent"] - counts["cancelled"] <= len(server.prompts) <= counts["sent"]


def test_a_traffic_faults_counts_and_failure_read_as_one_line():
    from tailscope.reports.formatting import fault_counts_text

    observed = {"sent": 1204, "ok": 1190, "rejected_429": 2, "rejected_4xx": 12, "other_status": 0, "errors": 0,
                "skipped": 0, "backed_off": 3, "prompt_sizing": "calibrated", "tokens_per_word": 5.4532}
    text = fault_counts_text({"observed": observed, "error": "the fault stopped early: stopped after 10 ..."})
    assert text == ("sent 1,204 · answered 1,190 · rejected 14 (429: 2, other 4xx: 12) · errors 0 · "
                    "not sent 3 (in-flight cap or back off) · prompts sized at 5.45 server tokens per word · "
                    "the fault stopped early: stopped after 10 ...")
    assert fault_counts_text({"observed": {"throttled_ns_delta": 5}, "error": None}) == ""
    burst = fault_counts_text({"observed": {"attempts": 40, "ok": 30, "rejected_429": 10, "errors": 0}})
    assert burst == "sent 40 · answered 30 · rejected 10 (429: 10) · errors 0"


def test_an_llm_fault_takes_the_scenarios_tokenizer_unless_it_names_its_own():
    from types import SimpleNamespace

    from tailscope.conductor.fault_companion import with_scenario_tokenizer
    from tailscope.faults.registry import build_spec

    plan = SimpleNamespace(classes=(SimpleNamespace(llm=None),
                                    SimpleNamespace(llm=SimpleNamespace(tokenizer="/m/tokenizer.json"))))
    unset = build_spec("llm_long_generations", 1.0, 2.0, {}, "cause")
    own = build_spec("llm_prompt_storm", 1.0, 2.0, {"tokenizer": "/own.json"}, "cause")
    other = build_spec("cpu_contention", 1.0, 2.0, {}, "cause")
    filled = with_scenario_tokenizer([unset, own, other], plan)
    assert [s.params.get("tokenizer") for s in filled] == ["/m/tokenizer.json", "/own.json", None]
    assert with_scenario_tokenizer([unset], SimpleNamespace(classes=()))[0].params["tokenizer"] == ""
