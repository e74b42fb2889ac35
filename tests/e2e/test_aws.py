"""joiner with the aws provider, end to end: pods -> NodeClaims -> EC2 (a real moto server) -> Nodes -> Running.

moto runs no machines, so `hack.aws_kubelet` plays their kubelets: every running instance tagged with
the cluster gets a KWOK Node with its providerID, the capacity DescribeInstanceTypes gives and the
taints its user data passes to the kubelet. Everything else is the real thing: `joiner run --provider
aws` against the moto server (CreateFleet, launch templates, tags, DescribeInstances, TerminateInstances),
an SQS queue of EventBridge messages, kube-scheduler and kwok running the pods.

Run alone: JOINER_CLUSTER_DIR=/tmp/kwok-aws .venv/bin/pytest tests/e2e/test_aws.py
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import boto3

from hack.aws_kubelet import StandIn
from tests.aws.conftest import REGION, World, amazon_images, boto_clients, moto_url, world
from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import deployment, expect_event, is_true, nodeclaims, req, spot_warning
from tests.e2e.test_gang import (
    FAST_GANGS,
    PartialStartWatch,
    expect_gang_restarted,
    gang_claims,
    gang_statefulset,
    pods_of,
)

__all__ = ["amazon_images", "boto_clients", "moto_url", "world"]  # the moto fixtures, shared with tests/aws

Obj = dict[str, Any]
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# the user's own part of the user data: joiner adds the NodeConfig that joins the cluster after it
USER_DATA = "#!/bin/bash\necho 'vm.max_map_count=262144' > /etc/sysctl.d/90-training.conf\n"


def ec2nodeclass(world: World) -> Obj:
    """AL2023 (nodeadm): joiner writes the bootstrap, from the EKS cluster it finds in (moto's) EKS."""
    obj = world.nodeclass("default", amiFamily="AL2023", userData=USER_DATA)
    obj["metadata"] = {"name": "default"}
    return obj


def aws_nodepool(name: str, *, types: list[str], taints: list[Obj] | None = None) -> Obj:
    spec: Obj = {
        "nodeClassRef": {"group": "joiner.sh", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [
            req(INSTANCE_TYPE, "In", *types),
            req("joiner.sh/capacity-type", "In", "spot", "on-demand"),
        ],
    }
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    }


def instances(world: World) -> dict[str, Obj]:
    """The moto instances tagged with the test's cluster, by id."""
    pages = world.ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag:joiner.sh/cluster", "Values": [world.cluster]}]
    )
    return {i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]}


def instance_id(claim: Obj) -> str:
    provider_id = claim["status"]["providerID"]
    assert provider_id.startswith("aws:///"), provider_id
    return str(provider_id.rsplit("/", 1)[-1])


def test_pods_run_on_ec2_instances_and_a_spot_interrupted_gang_member_restarts_the_gang(
    cluster: Cluster, start_joiner: Any, world: World, moto_url: str
) -> None:
    eks = boto3.client("eks", region_name=REGION, endpoint_url=moto_url)
    eks.create_cluster(
        name=world.cluster, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": []}
    )
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_url)
    queue = sqs.create_queue(QueueName=f"joiner-{world.tag}")["QueueUrl"]
    cluster.apply(
        [
            ec2nodeclass(world),
            aws_nodepool("cpu", types=["m5.large", "m5.xlarge"]),
            aws_nodepool("l4", types=["g6.xlarge", "g6.2xlarge"], taints=[GPU_TAINT]),
        ]
    )
    standin = StandIn(
        endpoint_url=moto_url,
        cluster_name=world.cluster,
        kubeconfig=cluster.kubeconfig,
        kubectl=str(cluster.bin_dir / "kubectl"),
        region=REGION,
    )
    with standin.running():
        joiner = start_joiner(
            provider="aws",
            cluster_name=world.cluster,
            aws_endpoint_url=moto_url,
            region=REGION,
            interruption_queue=queue,
            **{**FAST_GANGS, "unavailable_offering_ttl": "600"},
        )
        eventually(
            lambda: is_true(cluster.get("ec2nodeclasses", "default"), "Ready"),
            timeout=60,
            what="the EC2NodeClass resolved (subnets, security groups, image, instance profile)",
        )
        ns = cluster.create_namespace(f"aws-{uuid.uuid4().hex[:6]}")
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

        # what a user checks: each NodeClaim is an EC2 instance tagged for it, each Node is that instance
        claims = {c["metadata"]["name"]: c for c in nodeclaims(cluster)}
        ec2 = instances(world)
        for name, claim in claims.items():
            iid = instance_id(claim)
            assert iid in ec2, f"{name}: {iid} is not one of the cluster's instances"
            tags = {t["Key"]: t["Value"] for t in ec2[iid].get("Tags") or []}
            assert tags["joiner.sh/nodeclaim"] == name
            assert tags["joiner.sh/nodepool"] == claim["metadata"]["labels"]["joiner.sh/nodepool"]
            assert ec2[iid]["InstanceType"] == claim["metadata"]["labels"][INSTANCE_TYPE]
            assert is_true(claim, "Initialized")
        nodes = {n["spec"]["providerID"]: n for n in cluster.items("nodes")}
        for p in running:
            node = cluster.get("nodes", p["spec"]["nodeName"])
            owner = next(c for c in claims.values() if c["status"]["providerID"] == node["spec"]["providerID"])
            if p["metadata"]["labels"].get("joiner.sh/gang"):
                assert owner["metadata"]["labels"]["joiner.sh/nodepool"] == "l4"
                assert node["metadata"]["labels"]["joiner.sh/gpu-name"] == "L4"
                assert any(t["key"] == "nvidia.com/gpu" for t in node["spec"].get("taints") or [])
            else:
                assert owner["metadata"]["labels"]["joiner.sh/nodepool"] == "cpu"
            assert not any(t["key"] == "joiner.sh/unregistered" for t in node["spec"].get("taints") or [])
        assert len(nodes) == len(claims)

        # a spot interruption warning for one gang member's instance, through the SQS queue
        members = gang_claims(cluster, ns, "trainer")
        assert len(members) == 2
        victim = members[0]
        victim_iid = instance_id(victim)
        old_uids = {p["metadata"]["uid"] for p in pods_of(cluster, ns, "trainer")}
        sent = time.monotonic()
        sqs.send_message(QueueUrl=queue, MessageBody=spot_warning(victim_iid, region=REGION))
        expect_event(cluster, namespace=ns, name="trainer-0", reason="GangMemberLost", timeout=60)

        again = expect_gang_restarted(cluster, ns, "trainer", 2, old_uids=old_uids, timeout=180)
        took = time.monotonic() - sent
        print(f"spot warning -> gang running again: {took:.1f} s")

        eventually(
            lambda: instances(world)[victim_iid]["State"]["Name"] in ("shutting-down", "terminated"),
            timeout=60,
            what=f"the interrupted instance {victim_iid} terminated",
        )
        assert victim["metadata"]["name"] not in {c["metadata"]["name"] for c in nodeclaims(cluster)}
        victim_offering = (
            victim["metadata"]["labels"][INSTANCE_TYPE],
            victim["metadata"]["labels"]["topology.kubernetes.io/zone"],
            victim["metadata"]["labels"]["joiner.sh/capacity-type"],
        )
        for p in again:
            node = cluster.get("nodes", p["spec"]["nodeName"])
            labels = node["metadata"]["labels"]
            got = (labels[INSTANCE_TYPE], labels["topology.kubernetes.io/zone"], labels["joiner.sh/capacity-type"])
            assert got != victim_offering, "the gang went back to the interrupted spot offering"
        assert joiner.metric("joiner_interruption_messages_total", kind="spot_interruption") == 1
        assert joiner.metric("joiner_interruption_actions_total", action="nodeclaim_deleted") == 1
        eventually(lambda: _left(sqs, queue) == 0, timeout=30, what="the handled message deleted from the queue")

        # nothing orphaned: every running instance of the cluster belongs to a NodeClaim
        def no_orphans() -> bool:
            live = {i for i, inst in instances(world).items() if inst["State"]["Name"] in ("pending", "running")}
            return live == {instance_id(c) for c in nodeclaims(cluster) if (c.get("status") or {}).get("providerID")}

        eventually(no_orphans, timeout=60, what="every running instance has its NodeClaim and the other way round")
    # the instances' user data: the user's script, then joiner's NodeConfig with which the kubelet
    # (here the stand-in) registered, tainted until joiner registered it
    user_data = base64.b64decode(
        world.ec2.describe_instance_attribute(InstanceId=victim_iid, Attribute="userData")["UserData"]["Value"]
    ).decode()
    assert user_data.index("vm.max_map_count") < user_data.index("kind: NodeConfig")
    assert "--register-with-taints=joiner.sh/unregistered=true:NoSchedule,nvidia.com/gpu=true:NoSchedule" in user_data
    assert "--node-labels=joiner.sh/nodepool=l4" in user_data


def _left(sqs: Any, queue: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])
