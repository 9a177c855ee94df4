"""Jaeger for the e2e tests, as a user runs it: Jaeger v2 (an OpenTelemetry collector
distribution with in-memory storage), built from Go modules by hack/build-jaeger.sh, with
its OTLP/HTTP receiver and its query API on free loopback ports; the tests read traces
back through the query API, as the Jaeger UI does."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.support import answers, built, free_port, stop, wait_until

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


@dataclass
class Jaeger:
    """A running Jaeger: `otlp` is what an AgentConfig's spec.tracing.endpoint names."""

    process: subprocess.Popen[bytes]
    log: Path
    otlp: str
    query: str

    @classmethod
    @contextlib.contextmanager
    def start(cls, workdir: Path) -> Iterator[Jaeger]:
        binary = built("build-jaeger.sh") / "jaeger"
        ports = {k: free_port() for k in ("health", "query", "query_grpc", "otlp")}
        config = workdir / "jaeger.yaml"
        config.write_text(CONFIG.format(**ports))
        log = workdir / "jaeger.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(binary), "--config", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        jaeger = cls(
            process,
            log,
            f"http://127.0.0.1:{ports['otlp']}",
            f"http://127.0.0.1:{ports['query']}",
        )
        try:
            wait_until("jaeger to be ready", lambda: jaeger.ready(ports["health"]), timeout=60)
            yield jaeger
        finally:
            stop(process, 20)

    def ready(self, health: int) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"jaeger exited:\n{self.log.read_text()[-3000:]}")
        return answers(f"http://127.0.0.1:{health}/status")

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """One trace as the query API gives it (spans with their references, tags and
        processes), or None while Jaeger has none of it."""
        try:
            with urllib.request.urlopen(f"{self.query}/api/traces/{trace_id}", timeout=5) as r:
                data = json.load(r).get("data") or []
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return data[0] if data else None

    def services(self) -> list[str]:
        with urllib.request.urlopen(f"{self.query}/api/services", timeout=5) as r:
            return list(json.load(r).get("data") or [])

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
