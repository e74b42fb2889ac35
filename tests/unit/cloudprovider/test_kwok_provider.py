"""The kwok provider against the in-memory apiserver: launches, failures, deletes, list and get (its
Node-making loop: tests/unit/kwoknodes/)."""

from __future__ import annotations

import json

import pytest

from controller.cloudprovider.types import (
    CreateError,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.kube.resources import CONFIGMAPS, NODES
from tests.unit.harness import Harness


async def test_create_answers_at_once_and_the_node_appears_without_delay(harness: Harness) -> None:
    await harness.create_nodeclass()
    claim = await harness.create_claim("nc-1", instance_types=["gpu-1", "gpu-8"])
    instance = await harness.cloud.create(claim)
    assert instance.provider_id == "kwok://nc-1"
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("gpu-1", "zone-b", "spot")
    assert instance.allocatable["nvidia.com/gpu"] == "1"
    assert instance.price == 0.35
    node = harness.node("nc-1")
    assert node is not None
    assert node["spec"]["providerID"] == "kwok://nc-1"


async def test_create_is_idempotent_for_the_same_nodeclaim(harness: Harness) -> None:
    await harness.create_nodeclass()
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    first = await harness.cloud.create(claim)
    second = await harness.cloud.create(claim)
    assert first == second
    assert [c for c in harness.kube.calls if c[0] == "create" and c[1] == "nodes"] == [("create", "nodes", "nc-1")]


async def test_never_register_launches_but_never_creates_a_node(harness: Harness) -> None:
    await harness.create_nodeclass(failures={"neverRegister": ["cpu-4"]})
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    instance = await harness.cloud.create(claim)
    await harness.advance(3600)
    assert harness.node("nc-1") is None
    assert await harness.cloud.get(instance.provider_id) == instance


async def test_a_missing_nodeclass_is_named_in_the_error(harness: Harness) -> None:
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"], nodeclass="gpus")
    with pytest.raises(NodeClassNotReadyError, match="KWOKNodeClass 'gpus'"):
        await harness.cloud.create(claim)


async def test_insufficient_capacity_everywhere_lists_the_offerings_tried(harness: Harness) -> None:
    await harness.create_nodeclass(failures={"insufficientCapacity": [{"instanceType": "cpu-4"}]})
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    with pytest.raises(InsufficientCapacityError) as err:
        await harness.cloud.create(claim)
    assert OfferingId("cpu-4", "zone-a", "spot") in err.value.offerings
    assert len(err.value.offerings) == 3
    assert harness.node("nc-1") is None


async def test_offerings_marked_unavailable_are_avoided(harness: Harness) -> None:
    await harness.create_nodeclass()
    harness.ctx.unavailable.mark(OfferingId("cpu-4", "zone-a", "spot"))
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    instance = await harness.cloud.create(claim)
    assert (instance.zone, instance.capacity_type) == ("zone-a", "on-demand")


async def test_no_compatible_instance_type_is_a_create_error(harness: Harness) -> None:
    await harness.create_nodeclass()
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"], requests={"nvidia.com/gpu": "1"})
    with pytest.raises(CreateError, match="no instance type"):
        await harness.cloud.create(claim)


async def test_delete_removes_the_node_and_then_reports_not_found(harness: Harness) -> None:
    await harness.create_nodeclass()
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    await harness.cloud.create(claim)
    await harness.eventually(lambda: harness.cluster.node_views().get("nc-1") is not None, "Node cached")
    await harness.cloud.delete(claim)
    node = harness.node("nc-1")
    assert node is not None
    assert node["metadata"].get("deletionTimestamp")
    await harness.kube.patch(NODES, "nc-1", {"metadata": {"finalizers": None}})
    await harness.eventually(lambda: "nc-1" not in harness.cluster.node_views(), "Node gone")
    with pytest.raises(NodeClaimNotFoundError):
        await harness.cloud.delete(claim)


async def test_list_and_get_reflect_kwok_nodes(harness: Harness) -> None:
    await harness.create_nodeclass()
    for name in ("a", "b"):
        await harness.cloud.create(await harness.create_claim(name, instance_types=["cpu-4"]))
    await harness.eventually(lambda: len(harness.cluster.node_views()) == 2, "both Nodes cached")
    listed = {i.provider_id: i for i in await harness.cloud.list()}
    assert set(listed) == {"kwok://a", "kwok://b"}
    assert listed["kwok://a"].instance_type == "cpu-4"
    assert listed["kwok://a"].state == "running"
    assert (await harness.cloud.get("kwok://b")).nodeclaim == "b"
    with pytest.raises(NodeClaimNotFoundError):
        await harness.cloud.get("kwok://nope")


async def test_a_nodeclass_may_bring_its_own_catalog_in_a_configmap(harness: Harness) -> None:
    own = {
        "instanceTypes": [
            {
                "name": "tiny",
                "capacity": {"cpu": "2", "memory": "4Gi"},
                "offerings": [{"zone": "lab", "capacityType": "on-demand", "price": 0.01}],
            }
        ]
    }
    await harness.kube.create(
        CONFIGMAPS,
        {"metadata": {"name": "cat", "namespace": "joiner"}, "data": {"catalog.json": json.dumps(own)}},
    )
    await harness.create_nodeclass(catalog="joiner/cat")
    instance = await harness.cloud.create(await harness.create_claim("nc-1", instance_types=["tiny"]))
    assert (instance.instance_type, instance.zone) == ("tiny", "lab")

    await harness.create_nodeclass("broken", catalog="joiner/missing")
    with pytest.raises(NodeClassNotReadyError, match="joiner/missing does not exist"):
        await harness.cloud.create(await harness.create_claim("nc-2", instance_types=["tiny"], nodeclass="broken"))


async def test_a_kwok_node_joiner_did_not_make_is_not_its_instance(harness: Harness) -> None:
    """Garbage collection deletes listed instances nobody claims: a Node someone else made with a
    kwok:// providerID (kwok's own tooling, a test, a person) must never be listed."""
    await harness.create_nodeclass()
    await harness.cloud.create(await harness.create_claim("mine", instance_types=["cpu-4"]))
    await harness.kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "theirs", "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": "kwok://theirs"},
        },
    )
    await harness.eventually(lambda: len(harness.cluster.node_views()) == 2, "both Nodes cached")
    assert [i.provider_id for i in await harness.cloud.list()] == ["kwok://mine"]
