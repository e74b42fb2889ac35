"""joiner with the gcp provider, end to end: pods -> NodeClaims -> Compute Engine (the fake server of
tests/gcp, as its own process) -> Nodes -> Running.

The fake runs no machines, so `hack.gcp_kubelet` plays their kubelets: every RUNNING instance labelled
with the cluster gets a KWOK Node with its providerID and the capacity of its machine type. Everything
else is the real thing: `joiner run --provider gcp` against the fake's Compute and Pub/Sub APIs
(instances.insert, bulkInsert for the gang, zone operations, aggregated lists, delete), the audit-log
entry of a spot preemption on the Pub/Sub subscription, kube-scheduler and kwok running the pods.

Run alone: JOINER_CLUSTER_DIR=/tmp/kwok-gcp .venv/bin/pytest tests/e2e/test_gcp.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hack.gcp_kubelet import StandIn
from hack.ports import free_port
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
PROJECT = "joiner-test"
SUBSCRIPTION = f"projects/{PROJECT}/subscriptions/interruptions"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
STARTUP = "#!/bin/bash\n/opt/bin/kubelet --register-with-taints=joiner.sh/unregistered=true:NoSchedule\n"


@pytest.fixture
def fake_gce() -> Iterator[str]:
    """tests/gcp/fake_gce/ as its own process: joiner and the kubelet player reach it over HTTP."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.gcp.fake_gce", "--port", str(port), "--operation-seconds", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/_fake/instances", timeout=2):
                return True
        except OSError:
            return False

    try:
        eventually(up, timeout=30, interval=0.2, what="the fake GCE server")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def fake(url: str, path: str, body: Obj | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{url}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


def gce_nodeclass() -> Obj:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "GCENodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "project": PROJECT,
            "region": "us-central1",
            "subnetworkSelectorTerms": [{"name": "gpu-nodes"}],
            "imageSelectorTerms": [
                {"image": f"projects/{PROJECT}/global/images/family/gpu-node", "gpu": True},
                {"image": "projects/cos-cloud/global/images/family/cos-stable"},
            ],
            "serviceAccount": {"email": f"nodes@{PROJECT}.iam.gserviceaccount.com"},
            "disks": [{"boot": True, "category": "pd-ssd", "sizeGiB": 200}],
            "startupScript": STARTUP,
        },
    }


def gcp_nodepool(name: str, *, types: list[str], taints: list[Obj] | None = None) -> Obj:
    spec: Obj = {
        "nodeClassRef": {"group": "joiner.sh", "kind": "GCENodeClass", "name": "default"},
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


def instance_name(claim: Obj) -> tuple[str, str]:
    provider_id = claim["status"]["providerID"]
    assert provider_id.startswith(f"gce://{PROJECT}/"), provider_id
    _, zone, name = provider_id.removeprefix("gce://").split("/")
    return zone, name


def test_pods_run_on_gce_instances_and_a_preempted_gang_member_restarts_the_gang(
    cluster: Cluster, start_joiner: Any, fake_gce: str
) -> None:
    cluster_name = f"gcp-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        [
            gce_nodeclass(),
            gcp_nodepool("cpu", types=["e2-standard-2", "e2-standard-4"]),
            gcp_nodepool("l4", types=["g2-standard-8", "g2-standard-24"], taints=[GPU_TAINT]),
        ]
    )
    standin = StandIn(
        endpoint=fake_gce,
        cluster_name=cluster_name,
        kubeconfig=cluster.kubeconfig,
        kubectl=str(cluster.bin_dir / "kubectl"),
    )
    with standin.running():
        joiner = start_joiner(
            provider="gcp",
            cluster_name=cluster_name,
            region="us-central1",
            gcp_compute_endpoint=f"{fake_gce}/compute/v1/",
            gcp_pubsub_endpoint=f"{fake_gce}/v1/",
            gcp_billing_endpoint=f"{fake_gce}/v1/",
            gcp_container_endpoint=f"{fake_gce}/v1/",
            interruption_subscription=SUBSCRIPTION,
            **{**FAST_GANGS, "unavailable_offering_ttl": "600"},
        )
        eventually(
            lambda: is_true(cluster.get("gcenodeclasses", "default"), "Ready"),
            timeout=60,
            what="the GCENodeClass resolved (region, subnetwork, images)",
        )
        ns = cluster.create_namespace(f"gcp-{uuid.uuid4().hex[:6]}")
        cluster.apply(
            [
                deployment("web", ns, replicas=3, cpu="500m", memory="1Gi"),
                gang_statefulset("trainer", ns, size=2, gpu_name="L4"),
            ]
        )

        def all_running() -> list[Obj] | None:
            pods = cluster.items("pods", namespace=ns)
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return running if len(running) == 5 == len(pods) else None

        with PartialStartWatch(cluster, ns, "trainer"):
            running = eventually(all_running, timeout=180, interval=1, what="3 web pods and a 2-member gang Running")

        # each NodeClaim is an instance named after it, labelled for the cluster; each Node is that instance
        claims = {c["metadata"]["name"]: c for c in nodeclaims(cluster)}
        gce = {i["name"]: i for i in fake(fake_gce, "/_fake/instances")}
        for name, claim in claims.items():
            zone, instance = instance_name(claim)
            assert instance == name
            assert gce[name]["labels"]["joiner-cluster"] == cluster_name
            assert gce[name]["zone"].endswith(f"/{zone}")
            assert gce[name]["machineType"].endswith("/" + claim["metadata"]["labels"][INSTANCE_TYPE])
            assert is_true(claim, "Initialized")
        for p in running:
            node = cluster.get("nodes", p["spec"]["nodeName"])
            owner = next(c for c in claims.values() if c["status"]["providerID"] == node["spec"]["providerID"])
            if p["metadata"]["labels"].get("joiner.sh/gang"):
                assert owner["metadata"]["labels"]["joiner.sh/nodepool"] == "l4"
                assert node["metadata"]["labels"]["joiner.sh/gpu-name"] == "L4"
                assert any(t["key"] == "nvidia.com/gpu" for t in node["spec"].get("taints") or [])
                # the GPU machines boot the GPU image, the others the COS family's newest
                items = {i["key"]: i["value"] for i in gce[owner["metadata"]["name"]]["metadata"]["items"]}
                assert items["joiner-image"] == f"projects/{PROJECT}/global/images/gpu-node-v1"
            else:
                assert owner["metadata"]["labels"]["joiner.sh/nodepool"] == "cpu"
            assert not any(t["key"] == "joiner.sh/unregistered" for t in node["spec"].get("taints") or [])

        # the gang's two machines came from one bulkInsert (one attempt label on both)
        members = gang_claims(cluster, ns, "trainer")
        assert len(members) == 2
        attempts = {gce[m["metadata"]["name"]]["labels"].get("joiner-gang-attempt") for m in members}
        assert len(attempts) == 1
        assert None not in attempts

        # a spot preemption of one member's instance, as the audit log reports it on Pub/Sub
        victim = members[0]
        zone, name = instance_name(victim)
        old_uids = {p["metadata"]["uid"] for p in pods_of(cluster, ns, "trainer")}
        sent = time.monotonic()
        fake(fake_gce, "/_fake/event", {"method": "compute.instances.preempted", "zone": zone, "name": name})
        expect_event(cluster, namespace=ns, name="trainer-0", reason="GangMemberLost", timeout=60)
        again = expect_gang_restarted(cluster, ns, "trainer", 2, old_uids=old_uids, timeout=180)
        print(f"preemption -> gang running again: {time.monotonic() - sent:.1f} s")
        assert name not in {c["metadata"]["name"] for c in nodeclaims(cluster)}
        victim_offering = (
            victim["metadata"]["labels"][INSTANCE_TYPE],
            victim["metadata"]["labels"]["topology.kubernetes.io/zone"],
            victim["metadata"]["labels"]["joiner.sh/capacity-type"],
        )
        for p in again:
            labels = cluster.get("nodes", p["spec"]["nodeName"])["metadata"]["labels"]
            got = (labels[INSTANCE_TYPE], labels["topology.kubernetes.io/zone"], labels["joiner.sh/capacity-type"])
            assert got != victim_offering, "the gang went back to the preempted spot offering"
        assert joiner.metric("joiner_interruption_messages_total", kind="spot_interruption") == 1
        assert joiner.metric("joiner_interruption_actions_total", action="nodeclaim_deleted") == 1

        # nothing orphaned: every running instance of the cluster belongs to a NodeClaim and back
        def no_orphans() -> bool:
            live = {
                i["name"]
                for i in fake(fake_gce, "/_fake/instances")
                if i["status"] == "RUNNING" and i["labels"].get("joiner-cluster") == cluster_name
            }
            return live == {
                c["metadata"]["name"] for c in nodeclaims(cluster) if (c.get("status") or {}).get("providerID")
            }

        eventually(no_orphans, timeout=60, what="every running instance has its NodeClaim and the other way round")
