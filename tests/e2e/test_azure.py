"""joiner with the azure provider, end to end: pods -> NodeClaims -> Azure VMs (the fake ARM server of
tests/azure, as its own process, through the real azure-mgmt-compute client) -> Nodes -> Running.

The fake runs no machines, so `hack.azure_kubelet` plays their kubelets: every VM tagged with the
cluster whose provisioning succeeded gets a KWOK Node with its providerID and the capacity of its
size. A Spot eviction of one gang member reaches joiner as the Resource Health annotation Event Grid
would put on a Service Bus queue (the fake serves the queue too), and the gang restarts elsewhere.

Run alone: JOINER_CLUSTER_DIR=/tmp/kwok-azure .venv/bin/pytest tests/e2e/test_azure.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hack.azure_kubelet import StandIn
from hack.ports import free_port
from tests.azure.fake_arm import LOCATION, RG, SUBSCRIPTION
from tests.e2e.harness import ROOT, Cluster, eventually
from tests.e2e.manifests import deployment, expect_event, is_true, nodeclaims, req
from tests.e2e.test_gang import (
    FAST_GANGS,
    PartialStartWatch,
    expect_gang_restarted,
    gang_claims,
    gang_statefulset,
    pods_of,
)

Obj = dict[str, Any]
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GALLERY = "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images"


@pytest.fixture
def fake_arm() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.azure.fake_arm", "--port", str(port), "--operation-seconds", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/api/retail/prices", timeout=2):
                return True
        except OSError:
            return False

    try:
        eventually(up, timeout=30, interval=0.2, what="the fake ARM server")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def aks_nodeclass() -> Obj:
    network = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Network"
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "subscriptionID": SUBSCRIPTION,
            "resourceGroup": RG,
            "location": LOCATION,
            "vnetSubnetID": f"{network}/virtualNetworks/aks-vnet/subnets/nodes",
            "imageID": f"{GALLERY}/2204gen2containerd/versions/latest",
            "gpuImageID": f"{GALLERY}/2204gen2gpu/versions/latest",
            "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITESTKEY e2e",
            "osDiskSizeGB": 256,
            "customData": "#cloud-config\nruncmd:\n  - [/opt/bin/kubelet, "
            "--register-with-taints=joiner.sh/unregistered=true:NoSchedule]\n",
        },
    }


def azure_nodepool(name: str, *, types: list[str], taints: list[Obj] | None = None) -> Obj:
    spec: Obj = {
        "nodeClassRef": {"group": "joiner.sh", "kind": "AKSNodeClass", "name": "default"},
        "requirements": [req(INSTANCE_TYPE, "In", *types), req("joiner.sh/capacity-type", "In", "spot", "on-demand")],
    }
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }


def vms(url: str) -> dict[str, Obj]:
    path = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines"
    with urllib.request.urlopen(f"{url}{path}?api-version=2024-07-01", timeout=10) as response:
        return {vm["name"]: vm for vm in json.loads(response.read())["value"]}


def test_pods_run_on_azure_vms_and_an_evicted_gang_member_restarts_the_gang(
    cluster: Cluster, start_joiner: Any, fake_arm: str
) -> None:
    cluster_name = f"az-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        [
            aks_nodeclass(),
            azure_nodepool("cpu", types=["Standard_D2s_v5", "Standard_D4s_v5"]),
            azure_nodepool("t4", types=["Standard_NC4as_T4_v3"], taints=[GPU_TAINT]),
        ]
    )
    standin = StandIn(
        endpoint=fake_arm,
        cluster_name=cluster_name,
        subscription=SUBSCRIPTION,
        resource_group=RG,
        kubeconfig=cluster.kubeconfig,
        kubectl=str(cluster.bin_dir / "kubectl"),
    )
    with standin.running():
        start_joiner(
            provider="azure",
            cluster_name=cluster_name,
            azure_endpoint=fake_arm,
            azure_prices_endpoint=fake_arm,
            azure_interruption_queue=f"{fake_arm}/servicebus/interruptions",
            **{**FAST_GANGS, "unavailable_offering_ttl": "600"},
        )
        eventually(
            lambda: is_true(cluster.get("aksnodeclasses", "default"), "Ready"),
            timeout=60,
            what="the AKSNodeClass Ready (its location's VM sizes listed)",
        )
        ns = cluster.create_namespace(f"az-{uuid.uuid4().hex[:6]}")
        cluster.apply(
            [
                deployment("web", ns, replicas=3, cpu="500m", memory="1Gi"),
                gang_statefulset("trainer", ns, size=2, gpu_name="T4"),
            ]
        )

        def all_running() -> list[Obj] | None:
            pods = cluster.items("pods", namespace=ns)
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return running if len(running) == 5 == len(pods) else None

        with PartialStartWatch(cluster, ns, "trainer"):
            running = eventually(all_running, timeout=180, interval=1, what="3 web pods and a 2-member gang Running")

        # each NodeClaim is a VM named after it and tagged for the cluster; each Node is that VM
        claims = {c["metadata"]["name"]: c for c in nodeclaims(cluster)}
        azure = vms(fake_arm)
        for name, claim in claims.items():
            assert claim["status"]["providerID"] == f"azure://{azure[name]['id']}"
            assert azure[name]["tags"]["joiner-cluster"] == cluster_name
            assert azure[name]["properties"]["hardwareProfile"]["vmSize"] == claim["metadata"]["labels"][INSTANCE_TYPE]
            assert is_true(claim, "Initialized")
        assert len(gang_claims(cluster, ns, "trainer")) == 2
        for p in running:
            node = cluster.get("nodes", p["spec"]["nodeName"])
            if p["metadata"]["labels"].get("joiner.sh/gang"):
                assert node["metadata"]["labels"]["joiner.sh/gpu-name"] == "T4"
                image = azure[node["metadata"]["name"]]["properties"]["storageProfile"]["imageReference"]
                assert image["communityGalleryImageId"].startswith(f"{GALLERY}/2204gen2gpu/")
            else:
                assert node["metadata"]["labels"]["joiner.sh/nodepool"] == "cpu"

        # a Spot eviction of one gang member, as Resource Health reports it through the Service Bus queue
        members = gang_claims(cluster, ns, "trainer")
        victim_claim = members[0]
        old_uids = {p["metadata"]["uid"] for p in pods_of(cluster, ns, "trainer")}
        request = urllib.request.Request(f"{fake_arm}/_fake/evict/{victim_claim['metadata']['name']}", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass
        expect_event(cluster, namespace=ns, name="trainer-0", reason="GangMemberLost", timeout=60)
        again = expect_gang_restarted(cluster, ns, "trainer", 2, old_uids=old_uids, timeout=180)
        evicted = (
            victim_claim["metadata"]["labels"][INSTANCE_TYPE],
            victim_claim["metadata"]["labels"]["topology.kubernetes.io/zone"],
            victim_claim["metadata"]["labels"]["joiner.sh/capacity-type"],
        )
        for p in again:
            labels = cluster.get("nodes", p["spec"]["nodeName"])["metadata"]["labels"]
            got = (labels[INSTANCE_TYPE], labels["topology.kubernetes.io/zone"], labels["joiner.sh/capacity-type"])
            assert got != evicted, "the gang went back to the evicted Spot offering"

        # a NodeClaim deleted: its node drained and its VM deleted through ARM
        victim = next(n for n, c in claims.items() if c["metadata"]["labels"]["joiner.sh/nodepool"] == "cpu")
        cluster.kubectl("delete", "nodeclaim", victim, "--wait=false")
        eventually(lambda: victim not in vms(fake_arm), timeout=90, what=f"the VM of {victim} deleted")
        eventually(all_running, timeout=120, interval=1, what="the web pods Running again elsewhere")
