"""EC2NodeClass status: what the selectors resolve to against moto, and a Ready condition that says why not."""

from __future__ import annotations

from typing import Any

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import FakeClock, format_time
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.nodeclass import Resolution, resolve, resolved_view
from controller.cloudprovider.aws.status import desired_status, same_status
from tests.aws.conftest import World, resolve_into


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


async def test_a_resolvable_class_is_ready_and_lists_what_matched(world: World, api: AWSApi, clock: FakeClock) -> None:
    obj = await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    cond = ready(obj)
    assert (cond["status"], cond["reason"]) == ("True", "Resolved")
    assert "3 subnet(s) in 3 zone(s)" in cond["message"]
    status = obj["status"]
    assert sorted(s["id"] for s in status["subnets"]) == sorted(world.subnets.values())
    assert {s["zone"] for s in status["subnets"]} == set(world.subnets)
    assert [g["id"] for g in status["securityGroups"]] == [world.security_group]
    assert [a["id"] for a in status["amis"]] == [world.images[0]]
    assert status["instanceProfile"].startswith(f"joiner-{world.cluster}-")
    view = resolved_view(obj)
    assert view.ready
    assert view.zones == ("us-east-1a", "us-east-1b", "us-east-1c")
    profile = world.iam.get_instance_profile(InstanceProfileName=status["instanceProfile"])["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [world.role]


async def test_selectors_by_id_and_name(world: World, api: AWSApi, clock: FakeClock) -> None:
    spec: dict[str, Any] = {
        "subnetSelectorTerms": [{"id": world.subnets["us-east-1b"]}],
        "securityGroupSelectorTerms": [{"name": f"nodes-{world.tag}"}],
        "amiSelectorTerms": [{"id": world.images[1]}],
    }
    obj = await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    assert ready(obj)["status"] == "True"
    assert [s["zone"] for s in obj["status"]["subnets"]] == ["us-east-1b"]
    assert [g["id"] for g in obj["status"]["securityGroups"]] == [world.named_group]
    assert [a["id"] for a in obj["status"]["amis"]] == [world.images[1]]


async def test_no_subnet_matched_is_not_ready_with_a_message(world: World, api: AWSApi, clock: FakeClock) -> None:
    spec: dict[str, Any] = {"subnetSelectorTerms": [{"tags": {"joiner.sh/test": "no-such-tag"}}]}
    obj = await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    cond = ready(obj)
    assert (cond["status"], cond["reason"]) == ("False", "SubnetsNotFound")
    assert cond["message"] == "no subnet matches spec.subnetSelectorTerms"
    assert obj["status"]["subnets"] == []
    assert not resolved_view(obj).ready


async def test_a_missing_role_is_not_ready_and_says_which(world: World, api: AWSApi, clock: FakeClock) -> None:
    obj = await resolve_into(world, world.nodeclass(role="no-such-role"), api=api, clock=clock)
    cond = ready(obj)
    assert (cond["status"], cond["reason"]) == ("False", "RoleNotFound")
    assert "'no-such-role'" in cond["message"]


async def test_several_problems_are_all_named(world: World, api: AWSApi, clock: FakeClock) -> None:
    spec: dict[str, Any] = {
        "securityGroupSelectorTerms": [{"id": "sg-0000dead"}],
        "amiSelectorTerms": [{"tags": {"joiner.sh/test": "none"}}],
    }
    obj = await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    cond = ready(obj)
    assert cond["reason"] == "SecurityGroupsNotFound"
    assert "no security group matches" in cond["message"]
    assert "no image matches" in cond["message"]


async def test_transition_time_kept_while_ready_does_not_change(world: World, api: AWSApi, clock: FakeClock) -> None:
    obj = await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    first = ready(obj)["lastTransitionTime"]
    await clock.advance(60)
    resolution = await resolve(api, EC2NodeClass.model_validate(obj), cluster=world.cluster)
    again = desired_status(obj, resolution, now=format_time(clock.now()))
    assert next(c for c in again["conditions"] if c["type"] == "Ready")["lastTransitionTime"] == first
    assert same_status(obj["status"], again)
    changed = desired_status(obj, Resolution(ready=False, reason="AMINotFound", message="x"), now="later")
    assert not same_status(obj["status"], changed)
    assert next(c for c in changed["conditions"] if c["type"] == "Ready")["lastTransitionTime"] == "later"


async def test_the_status_controller_writes_status_once_and_again_only_on_change(
    world: World, api: AWSApi, clock: FakeClock
) -> None:
    from controller.kube.resources import EC2NODECLASSES
    from controller.nodeclass.ec2 import EC2NodeClassStatusController
    from controller.state.cluster import ClusterState
    from tests.unit.fakeapi import FakeKube

    kube = FakeKube(clock=clock)
    created = await kube.create(EC2NODECLASSES, world.nodeclass())
    cluster = ClusterState(source=kube, clock=clock, watched=(EC2NODECLASSES,))
    cluster.informers["EC2NodeClass"]._apply("ADDED", created)
    controller = EC2NodeClassStatusController(
        api=api, client=kube, cluster=cluster, clock=clock, cluster_name=world.cluster
    )
    assert await controller.reconcile("gpu") == controller.refresh_seconds
    written = await kube.get(EC2NODECLASSES, "gpu")
    assert ready(written)["status"] == "True"
    assert len(written["status"]["subnets"]) == 3
    patches = [c for c in kube.calls if c[0] == "patch"]
    cluster.informers["EC2NodeClass"]._apply("MODIFIED", written)
    await controller.reconcile("gpu")
    assert [c for c in kube.calls if c[0] == "patch"] == patches  # nothing changed: no write
    world.tag_image(world.images[0], on=False)  # the only image is no longer selected
    await controller.reconcile("gpu")
    after = await kube.get(EC2NODECLASSES, "gpu")
    assert (ready(after)["status"], ready(after)["reason"]) == ("False", "AMINotFound")
    assert after["status"]["amis"] == []
