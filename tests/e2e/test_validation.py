"""The CRDs against a real apiserver: malformed objects are refused by `kubectl apply` with a
message naming the field, valid ones (the examples, a converted Karpenter NodePool) are accepted,
defaults are applied as the models apply them, NodeClaim specs cannot change, and `kubectl get`
shows the printer columns."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from api.v1 import NodeClaim, NodePool, parse_object, to_manifest
from tests.e2e.data.validation_cases import (
    InvalidCase,
    convert_karpenter_nodepool,
    load_bases,
    load_invalid_cases,
    load_karpenter_nodepool,
)

if TYPE_CHECKING:
    from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
CASES = load_invalid_cases()
RESOURCES = {
    "NodePool": "nodepools.joiner.sh",
    "NodeClaim": "nodeclaims.joiner.sh",
    "KWOKNodeClass": "kwoknodeclasses.joiner.sh",
}


class Tracker:
    """Applies objects and deletes everything it applied afterwards."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.created: list[tuple[str, str]] = []

    def apply(self, manifest: dict[str, Any] | str) -> None:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        for doc in yaml.safe_load_all(text):
            if doc:
                self.created.append((RESOURCES[doc["kind"]], doc["metadata"]["name"]))
        result = self.cluster.kubectl("apply", "-f", "-", input=text, check=False)
        assert result.returncode == 0, f"rejected:\n{result.stderr}\n--- manifest ---\n{text}"

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.cluster.kubectl("get", RESOURCES[kind], name, "-o", "json").stdout)
        return out

    def cleanup(self) -> None:
        for resource, name in reversed(self.created):
            self.cluster.kubectl("delete", resource, name, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture
def objects(cluster: Cluster) -> Iterator[Tracker]:
    tracker = Tracker(cluster)
    yield tracker
    tracker.cleanup()


def expect_refused(cluster: Cluster, manifest: dict[str, Any] | str, *texts: str) -> str:
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    result = cluster.kubectl("apply", "-f", "-", input=text, check=False)
    assert result.returncode != 0, f"the apiserver accepted:\n{text}\n{result.stdout}"
    message = result.stderr
    for expected in texts:
        assert expected in message, f"{expected!r} not in the apiserver's answer:\n{message}"
    return message


def minimal_nodepool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}}
        },
    }


def nodeclaim(name: str) -> dict[str, Any]:
    manifest = copy.deepcopy(load_bases()["nodeclaim"])
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"].update(
        {
            "node.kubernetes.io/instance-type": "g6.xlarge",
            "joiner.sh/capacity-type": "spot",
            "topology.kubernetes.io/zone": "us-east-1a",
            "joiner.sh/gang": "train-42",
        }
    )
    return manifest


# --- malformed objects are refused ----------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_apiserver_refuses_malformed_object(cluster: Cluster, case: InvalidCase) -> None:
    expect_refused(cluster, case.manifest, *case.expect)
    leftover = cluster.kubectl(
        "get", RESOURCES[case.kind], case.manifest["metadata"]["name"], "--ignore-not-found", "-o", "name"
    )
    assert leftover.stdout.strip() == ""


def test_nodeclaim_spec_cannot_change(cluster: Cluster, objects: Tracker) -> None:
    claim = nodeclaim("immutable-spec")
    objects.apply(claim)
    changed = copy.deepcopy(claim)
    changed["spec"]["requirements"][1]["values"] = ["p5.48xlarge"]
    expect_refused(cluster, changed, "spec", "immutable")
    also_changed = copy.deepcopy(claim)
    also_changed["spec"]["expireAfter"] = "1h"
    expect_refused(cluster, also_changed, "spec", "immutable")
    patched = cluster.kubectl(
        "patch",
        "nodeclaims.joiner.sh",
        "immutable-spec",
        "--type=merge",
        "-p",
        '{"spec":{"taints":[{"key":"a","effect":"NoSchedule"}]}}',
        check=False,
    )
    assert patched.returncode != 0
    assert "immutable" in patched.stderr
    stored = objects.get("NodeClaim", "immutable-spec")
    assert stored["spec"]["requirements"] == claim["spec"]["requirements"]


def test_nodeclaim_metadata_and_status_can_change(cluster: Cluster, objects: Tracker) -> None:
    claim = nodeclaim("mutable-metadata")
    objects.apply(claim)
    cluster.kubectl("label", "nodeclaims.joiner.sh", "mutable-metadata", "example.com/note=relabelled")
    cluster.kubectl(
        "patch",
        "nodeclaims.joiner.sh",
        "mutable-metadata",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "providerID": "kwok://mutable-metadata",
                    "nodeName": "node-mutable-metadata",
                    "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Ready",
                            "message": "",
                            "lastTransitionTime": "2025-01-06T09:00:00Z",
                        }
                    ],
                }
            }
        ),
    )
    stored = parse_object(objects.get("NodeClaim", "mutable-metadata"))
    assert isinstance(stored, NodeClaim)
    assert stored.metadata.labels["example.com/note"] == "relabelled"
    assert stored.status is not None
    assert stored.status.provider_id == "kwok://mutable-metadata"


def test_status_is_validated_too(cluster: Cluster, objects: Tracker) -> None:
    objects.apply(nodeclaim("bad-status"))
    result = cluster.kubectl(
        "patch",
        "nodeclaims.joiner.sh",
        "bad-status",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "Maybe",
                            "reason": "X",
                            "lastTransitionTime": "2025-01-06T09:00:00Z",
                        }
                    ]
                }
            }
        ),
        check=False,
    )
    assert result.returncode != 0
    assert "status.conditions[0].status" in result.stderr


# --- valid objects are accepted -------------------------------------------------------------------


def test_examples_are_accepted_and_read_back_as_models(objects: Tracker) -> None:
    objects.apply((EXAMPLES / "kwok-nodeclass.yaml").read_text(encoding="utf-8"))
    for name in ("h100-training", "l4-inference", "cpu"):
        objects.apply((EXAMPLES / f"{name}.yaml").read_text(encoding="utf-8"))
    for name in ("h100-training", "l4-inference", "cpu"):
        stored = objects.get("NodePool", name)
        pool = parse_object(stored)
        assert isinstance(pool, NodePool)
        # what the apiserver stored (defaults, uid, managedFields, ...) survives the models unchanged
        assert to_manifest(pool) == stored
    stored_class = objects.get("KWOKNodeClass", "default")
    assert to_manifest(parse_object(stored_class)) == stored_class


def test_converted_karpenter_nodepool_is_accepted(objects: Tracker) -> None:
    converted = convert_karpenter_nodepool(load_karpenter_nodepool())
    objects.apply(converted)
    stored = objects.get("NodePool", converted["metadata"]["name"])
    assert stored["spec"]["template"]["spec"]["requirements"] == converted["spec"]["template"]["spec"]["requirements"]
    assert stored["spec"]["disruption"]["budgets"] == converted["spec"]["disruption"]["budgets"]
    assert to_manifest(parse_object(stored)) == stored


def test_apiserver_defaults_are_the_model_defaults(objects: Tracker) -> None:
    objects.apply(minimal_nodepool("defaults"))
    stored = objects.get("NodePool", "defaults")
    model = NodePool.model_validate(minimal_nodepool("defaults"))
    assert stored["spec"]["template"]["spec"]["expireAfter"] == model.spec.template.spec.expire_after == "720h"
    assert (
        stored["spec"]["disruption"]
        == to_manifest(model)["spec"]["disruption"]
        == {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
            "budgets": [{"nodes": "10%"}],
        }
    )
    objects.apply({"apiVersion": "joiner.sh/v1", "kind": "KWOKNodeClass", "metadata": {"name": "defaults"}})
    assert objects.get("KWOKNodeClass", "defaults")["spec"] == {"registrationDelay": "0s"}
    objects.apply(nodeclaim("defaults"))
    assert objects.get("NodeClaim", "defaults")["spec"]["expireAfter"] == "720h"


def test_boundary_values_are_accepted(objects: Tracker) -> None:
    pool = minimal_nodepool("boundaries")
    pool["spec"]["weight"] = 100
    pool["spec"]["limits"] = {"cpu": "1500m", "memory": 1073741824, "nvidia.com/gpu": 0}
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": f"example.com/label-{i}", "operator": "Exists"} for i in range(99)
    ] + [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a", "b"], "minValues": 2}]
    pool["spec"]["template"]["spec"]["expireAfter"] = "Never"
    pool["spec"]["disruption"] = {
        "consolidationPolicy": "WhenEmpty",
        "consolidateAfter": "Never",
        "budgets": [
            {"nodes": "100%"},
            {
                "nodes": "0%",
                "schedule": "@daily",
                "duration": "1h30m",
                "reasons": ["Empty", "Drifted", "Expired"],
            },
            {"nodes": "0", "schedule": "*/15 9-17 * jan-dec mon-fri", "duration": "10m"},
        ],
    }
    pool["spec"]["template"]["metadata"] = {
        "labels": {"joiner.sh/gpu-name": "H100", "node.kubernetes.io/pool": "x", "example.com/team": ""}
    }
    parse_object(pool)
    objects.apply(pool)


# --- kubectl get ----------------------------------------------------------------------------------


def header(cluster: Cluster, *args: str) -> list[str]:
    return cluster.kubectl("get", *args).stdout.splitlines()[0].split()


def test_kubectl_get_shows_the_printer_columns(cluster: Cluster, objects: Tracker) -> None:
    objects.apply((EXAMPLES / "kwok-nodeclass.yaml").read_text(encoding="utf-8"))
    objects.apply((EXAMPLES / "h100-training.yaml").read_text(encoding="utf-8"))
    objects.apply(nodeclaim("columns"))
    cluster.kubectl(
        "patch",
        "nodepools.joiner.sh",
        "h100-training",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "nodes": 2,
                    "resources": {"cpu": "384", "memory": "4Ti", "nvidia.com/gpu": "16"},
                    "reason": "Ready",
                    "pricePerHour": "196.64",
                    "mostUsedLimit": "25% nvidia.com/gpu",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Ready",
                            "message": "",
                            "lastTransitionTime": "2025-01-06T09:00:00Z",
                        }
                    ],
                }
            }
        ),
    )
    default = ["NAME", "NODECLASS", "NODES", "GPU", "$/H", "LIMIT", "READY", "STATUS", "AGE"]
    assert header(cluster, "nodepools") == default
    assert header(cluster, "nodepools", "-o", "wide") == [
        *default,
        "WEIGHT",
        "CPU",
        "MEMORY",
        "BUFFER",
        "BUFFER-READY",
        "FORECAST",
    ]
    row = cluster.kubectl("get", "np", "h100-training", "-o", "wide", "--no-headers").stdout.split()
    assert row[:9] == ["h100-training", "default", "2", "16", "196.64", "25%", "nvidia.com/gpu", "True", "Ready"]
    assert row[10:] == ["50", "384", "4Ti"]  # no buffer or forecast on this pool: blank columns

    assert header(cluster, "nodeclaims") == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "STATUS", "AGE"]
    assert header(cluster, "nodeclaims", "-o", "wide") == [
        "NAME",
        "TYPE",
        "CAPACITY",
        "ZONE",
        "NODE",
        "READY",
        "STATUS",
        "AGE",
        "ID",
        "NODEPOOL",
        "GANG",
    ]
    row = cluster.kubectl("get", "nc", "columns", "-o", "wide", "--no-headers").stdout.split()
    assert row[:4] == ["columns", "g6.xlarge", "spot", "us-east-1a"]
    assert row[-2:] == ["default", "train-42"]

    assert header(cluster, "kwoknc") == ["NAME", "READY", "AGE"]
    everything = cluster.kubectl("get", "joiner", "-o", "name").stdout.split()
    assert "nodepool.joiner.sh/h100-training" in everything
    assert "nodeclaim.joiner.sh/columns" in everything
    assert "kwoknodeclass.joiner.sh/default" in everything
