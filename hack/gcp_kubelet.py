"""Plays the kubelets of the Compute Engine instances joiner buys from the fake GCE server, on the
local KWOK cluster.

    .venv/bin/python -m hack.gcp_kubelet --endpoint http://127.0.0.1:8090 --cluster-name demo \\
        [--project joiner-test] [--kubeconfig .kwok/kubeconfig] [--registration-delay 2]

The fake runs no machines, so nothing would ever join the cluster. This loop does what a real
instance's kubelet and the cloud's node lifecycle controller do, and nothing more:

* every ``RUNNING`` instance labelled ``joiner-cluster=<cluster name>`` gets a Node once it is
  ``--registration-delay`` seconds old: named after the instance (GCE's hostnames are its name),
  ``spec.providerID`` ``gce://<project>/<zone>/<name>`` as the GCE cloud provider writes it; the
  well-known labels (hostname, arch, os, instance type, zone, region); capacity from the machine
  type (``guestCpus``, ``memoryMb``, and ``nvidia.com/gpu`` from its built-in ``accelerators`` or the
  instance's ``guestAccelerators``, what the device plugin would register); allocatable minus
  GKE-style reservations. Taints and extra labels are the ``--register-with-taints`` and
  ``--node-labels`` kubelet flags in the instance's ``startup-script`` metadata, if any.
* the Node carries ``kwok.x-k8s.io/node: fake``, so kwok makes it Ready and runs its pods;
* a Node whose instance is no longer RUNNING (preempted and deleted, stopped by a host event,
  deleted) is deleted, as the cloud node lifecycle controller does.

It speaks the Compute REST API with urllib and the cluster with the pinned kubectl: it shares no code
with joiner, so it checks joiner's guesses (capacity, labels, providerID) instead of repeating them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hack.standin_loop import StandInLoop

Obj = dict[str, Any]
LABEL_CLUSTER = "joiner-cluster"
MANAGED = "joiner.sh/gcp-kubelet"  # a label on the Nodes this loop made: it deletes no other Node
_FLAG = re.compile(r"--(register-with-taints|node-labels)[= ]([^\s\"'\\\]]+)")


def kubelet_flags(script: str) -> tuple[list[Obj], dict[str, str]]:
    """The taints and labels of ``--register-with-taints`` / ``--node-labels`` in a startup script."""
    taints: list[Obj] = []
    labels: dict[str, str] = {}
    for flag, value in _FLAG.findall(script):
        for item in filter(None, value.split(",")):
            if flag == "node-labels":
                key, _, val = item.partition("=")
                labels[key] = val
                continue
            spec, _, effect = item.rpartition(":")
            key, _, val = spec.partition("=")
            taint: Obj = {"key": key, "effect": effect}
            if val:
                taint["value"] = val
            taints.append(taint)
    return taints, labels


def reserved_cpu_millis(vcpus: int) -> int:
    """GKE's CPU reservation: 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 %
    of the rest."""
    millis = 0.0
    for core in range(vcpus):
        millis += 60 if core == 0 else 10 if core == 1 else 5 if core < 4 else 2.5
    return int(millis)


def node_resources(machine: Obj, instance: Obj) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of an instance of a machine type, as its kubelet would report them."""
    vcpus = int(machine["guestCpus"])
    seen_mib = int(int(machine["memoryMb"]) * 0.96)  # the kernel and firmware keep some
    gpus = sum(int(a.get("guestAcceleratorCount") or 0) for a in machine.get("accelerators") or [])
    gpus += sum(int(a.get("acceleratorCount") or 0) for a in instance.get("guestAccelerators") or [])
    capacity = {"cpu": str(vcpus), "memory": f"{seen_mib}Mi", "pods": "110", "ephemeral-storage": "200Gi"}
    allocatable = {
        "cpu": f"{vcpus * 1000 - reserved_cpu_millis(vcpus)}m",
        "memory": f"{seen_mib - (255 + 11 * 110 + 100)}Mi",
        "pods": "110",
        "ephemeral-storage": "180Gi",
    }
    if gpus:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
    return capacity, allocatable


def _last(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class StandIn(StandInLoop):
    """The kubelet stand-in. ``sync_once`` does one round; ``run`` loops until ``stop``."""

    LOOP = "gcp-kubelet"
    MANAGED = MANAGED

    endpoint: str  # the fake's root, e.g. http://127.0.0.1:8090
    cluster_name: str
    kubeconfig: Path
    project: str = "joiner-test"
    kubectl: str = "kubectl"
    registration_delay: float = 0.0
    interval: float = 0.5
    registered: dict[str, float] = field(default_factory=dict)  # instance name -> when its Node was created
    _machines: dict[tuple[str, str], Obj] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    # --- Compute Engine -------------------------------------------------------------------------

    def _get(self, path: str, **query: str) -> Obj:
        url = f"{self.endpoint.rstrip('/')}/compute/v1/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=30) as resp:
            answer: Obj = json.loads(resp.read())
        return answer

    def instances(self) -> list[Obj]:
        out: list[Obj] = []
        token = ""
        while True:
            query = {"filter": f'labels.{LABEL_CLUSTER} = "{self.cluster_name}"'}
            if token:
                query["pageToken"] = token
            page = self._get(f"projects/{self.project}/aggregated/instances", **query)
            for scoped in (page.get("items") or {}).values():
                out += scoped.get("instances") or []
            token = str(page.get("nextPageToken") or "")
            if not token:
                return out

    def machine_type(self, zone: str, name: str) -> Obj:
        if (zone, name) not in self._machines:
            token = ""
            while True:
                page = self._get(
                    f"projects/{self.project}/zones/{zone}/machineTypes", **({"pageToken": token} if token else {})
                )
                for row in page.get("items") or []:
                    self._machines[(zone, str(row["name"]))] = row
                token = str(page.get("nextPageToken") or "")
                if not token:
                    break
        return self._machines[(zone, name)]

    # --- Kubernetes -----------------------------------------------------------------------------

    def node_manifest(self, instance: Obj) -> Obj:
        zone = _last(instance["zone"])
        machine_name = _last(instance["machineType"])
        machine = self.machine_type(zone, machine_name)
        capacity, allocatable = node_resources(machine, instance)
        items = {i["key"]: i.get("value", "") for i in (instance.get("metadata") or {}).get("items") or []}
        taints, extra = kubelet_flags(str(items.get("startup-script") or ""))
        accelerators = instance.get("guestAccelerators") or []
        instance_type = machine_name
        if accelerators:  # an N1 machine with attached GPUs: joiner's name for the combination
            acc = accelerators[0]
            instance_type = f"{machine_name}_{_last(acc['acceleratorType'])}_{acc['acceleratorCount']}"
        labels = {
            **extra,
            "kubernetes.io/hostname": instance["name"],
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64" if machine.get("architecture") == "ARM64" else "amd64",
            "node.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": zone.rsplit("-", 1)[0],
            MANAGED: "true",
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": instance["name"], "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": f"gce://{self.project}/{zone}/{instance['name']}", "taints": taints},
            "status": {"capacity": capacity, "allocatable": allocatable},
        }

    # --- the loop -------------------------------------------------------------------------------

    def sync_once(self, now: float | None = None) -> tuple[int, int]:
        """Register the instances that are due and delete the Nodes of the gone ones: (created, deleted)."""
        now = time.time() if now is None else now
        nodes = self.nodes()
        created = deleted = 0
        alive: set[str] = set()
        for instance in self.instances():
            if instance.get("status") != "RUNNING":
                continue
            provider_id = f"gce://{self.project}/{_last(instance['zone'])}/{instance['name']}"
            alive.add(provider_id)
            if provider_id in nodes:
                continue
            launched = datetime.fromisoformat(str(instance["creationTimestamp"])).timestamp()
            if now - launched < self.registration_delay:
                continue
            self._kubectl("create", "-f", "-", stdin=json.dumps(self.node_manifest(instance)))
            self.registered[instance["name"]] = now
            created += 1
        deleted += self.delete_gone(nodes, alive)
        return created, deleted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.gcp_kubelet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="the fake GCE server's root URL")
    parser.add_argument("--cluster-name", required=True, help="joiner's --cluster-name")
    parser.add_argument("--project", default="joiner-test")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ".kwok/kubeconfig"))
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--registration-delay", type=float, default=0.0, help="seconds from creation to Node")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    standin = StandIn(
        endpoint=args.endpoint,
        cluster_name=args.cluster_name,
        project=args.project,
        kubeconfig=Path(args.kubeconfig),
        kubectl=args.kubectl,
        registration_delay=args.registration_delay,
        interval=args.interval,
    )
    print(f"gcp-kubelet: registering the instances of cluster {args.cluster_name} at {args.endpoint}", flush=True)
    with suppress(KeyboardInterrupt):
        standin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
