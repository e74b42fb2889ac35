"""Plays the kubelets of the Azure VMs joiner buys from the fake ARM server, on the local KWOK cluster.

    .venv/bin/python -m hack.azure_kubelet --endpoint http://127.0.0.1:8091 --cluster-name demo \\
        --subscription SUB --resource-group RG [--kubeconfig .kwok/kubeconfig]

The fake runs no machines. This loop does what a VM's kubelet and the cloud's node lifecycle
controller do: every VM tagged ``joiner-cluster=<cluster name>`` whose provisioning Succeeded gets a
KWOK Node named after it with ``spec.providerID`` ``azure:///subscriptions/.../virtualMachines/<name>``
(as the Azure cloud provider writes it), zone ``<location>-<zone>``, the capacity of its size from
Resource SKUs (``vCPUs``, ``MemoryGB``, ``GPUs`` as ``nvidia.com/gpu``), and the taints and labels of
the ``--register-with-taints`` / ``--node-labels`` kubelet flags in its cloud-init ``customData`` (the
VM's kubelet sees its custom data; the fake returns it, ARM itself does not); a Node whose VM is gone
is deleted. It speaks ARM's REST API with urllib and the cluster with kubectl: no code of joiner.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import threading
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack.standin_loop import StandInLoop

Obj = dict[str, Any]
TAG_CLUSTER = "joiner-cluster"
MANAGED = "joiner.sh/azure-kubelet"
API_VERSION = "2024-07-01"
_FLAG = re.compile(r"--(register-with-taints|node-labels)[= ]([^\s\"'\\\]]+)")


def kubelet_flags(script: str) -> tuple[list[Obj], dict[str, str]]:
    """The taints and labels of ``--register-with-taints`` / ``--node-labels`` in cloud-init."""
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


@dataclass
class StandIn(StandInLoop):
    LOOP = "azure-kubelet"
    MANAGED = MANAGED
    endpoint: str
    cluster_name: str
    subscription: str
    resource_group: str
    kubeconfig: Path
    kubectl: str = "kubectl"
    interval: float = 0.5
    _sizes: dict[str, Obj] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _get(self, path_or_url: str) -> Obj:
        """A GET of an ARM path (api-version added) or of a ``nextLink`` (used as it is)."""
        url = path_or_url
        if not url.startswith("http"):
            url = f"{self.endpoint.rstrip('/')}{path_or_url}?api-version={API_VERSION}"
        with urllib.request.urlopen(url, timeout=30) as response:
            answer: Obj = json.loads(response.read())
        return answer

    def vms(self) -> list[Obj]:
        rg = f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
        return [
            vm
            for vm in self._get(f"{rg}/providers/Microsoft.Compute/virtualMachines").get("value") or []
            if (vm.get("tags") or {}).get(TAG_CLUSTER) == self.cluster_name
        ]

    def size(self, name: str) -> Obj:
        if not self._sizes:
            where: str | None = f"/subscriptions/{self.subscription}/providers/Microsoft.Compute/skus"
            while where:
                page = self._get(where)
                for row in page.get("value") or []:
                    if row.get("resourceType") == "virtualMachines":
                        self._sizes[str(row["name"])] = {c["name"]: c["value"] for c in row.get("capabilities") or []}
                where = page.get("nextLink") or None
        return self._sizes[name]

    def node_manifest(self, vm: Obj) -> Obj:
        size = vm["properties"]["hardwareProfile"]["vmSize"]
        caps = self.size(size)
        vcpus = int(float(caps["vCPUs"]))
        mib = int(float(caps["MemoryGB"]) * 1024 * 0.96)
        capacity = {"cpu": str(vcpus), "memory": f"{mib}Mi", "pods": "110", "ephemeral-storage": "200Gi"}
        allocatable = {
            "cpu": f"{vcpus * 1000 - 100}m",
            "memory": f"{mib - 1565}Mi",
            "pods": "110",
            "ephemeral-storage": "180Gi",
        }
        gpus = int(float(caps.get("GPUs", "0")))
        if gpus:
            capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
        zone = f"{vm['location']}-{(vm.get('zones') or ['1'])[0]}"
        custom = str(((vm.get("properties") or {}).get("osProfile") or {}).get("customData") or "")
        taints, extra = kubelet_flags(base64.b64decode(custom).decode("utf-8", "replace") if custom else "")
        labels = {
            **extra,
            "kubernetes.io/hostname": vm["name"],
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": size,
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": vm["location"],
            MANAGED: "true",
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": vm["name"], "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": f"azure://{vm['id']}", "taints": taints},
            "status": {"capacity": capacity, "allocatable": allocatable},
        }

    def sync_once(self) -> tuple[int, int]:
        nodes = self.nodes()
        created = deleted = 0
        alive: set[str] = set()
        for vm in self.vms():
            if (vm.get("properties") or {}).get("provisioningState") != "Succeeded":
                continue
            provider_id = f"azure://{vm['id']}"
            alive.add(provider_id)
            if provider_id not in nodes:
                self._kubectl("create", "-f", "-", stdin=json.dumps(self.node_manifest(vm)))
                created += 1
        deleted += self.delete_gone(nodes, alive)
        return created, deleted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.azure_kubelet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--subscription", required=True)
    parser.add_argument("--resource-group", required=True)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ".kwok/kubeconfig"))
    parser.add_argument("--kubectl", default="kubectl")
    args = parser.parse_args(argv)
    standin = StandIn(
        endpoint=args.endpoint,
        cluster_name=args.cluster_name,
        subscription=args.subscription,
        resource_group=args.resource_group,
        kubeconfig=Path(args.kubeconfig),
        kubectl=args.kubectl,
    )
    with suppress(KeyboardInterrupt):
        standin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
