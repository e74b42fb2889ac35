"""Plays the kubelets of the EC2 instances joiner buys from a moto server, on the local KWOK cluster.

    .venv/bin/python -m hack.aws_kubelet --endpoint-url http://127.0.0.1:5000 --cluster-name demo \\
        [--kubeconfig .kwok/kubeconfig] [--region us-east-1] [--registration-delay 2]

moto runs no machines, so nothing would ever join the cluster. This loop does what a real instance's
kubelet and the cloud's node lifecycle controller do, and nothing more:

* every ``pending`` or ``running`` instance tagged ``joiner.sh/cluster=<cluster name>`` gets a Node
  once it is ``--registration-delay`` seconds old: named after its private DNS name, with
  ``spec.providerID`` ``aws:///<zone>/<instance id>``; the well-known labels a kubelet and the cloud
  provider set (hostname, arch, os, instance type, zone, region); capacity from
  DescribeInstanceTypes (vCPUs, memory, ``nvidia.com/gpu`` from ``GpuInfo`` -- what the device plugin
  would register -- and pods as the user data's ``maxPods``/``max-pods`` says, else counted from the
  default network card's interfaces as the EKS images do); allocatable minus EKS-style
  kube-reserved and the eviction threshold. The taints and extra labels are the
  ``--register-with-taints`` and ``--node-labels`` kubelet flags found in the instance's user
  data (base64, any format: a shell script, a nodeadm NodeConfig, MIME parts), exactly
  as a kubelet started with them would register; none when the user data passes none.
* the Node carries ``kwok.x-k8s.io/node: fake``, so kwok makes it Ready and runs its pods;
* a Node whose instance is ``shutting-down``/``terminated`` (or gone) is deleted, as the cloud
  node lifecycle controller does.

It talks to moto with boto3 and to the cluster with the pinned kubectl: it shares no code with joiner,
so it checks joiner's guesses (capacity, labels, providerID) instead of repeating them.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from hack.standin_loop import StandInLoop

Obj = dict[str, Any]
TAG_CLUSTER = "joiner.sh/cluster"
MANAGED = "joiner.sh/aws-kubelet"  # a label on the Nodes this loop made: it deletes no other Node
MIB = 1024 * 1024
_FLAG = re.compile(r"--(register-with-taints|node-labels)[= ]([^\s\"'\\\]]+)")


def kubelet_flags(user_data: str) -> tuple[list[Obj], dict[str, str]]:
    """The taints and labels of ``--register-with-taints`` / ``--node-labels`` in decoded user data.

    ``key=value:Effect`` or ``key:Effect`` taints, ``k=v`` labels, comma-separated, as kubelet reads them.
    """
    taints: list[Obj] = []
    labels: dict[str, str] = {}
    for flag, value in _FLAG.findall(user_data):
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
    """EKS's kube-reserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of the next two,
    0.25 % of the rest."""
    millis = 0.0
    for core in range(vcpus):
        millis += 60 if core == 0 else 10 if core == 1 else 5 if core < 4 else 2.5
    return int(millis)


def eni_pods(network: Obj) -> int:
    """What the EKS images' max-pods calculator gives for a DescribeInstanceTypes ``NetworkInfo``:
    the interfaces of the default network card (pod addresses live there; other cards carry EFA
    and bandwidth), each with its addresses less its own, plus the two host-network pods."""
    index = network.get("DefaultNetworkCardIndex", 0)
    cards = [c for c in network.get("NetworkCards") or [] if c.get("NetworkCardIndex", 0) == index]
    interfaces = cards[0]["MaximumNetworkInterfaces"] if cards else network.get("MaximumNetworkInterfaces", 0)
    addresses = network.get("Ipv4AddressesPerInterface", 0)
    if not interfaces or addresses < 2:
        return 110
    return int(interfaces) * (int(addresses) - 1) + 2


def configured_max_pods(user_data: str) -> int | None:
    """The maxPods a kubelet is started with by its user data: nodeadm's ``kubelet.config.maxPods``
    or Bottlerocket's ``settings.kubernetes.max-pods`` (the last one given wins, as nodeadm merges)."""
    found = re.findall(r"^\s*(?:maxPods:|max-pods\s*=)\s*(\d+)\s*$", user_data, flags=re.M)
    return int(found[-1]) if found else None


def node_resources(itype: Obj, *, user_data: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of a DescribeInstanceTypes entry, as a kubelet would report them: pods
    as its user data configures, else as the EKS image computes them."""
    vcpus = int(itype["VCpuInfo"]["DefaultVCpus"])
    mem_mib = int(itype["MemoryInfo"]["SizeInMiB"])
    pods = configured_max_pods(user_data) or eni_pods(itype.get("NetworkInfo") or {})
    gpus = sum(int(g.get("Count") or 0) for g in (itype.get("GpuInfo") or {}).get("Gpus") or [])
    # the kernel and firmware keep a little of the nominal memory
    seen_mib = int(mem_mib * 0.96)
    capacity = {"cpu": str(vcpus), "memory": f"{seen_mib}Mi", "pods": str(pods), "ephemeral-storage": "200Gi"}
    reserved_mib = 255 + 11 * pods + 100  # kube-reserved plus the 100Mi eviction threshold
    allocatable = {
        "cpu": f"{vcpus * 1000 - reserved_cpu_millis(vcpus)}m",
        "memory": f"{seen_mib - reserved_mib}Mi",
        "pods": str(pods),
        "ephemeral-storage": "190Gi",
    }
    if gpus:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
    return capacity, allocatable


def _arch(itype: Obj) -> str:
    archs = (itype.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    return "arm64" if "arm64" in archs else "amd64"


@dataclass
class StandIn(StandInLoop):
    """The kubelet stand-in. ``sync_once`` does one round; ``run`` loops until ``stop``."""

    LOOP = "aws-kubelet"
    MANAGED = MANAGED

    endpoint_url: str
    cluster_name: str
    kubeconfig: Path
    kubectl: str = "kubectl"
    region: str = "us-east-1"
    registration_delay: float = 0.0
    interval: float = 0.5
    registered: dict[str, float] = field(default_factory=dict)  # instance id -> when its Node was created
    _types: dict[str, Obj] = field(default_factory=dict)
    _user_data: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=self.region, endpoint_url=self.endpoint_url)

    # --- AWS ------------------------------------------------------------------------------------

    def instances(self) -> list[Obj]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_name]}]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def instance_type(self, name: str) -> Obj:
        if name not in self._types:
            self._types[name] = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]
        return self._types[name]

    def user_data(self, instance: Obj) -> str:
        """The instance's decoded user data ('' if none): what its kubelet would be started with."""
        iid = instance["InstanceId"]
        if iid not in self._user_data:
            try:
                got = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
                raw = (got.get("UserData") or {}).get("Value") or ""
            except Exception:  # gone since: register without flags
                raw = ""
            self._user_data[iid] = base64.b64decode(raw).decode("utf-8", "replace") if raw else ""
        return self._user_data[iid]

    # --- Kubernetes -----------------------------------------------------------------------------

    def node_manifest(self, instance: Obj) -> Obj:
        zone = instance["Placement"]["AvailabilityZone"]
        itype = self.instance_type(instance["InstanceType"])
        capacity, allocatable = node_resources(itype, user_data=self.user_data(instance))
        taints, extra = kubelet_flags(self.user_data(instance))
        name = instance.get("PrivateDnsName") or instance["InstanceId"]
        labels = {
            **extra,
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(itype),
            "node.kubernetes.io/instance-type": instance["InstanceType"],
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": self.region,
            MANAGED: "true",
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": f"aws:///{zone}/{instance['InstanceId']}", "taints": taints},
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
            zone = instance["Placement"]["AvailabilityZone"]
            provider_id = f"aws:///{zone}/{instance['InstanceId']}"
            state = instance["State"]["Name"]
            if state not in ("pending", "running"):
                continue
            alive.add(provider_id)
            if provider_id in nodes:
                continue
            launched = instance["LaunchTime"].timestamp()
            if now - launched < self.registration_delay:
                continue
            self._kubectl("create", "-f", "-", stdin=json.dumps(self.node_manifest(instance)))
            self.registered[instance["InstanceId"]] = now
            created += 1
        deleted += self.delete_gone(nodes, alive)
        return created, deleted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.aws_kubelet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint-url", required=True, help="the moto server")
    parser.add_argument("--cluster-name", required=True, help="joiner's --cluster-name")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ".kwok/kubeconfig"))
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--registration-delay", type=float, default=0.0, help="seconds from launch to Node")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    standin = StandIn(
        endpoint_url=args.endpoint_url,
        cluster_name=args.cluster_name,
        kubeconfig=Path(args.kubeconfig),
        kubectl=args.kubectl,
        region=args.region,
        registration_delay=args.registration_delay,
        interval=args.interval,
    )
    print(f"aws-kubelet: registering the instances of cluster {args.cluster_name} at {args.endpoint_url}", flush=True)
    with suppress(KeyboardInterrupt):
        standin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
