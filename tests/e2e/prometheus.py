"""A real Prometheus for the e2e suite (built from its Go module by hack/build-tools.sh) and a
small exporter in DCGM's format whose GPU utilization the test sets."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hack.ports import free_port
from tests.e2e.harness import ROOT, eventually


def tool(name: str) -> Path:
    """The path of a pinned tool (helm, promtool, prometheus), built or reused by hack/build-tools.sh."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-tools.sh")], check=True, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    path = Path(out.stdout.strip().splitlines()[-1]) / name
    assert path.exists(), f"hack/build-tools.sh did not provide {name} in {path.parent}"
    return path


@dataclass
class Prometheus:
    """A running prometheus scraping ``targets`` (host:port) every second."""

    binary: Path
    workdir: Path
    targets: list[str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "e2e", "static_configs": [{"targets": self.targets}]}],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        eventually(self._ready, timeout=60, interval=0.3, what="prometheus /-/ready")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            log = (self.workdir / "prometheus.log").read_text(errors="replace")
            raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{log[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result list of an instant query."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class DCGMExporter:
    """Serves ``DCGM_FI_DEV_GPU_UTIL`` per GPU the way dcgm-exporter does; ``gpus[node] = [util, ...]``."""

    gpus: dict[str, list[float]] = field(default_factory=dict)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    def render(self) -> str:
        lines = [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        ]
        for node, values in sorted(self.gpus.items()):
            for i, value in enumerate(values):
                labels = f'gpu="{i}",UUID="GPU-{node}-{i}",device="nvidia{i}",modelName="NVIDIA L4",Hostname="{node}"'
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value:g}")
        return "\n".join(lines) + "\n"

    def start(self) -> DCGMExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@pytest.fixture
def dcgm(tmp_path: Path) -> Iterator[tuple[DCGMExporter, Prometheus]]:
    """A DCGM-format exporter and a real Prometheus scraping it every second."""
    exporter = DCGMExporter().start()
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    prom = Prometheus(binary=tool("prometheus"), workdir=workdir, targets=[exporter.target]).start()
    try:
        yield exporter, prom
    finally:
        prom.stop()
        exporter.stop()
