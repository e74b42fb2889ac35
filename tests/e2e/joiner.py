"""Run the joiner controller the way a user does (`joiner run --provider kwok`), and read what it shows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hack.ports import free_port
from tests.e2e.harness import ROOT, Cluster, eventually

FAST = {
    "batch-idle-duration": "0.3",
    "batch-max-duration": "3",
    "gc-interval": "5",
}


class PortTaken(AssertionError):
    """joiner exited at start: another process took the port picked for it."""


@dataclass
class Joiner:
    """A running `joiner run` process."""

    cluster: Cluster
    log_path: Path
    flags: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    health_port: int = 0

    def start(self) -> Joiner:
        """Start it and wait for /readyz. The two ports are picked free, but another process on the
        machine (three e2e workers each start their own cluster) can take one before joiner binds it:
        joiner then says so and exits (`operator.cannot_listen`), and is started again on two others."""
        for attempt in range(3):
            try:
                return self._start()
            except PortTaken:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> Joiner:
        self.metrics_port, self.health_port = free_port(), free_port()
        exe = Path(sys.executable).parent / "joiner"
        args = [
            str(exe),
            "run",
            "--provider",
            self.flags.get("provider", "kwok"),
            *([] if "kubeconfig" in self.flags else ["--kubeconfig", str(self.cluster.kubeconfig)]),
            *([] if "leader-elect-namespace" in self.flags else ["--no-leader-elect"]),
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--log-format",
            "json",
        ]
        for key, value in {**FAST, **{k: v for k, v in self.flags.items() if k != "provider"}}.items():
            args += [f"--{key}", value] if value else [f"--{key}"]  # "" : a switch such as --no-nominate
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ))
        log.close()
        eventually(self._ready, timeout=60, interval=0.2, what="joiner /readyz")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.logs()[-3000:]
            last = tail.splitlines()[-1] if tail.strip() else ""
            if '"operator.cannot_listen"' in last and "address already in use" in last:
                raise PortTaken(tail)
            raise AssertionError(f"joiner exited with {self.proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0 when none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$", line)
            if not m or m.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(m.group(4))
        return total


@pytest.fixture
def start_joiner(cluster: Cluster, tmp_path: Path) -> Iterator[Any]:
    """Start `joiner run` with the given flags (`registration_timeout="5"` -> --registration-timeout 5)."""
    started: list[Joiner] = []

    def start(**flags: str) -> Joiner:
        joiner = Joiner(
            cluster=cluster,
            log_path=tmp_path / f"joiner-{len(started)}.log",
            flags={k.replace("_", "-"): str(v) for k, v in flags.items()},
        )
        started.append(joiner)
        return joiner.start()

    yield start
    for joiner in started:
        joiner.stop()
    if os.environ.get("JOINER_E2E_SHOW_LOGS"):
        for joiner in started:
            print(joiner.logs())


def wait_seconds(seconds: float) -> None:
    """Let real time pass where a test must show that something does NOT happen."""
    time.sleep(seconds)
