"""Reproducibility metadata (issue 29 item 8): the server's kind, version and model, the host's
CPU and GPUs, tailscope's version and the scenario's hash in the manifest, shown in the report
and compared by ``compare`` — against the LLM reference server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import textwrap
import types

import jsonschema
import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope
from test_llm_server import LlmServer

from tailscope.analyzers.inputs.environment import environment_differences, environment_facts
from tailscope.conductor.server_facts import server_facts
from tailscope.support.host_inventory import cpu_model, gpu_inventory
from tailscope.support.version import tailscope_version

SCHEMA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analyzers", "analysis.schema.json")


@pytest.fixture(scope="module")
def llm_server():
    server = LlmServer(["--served-model-name", "env-test-model", "--max-model-len", "1024", "--max-num-seqs", "8"])
    try:
        yield server
    finally:
        server.close()


def test_the_llm_server_says_its_version_and_model(llm_server):
    url = f"http://127.0.0.1:{llm_server.port}"
    facts = server_facts(url, None, speaks_openai=True)
    assert facts["probed"] is True and facts["version"] == tailscope_version()
    assert facts["model"] == "env-test-model" and facts["max_model_len"] == 1024
    assert facts["endpoints"] == {"/version": "200", "/v1/models": "200"}
    # asked as TGI, the same server has no /info: the facts are absent and the answer says why
    tgi = server_facts(url, "tgi", speaks_openai=True)
    assert tgi["endpoints"] == {"/info": "404"} and tgi["version"] is None and tgi["model"] is None
    # a plain service (no OpenAI-API classes, the reference preset) is not asked at all
    assert server_facts(url, "reference", speaks_openai=False) == {
        "kind": "reference", "probed": False, "version": None, "model": None, "max_model_len": None,
        "models": [], "endpoints": {}}
    # nothing listening: stated, not guessed
    gone = server_facts("http://127.0.0.1:9", "vllm", speaks_openai=True, timeout_s=0.5)
    assert gone["version"] is None and gone["endpoints"]["/version"].startswith("error:")


class _FakeNvml(types.SimpleNamespace):
    """NVML's calls as pynvml names them, for two GPUs (this machine has none)."""

    def __init__(self):
        super().__init__(
            nvmlInit=lambda: None, nvmlShutdown=lambda: None,
            nvmlSystemGetDriverVersion=lambda: "550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
            nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
            nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=85899345920))


def test_gpus_and_driver_from_nvml_or_the_reason_there_are_none(tmp_path):
    facts = gpu_inventory(_FakeNvml())
    assert facts["nvml"] is None and facts["driver_version"] == "550.54.15" and facts["cuda_driver_version"] == "12.4"
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert facts["gpus"][1] == {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory_bytes": 85899345920}

    def refuse():
        raise RuntimeError("NVML Shared Library Not Found")

    absent = gpu_inventory(types.SimpleNamespace(nvmlInit=refuse))
    assert absent == {"gpus": [], "driver_version": None, "cuda_driver_version": None,
                      "nvml": "NVML unavailable: NVML Shared Library Not Found"}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert cpu_model(str(cpuinfo)) == "AMD EPYC 7B13"


def test_compare_names_the_facts_that_differ():
    h100 = {"host": {"gpu": {"gpus": [{"name": "NVIDIA H100"}] * 2, "driver_version": "550", "nvml": None},
                     "cpu_model": "EPYC"},
            "server": {"kind": "vllm", "version": "0.8.5", "model": "m", "max_model_len": 4096, "probed": True}}
    none = {"host": {"gpu": {"gpus": [], "nvml": "NVML found no GPU"}, "cpu_model": "EPYC"},
            "server": {"kind": "vllm", "version": "0.9.0", "model": "m", "max_model_len": None, "probed": True}}
    before, now = environment_facts(h100), environment_facts(none)
    assert before["gpus"] == "2 x NVIDIA H100" and now["gpu_absent"] == "NVML found no GPU"
    differences = environment_differences(before, now)
    assert [d["field"] for d in differences] == ["server_version", "gpus"]  # max_model_len unknown on one side
    assert "0.8.5 (baseline) vs 0.9.0 (current)" in differences[0]["message"]
    assert differences[1]["current"] == "none"
    assert environment_differences(before, before) == [] and environment_differences(environment_facts({}), now) == []


def _scenario(tmp_path) -> str:
    path = tmp_path / "env.yaml"
    path.write_text(textwrap.dedent("""\
        name: env
        duration: 3s
        seed: 7
        timeout: 20s
        arrival: {process: poisson, rate: 4}
        classes:
          - name: chat
            api: openai-chat
            model: env-test-model
            prompt_tokens: {dist: uniform, min: 10, max: 20}
            output_tokens: {dist: uniform, min: 4, max: 8}
        """))
    return str(path)


@pytest.mark.timeout(180)
def test_a_run_records_its_environment_the_report_shows_it_and_compare_warns(tmp_path, llm_server):
    out = tmp_path / "runs"
    proc = run_tailscope("run", _scenario(tmp_path), "--target", f"http://127.0.0.1:{llm_server.port}",
                         "--receiver-port", "0", "--late-span-wait", "1s", "--out", str(out), timeout=150)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(out)
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    server = manifest["server"]
    assert server["model"] == "env-test-model" and server["max_model_len"] == 1024
    assert server["version"] == tailscope_version() == manifest["tailscope_version"] and server["kind"] is None
    canonical = json.dumps(manifest["scenario"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert manifest["scenario_sha256"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    host = manifest["host"]
    assert host["cpu_model"] == cpu_model() and host["kernel"] == os.uname().release
    assert host["gpu"] == gpu_inventory()  # this machine's NVML answer, GPUs or the reason there are none
    analysis = load_analysis(run_dir)
    with open(SCHEMA, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))
    env = analysis["run"]["environment"]
    assert env["model"] == "env-test-model" and env["max_model_len"] == 1024 and env["server_probed"] is True
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert 'id="environment"' in html and "env-test-model (max_model_len 1024)" in html

    # the same run as if measured on another server version and model: compare says so
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    with open(other / "manifest.json", encoding="utf-8") as fh:
        changed = json.load(fh)
    changed["server"].update(version="9.9.9", model="another-model")
    with open(other / "manifest.json", "w", encoding="utf-8") as fh:
        json.dump(changed, fh)
    proc = run_tailscope("compare", str(other), run_dir, "--out", str(tmp_path / "cmp"), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"the runs differ in server version: {tailscope_version()} (baseline) vs 9.9.9 (current)" in proc.stdout
    assert "the runs differ in model: env-test-model (baseline) vs another-model (current)" in proc.stdout
    with open(tmp_path / "cmp" / "comparison.json", encoding="utf-8") as fh:
        comparison = json.load(fh)
    assert [d["field"] for d in comparison["environment"]["differences"]] == ["server_version", "model"]
    with open(tmp_path / "cmp" / "comparison.html", encoding="utf-8") as fh:
        page = fh.read()
    assert 'id="environment-warnings"' in page and 'id="environment"' in page
    with open(tmp_path / "cmp" / "comparison.md", encoding="utf-8") as fh:
        assert "- **environment**: the runs differ in model: env-test-model (baseline) vs another-model" in fh.read()
