"""A receiver that takes spans only from you: bearer token and TLS, with real parts.

The receiver runs as the conductor runs it (its own process, the token in its
environment); the senders are the OpenTelemetry SDK's own OTLP/HTTP and
OTLP/gRPC exporters in a process of their own, configured only through the
standard ``OTEL_EXPORTER_OTLP_*`` variables; ``tailscope agent`` and
``tailscope run`` are the real commands. The TLS certificate is self-signed,
made here.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import sys
import threading

import pytest
from cli_helpers import free_port, only_run_dir, run_tailscope
from receiver_helpers import post, receiver_stats, span, stored_metric_signals, stored_spans, trace_request
from reliability_helpers import TARGET_ENV, OwnedProcess, run_dir_of, write_scenario

from tailscope.support.receiver_token import TOKEN_ENV, otlp_headers_env
from tailscope.tracing.ingest.receiver import OtlpReceiver
from tailscope.tracing.ingest.receiver_auth import ReceiverAccessError, TlsFiles

TOKEN = secrets.token_urlsafe(32)
#: Spans each exporter process sends.
SPANS = 5

#: A process that exports SPANS spans with the SDK's own exporter (``http`` or ``grpc``), configured
#: by nothing but the environment; exit 0 whatever the receiver answered.
EXPORTER = """
import sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
if sys.argv[1] == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider(resource=Resource.create({"service.name": sys.argv[2]}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("access-test")
for i in range(int(sys.argv[3])):
    with tracer.start_as_current_span(f"{sys.argv[2]}-{i}"):
        pass
provider.shutdown()
"""


def without_token_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != TOKEN_ENV}


def export(transport: str, name: str, endpoint: str, headers: str | None = None,
           certificate: str | None = None) -> None:
    """Run the SDK exporter process against ``endpoint``; OTEL_* variables are its only configuration."""
    # REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE would override the exporter's certificate (requests gives the
    # environment precedence over a session's verify): a target trusting the receiver must not set them.
    env = {k: v for k, v in without_token_env().items()
           if not k.startswith("OTEL_") and k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env["OTEL_BSP_EXPORT_TIMEOUT"] = "10000"
    if headers is not None:
        env["OTEL_EXPORTER_OTLP_HEADERS"] = headers
    if certificate is not None:
        env["OTEL_EXPORTER_OTLP_CERTIFICATE"] = certificate
    done = subprocess.run([sys.executable, "-c", EXPORTER, transport, name, str(SPANS)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


class ReceiverProcess:
    """``python -m tailscope.tracing.ingest.receiver`` with the token in its environment."""

    def __init__(self, run_dir: str, host: str, token: str | None, *extra: str):
        env = without_token_env()
        if token is not None:
            env[TOKEN_ENV] = token
        self.run_dir = run_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tailscope.tracing.ingest.receiver", "--run-dir", run_dir, "--host", host,
             "--port", "0", "--grpc-port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        first = self.proc.stdout.readline()
        second = self.proc.stdout.readline()
        if not (first.startswith("LISTENING ") and second.startswith("GRPC_LISTENING ")):
            self.stop()
            pytest.fail(f"receiver did not start: {first!r} {second!r} {self.proc.stderr.read()[-2000:]}")
        self.port, self.grpc_port = int(first.split()[1]), int(second.split()[1])

    def stop(self) -> dict:
        """SIGTERM, wait; the final receiver.json."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(timeout=15) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.output = self.proc.stdout.read() + self.proc.stderr.read()
        return receiver_stats(self.run_dir)


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> TlsFiles:
    """A self-signed certificate for 127.0.0.1 and localhost (the cryptography package)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tailscope-test-receiver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return TlsFiles(str(cert_file), str(key_file))


def test_a_receiver_on_all_interfaces_refuses_to_start_without_a_token(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tailscope.tracing.ingest.receiver", "--run-dir", str(tmp_path),
                           "--host", "0.0.0.0", "--port", "0", "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=30, env=without_token_env())
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--receiver-token" in done.stderr and "0.0.0.0" in done.stderr
    with pytest.raises(ReceiverAccessError, match="which other hosts can reach"):
        OtlpReceiver(str(tmp_path), host="0.0.0.0", port=0)
    with pytest.raises(ReceiverAccessError, match="at least 16 characters"):
        OtlpReceiver(str(tmp_path), host="0.0.0.0", port=0, token="short")


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_real_otel_exporters_get_in_only_with_the_token_header(tmp_path, transport):
    rx = ReceiverProcess(str(tmp_path), "0.0.0.0", TOKEN)
    try:
        port = rx.port if transport == "http" else rx.grpc_port
        endpoint = f"http://127.0.0.1:{port}"
        export(transport, "mine", endpoint, headers=otlp_headers_env(TOKEN))
        export(transport, "stranger", endpoint)
        export(transport, "guesser", endpoint, headers=otlp_headers_env(TOKEN[:-1] + ("A" if TOKEN[-1] != "A" else "B")))
        if transport == "http":  # a hand-made POST and the clock echo are refused too
            status, headers, _ = post(rx.port, "/v1/traces", trace_request([span("raw")]))
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
            connection = http.client.HTTPConnection("127.0.0.1", rx.port, timeout=10)
            connection.request("GET", "/v1/time")
            assert connection.getresponse().status == 401
            connection.close()
    finally:
        stats = rx.stop()
    names = sorted(s["name"] for s in stored_spans(str(tmp_path)))
    assert names == [f"mine-{i}" for i in range(SPANS)]
    hand_made = 2 if transport == "http" else 0
    assert stats["rejected"]["unauthenticated"] == 2 + hand_made and stats["auth"] == "bearer token"
    assert stats["requests_by_transport"][transport] == 3 + hand_made // 2
    assert stats["spans_stored"] == SPANS and not stats["tls"]
    written = "".join(open(os.path.join(tmp_path, f), errors="replace").read() for f in os.listdir(tmp_path)
                      if f.endswith((".json", ".log")))
    assert TOKEN not in written + rx.output


def test_tls_with_a_self_signed_certificate_on_both_transports(tmp_path, tls):
    rx = ReceiverProcess(str(tmp_path), "127.0.0.1", TOKEN, "--tls-cert", tls.cert_file, "--tls-key", tls.key_file)
    try:
        for transport, port in (("http", rx.port), ("grpc", rx.grpc_port)):
            export(transport, f"tls-{transport}", f"https://127.0.0.1:{port}", headers=otlp_headers_env(TOKEN),
                   certificate=tls.cert_file)
        with pytest.raises(OSError):  # plain HTTP to the TLS port: the handshake fails, nothing is read
            post(rx.port, "/v1/traces", trace_request([span("plain")]))
    finally:
        stats = rx.stop()
    names = sorted(s["name"] for s in stored_spans(str(tmp_path)))
    assert names == sorted(f"tls-{t}-{i}" for t in ("http", "grpc") for i in range(SPANS))
    assert stats["tls"] and stats["rejected"]["unauthenticated"] == 0


def test_the_agent_sends_the_token_over_tls_and_is_refused_without_it(tmp_path, tls):
    rx = OtlpReceiver(str(tmp_path), host="127.0.0.1", port=0, token=TOKEN, tls=tls)
    port = rx.start()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        agent = [sys.executable, "-m", "tailscope.cli.main", "agent", "--harness", f"https://127.0.0.1:{port}",
                 "--harness-ca", tls.cert_file, "--target-pid", str(sleeper.pid), "--host-label", "box-9",
                 "--rate", "10", "--duration", "2s", "--export-interval", "0.5s"]
        refused = subprocess.run(agent, capture_output=True, text=True, timeout=60, env=without_token_env())
        sent = subprocess.run(agent, capture_output=True, text=True, timeout=60,
                              env={**without_token_env(), TOKEN_ENV: TOKEN})
    finally:
        sleeper.kill()
        sleeper.wait()
        rx.stop()
    assert refused.returncode == 2 and "401" in refused.stderr and "token" in refused.stderr
    assert sent.returncode == 0, sent.stderr
    series = {row["series"] for row in stored_metric_signals(str(tmp_path))}
    assert 'agent.clock_offset_ns{host="box-9"}' in series and any(s.startswith("proc.") for s in series)
    assert receiver_stats(str(tmp_path))["rejected"]["unauthenticated"] >= 1


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_refuse_a_receiver_on_all_interfaces_without_a_token(tmp_path, command):
    scenario = write_scenario(tmp_path / "s.yaml", "http://127.0.0.1:9", duration="6s")
    extra = ["--rates", "5"] if command == "sweep" else []
    done = run_tailscope(command, scenario, "--out", str(tmp_path / "runs"), "--receiver-host", "0.0.0.0",
                         "--receiver-port", "0", *extra, timeout=120, env={TOKEN_ENV: ""})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tailscope: error: ")
    assert "--receiver-token" in done.stderr and "TAILSCOPE_RECEIVER_TOKEN" in done.stderr
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")


def test_a_run_on_all_interfaces_takes_its_targets_spans_and_counts_a_strangers(tmp_path):
    """`tailscope run --receiver-host 0.0.0.0` with a token: the reference target, given the token
    through OTEL_EXPORTER_OTLP_HEADERS, gets its spans joined; a stranger's SDK exporter does not,
    is counted, and the analysis and the report say so; the token is written nowhere."""
    target_port, receiver_port = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{receiver_port}"
    target = OwnedProcess([sys.executable, "-m", "tailscope.targets.reference", "--host", "127.0.0.1",
                           "--port", str(target_port)], stdout=subprocess.PIPE,
                          env={**TARGET_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                               "OTEL_EXPORTER_OTLP_HEADERS": otlp_headers_env(TOKEN)})
    try:
        assert target.proc.stdout.readline().startswith(b"LISTENING")
        threading.Thread(target=target.proc.stdout.read, daemon=True).start()
        scenario = write_scenario(tmp_path / "s.yaml", f"http://127.0.0.1:{target_port}", duration="6s", rate=30)
        run = OwnedProcess([sys.executable, "-m", "tailscope.cli.main", "run", scenario, "--out",
                            str(tmp_path / "runs"), "--receiver-host", "0.0.0.0", "--receiver-port",
                            str(receiver_port), "--receiver-grpc-port", "-1", f"--receiver-token={TOKEN}"],
                           stdout=subprocess.PIPE, env={TOKEN_ENV: ""})
        run_dir = run_dir_of(str(tmp_path / "runs"))
        export("http", "stranger", endpoint)  # during the load, without the token
        stdout = run.proc.stdout.read().decode()
        assert run.wait(timeout=120) in (0, 1), "".join(run.stderr_lines)[-3000:]
    finally:
        target.stop()
    assert run_dir == only_run_dir(tmp_path / "runs")
    with open(os.path.join(run_dir, "analysis.json"), encoding="utf-8") as fh:
        analysis = json.load(fh)
    assert analysis["stages"]["joined_fraction"] > 0.9
    assert analysis["receiver"]["rejected"]["unauthenticated"] == 1 and analysis["receiver"]["auth"] == "bearer token"
    assert "receiver_unauthenticated" in [w["code"] for w in analysis["warnings"]]
    assert not any(s["name"].startswith("stranger") for s in stored_spans(run_dir))
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        options = json.load(fh)["options"]
    assert options["receiver_host"] == "0.0.0.0" and options["receiver_auth"] == "bearer token"
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert "unauthenticated 1" in html and "bearer token required" in html
    for name in os.listdir(run_dir):
        with open(os.path.join(run_dir, name), "rb") as fh:
            assert TOKEN.encode() not in fh.read(), f"the token was written into {name}"
    assert TOKEN not in stdout + "".join(run.stderr_lines)
