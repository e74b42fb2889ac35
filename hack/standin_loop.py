"""What the three kubelet stand-ins (hack/aws_kubelet.py, gcp_kubelet.py, azure_kubelet.py) share:
kubectl against the cluster, this loop's Nodes by providerID, deleting the Nodes whose machine is
gone, and the loop itself (``run`` until ``stop``, or ``running()`` in a thread for a test).

Each stand-in is a dataclass with the fields declared here and a ``sync_once`` that creates the
Nodes of new machines and returns (created, deleted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Self

Obj = dict[str, Any]


class StandInLoop:
    LOOP: ClassVar[str]  # its name in thread names and error lines, e.g. "aws-kubelet"
    MANAGED: ClassVar[str]  # the label on the Nodes this loop made: it deletes no other Node
    kubeconfig: Path
    kubectl: str
    interval: float
    _stop: threading.Event

    def sync_once(self) -> tuple[int, int]:  # pragma: no cover - every stand-in has its own
        raise NotImplementedError

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run(
            [self.kubectl, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
        )
        if proc.returncode != 0 and "NotFound" not in proc.stderr and "AlreadyExists" not in proc.stderr:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def nodes(self) -> dict[str, Obj]:
        """This loop's Nodes by providerID."""
        out = json.loads(self._kubectl("get", "nodes", "-l", f"{self.MANAGED}=true", "-o", "json") or '{"items": []}')
        return {n["spec"].get("providerID", ""): n for n in out["items"]}

    def delete_gone(self, nodes: dict[str, Obj], alive: set[str]) -> int:
        """Delete this loop's Nodes whose machine is gone; how many."""
        deleted = 0
        for provider_id, node in nodes.items():
            if provider_id not in alive and not node["metadata"].get("deletionTimestamp"):
                self._kubectl("delete", "node", node["metadata"]["name"], "--wait=false")
                deleted += 1
        return deleted

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception as err:  # a fake, moto or apiserver hiccup: the next round tries again
                print(f"{self.LOOP}: {err}", file=sys.stderr, flush=True)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()

    @contextmanager
    def running(self) -> Iterator[Self]:
        thread = threading.Thread(target=self.run, name=self.LOOP, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop()
            thread.join(timeout=30)
