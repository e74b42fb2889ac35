"""The preflight: every EC2NodeClass's launch requests dry-run against the moto server behind a proxy
that answers them as IAM would under a given policy (moto honours DryRun but checks no IAM)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.types import NodeClassNotReadyError
from controller.kube.resources import EC2NODECLASSES
from controller.nodeclass.ec2 import EC2NodeClassStatusController
from controller.state.cluster import ClusterState
from tests.aws.conftest import TEST_PRICES, FaultProxy, World, nodeclaim
from tests.aws.iampolicy import controller_policy, enforce
from tests.unit.fakeapi import FakeKube

Obj = dict[str, Any]


def condition(obj: Obj, ctype: str) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


def without_resource(statements: list[Obj], sid: str, rtype: str) -> list[Obj]:
    out = copy.deepcopy(statements)
    st = next(s for s in out if s["Sid"] == sid)
    st["Resource"] = [r for r in st["Resource"] if not r.endswith(f":{rtype}/*")]
    return out


class Harness:
    def __init__(self, world: World, api: AWSApi, clock: FakeClock) -> None:
        self.world, self.api, self.clock = world, api, clock
        self.kube = FakeKube(clock=clock)
        self.cluster = ClusterState(source=self.kube, clock=clock, watched=(EC2NODECLASSES,))
        self.controller = EC2NodeClassStatusController(
            api=api, client=self.kube, cluster=self.cluster, clock=clock, cluster_name=world.cluster
        )

    async def apply(self, obj: Obj) -> Obj:
        name = obj["metadata"]["name"]
        existing = self.cluster.store("EC2NodeClass").get(name)
        if existing is None:
            created = await self.kube.create(EC2NODECLASSES, obj)
            self.cluster.informers["EC2NodeClass"]._apply("ADDED", created)
        else:
            updated = {**existing, "spec": obj["spec"]}
            updated["metadata"] = {**existing["metadata"], "generation": existing["metadata"]["generation"] + 1}
            self.cluster.informers["EC2NodeClass"]._apply("MODIFIED", updated)
        return await self.reconcile(name)

    async def reconcile(self, name: str) -> Obj:
        await self.controller.reconcile(name)
        written = await self.kube.get(EC2NODECLASSES, name)
        self.cluster.informers["EC2NodeClass"]._apply("MODIFIED", written)
        self.world.classes[name] = written
        return written


@pytest.fixture
def harness(world: World, api: AWSApi, clock: FakeClock) -> Harness:
    return Harness(world, api, clock)


def dry_runs(proxy: FaultProxy) -> list[str]:
    return [a for a, p in proxy.requests if p.get("DryRun") == "true"]


async def test_under_the_documented_policy_every_launch_call_is_allowed(
    harness: Harness, world: World, proxy: FaultProxy
) -> None:
    proxy.rules.append(enforce(controller_policy(world.cluster)))
    obj = await harness.apply(world.nodeclass())
    valid = condition(obj, "ValidationSucceeded")
    assert (valid["status"], valid["reason"]) == ("True", "DryRunSucceeded"), valid["message"]
    assert condition(obj, "Ready")["status"] == "True"
    assert dry_runs(proxy) == ["CreateLaunchTemplate", "CreateFleet", "RunInstances"]
    run = next(p for a, p in proxy.requests if a == "RunInstances")
    assert run["MetadataOptions.InstanceMetadataTags"] == "disabled"
    assert run["ImageId"] == world.images[0]
    # moto's own answer to each: the requests were real enough to be checked and not made
    assert (
        world.ec2.describe_launch_templates(Filters=[{"Name": "tag:joiner.sh/cluster", "Values": [world.cluster]}])[
            "LaunchTemplates"
        ]
        == []
    )
    # a refresh with nothing changed sends nothing again
    await harness.reconcile("gpu")
    assert len(dry_runs(proxy)) == 3


async def test_a_role_without_a_permission_makes_the_nodeclass_not_ready_and_says_which(
    harness: Harness, world: World, proxy: FaultProxy, api: AWSApi, clock: FakeClock
) -> None:
    policy = without_resource(controller_policy(world.cluster), "LaunchTaggedForTheCluster", "network-interface")
    proxy.rules.append(enforce(policy))
    obj = await harness.apply(world.nodeclass())
    valid = condition(obj, "ValidationSucceeded")
    assert (valid["status"], valid["reason"]) == ("False", "UnauthorizedOperation")
    assert "CreateFleet (DryRun): refused: UnauthorizedOperation" in valid["message"]
    assert "network-interface/*" in valid["message"]
    assert f"joiner.sh/cluster={world.cluster}" in valid["message"]
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ValidationFailed")
    provider = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    with pytest.raises(NodeClassNotReadyError, match="UnauthorizedOperation"):
        await provider.create(nodeclaim("nc-1", types=["m5.large"], capacity_types=["on-demand"]))
    assert proxy.count("CreateFleet") == 1  # the dry run; nothing was bought
    assert (
        world.ec2.describe_instances(Filters=[{"Name": "tag:joiner.sh/cluster", "Values": [world.cluster]}])[
            "Reservations"
        ]
        == []
    )


async def test_a_request_without_a_tag_the_policy_needs_is_refused_until_the_nodeclass_gives_it(
    harness: Harness, world: World, proxy: FaultProxy
) -> None:
    policy = controller_policy(world.cluster)
    launch = next(s for s in policy if s["Sid"] == "LaunchTaggedForTheCluster")
    launch["Condition"]["StringEquals"]["aws:RequestTag/cost-center"] = "ml-42"  # an account's own rule
    proxy.rules.append(enforce(policy))
    obj = await harness.apply(world.nodeclass())
    assert condition(obj, "ValidationSucceeded")["status"] == "False"
    assert condition(obj, "Ready")["status"] == "False"
    # the change is validated again at once: the tag now goes on every request
    obj = await harness.apply(world.nodeclass(tags={"cost-center": "ml-42"}))
    assert condition(obj, "ValidationSucceeded")["status"] == "True", condition(obj, "ValidationSucceeded")
    assert condition(obj, "Ready")["status"] == "True"
