"""The EC2NodeClass model and CRD: Karpenter field names, validation, printer columns, the example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from api import crdgen
from api.v1 import EC2NodeClass

ROOT = Path(__file__).resolve().parents[2]


def spec(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "role": "NodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"joiner.sh/discovery": "c1"}}],
        "securityGroupSelectorTerms": [{"id": "sg-0123"}],
    }
    base.update(extra)
    return {"apiVersion": "joiner.sh/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"}, "spec": base}


def test_the_example_validates_and_round_trips_with_karpenter_names() -> None:
    doc = yaml.safe_load((ROOT / "deploy/examples/aws/ec2nodeclass.yaml").read_text(encoding="utf-8"))
    nc = EC2NodeClass.model_validate(doc)
    assert nc.spec.block_device_mappings[0].ebs is not None
    assert nc.spec.block_device_mappings[0].ebs.volume_size == "500Gi"
    dumped = nc.model_dump(by_alias=True, exclude_none=True)
    assert dumped["spec"]["metadataOptions"]["httpTokens"] == "required"
    assert dumped["spec"]["capacityReservationSelectorTerms"] == [{"tags": {"joiner.sh/discovery": "my-cluster"}}]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"role": None}, "exactly one of 'role' or 'instanceProfile'"),
        ({"instanceProfile": "p"}, "exactly one of 'role' or 'instanceProfile'"),
        ({"amiSelectorTerms": []}, "amiSelectorTerms"),
        ({"subnetSelectorTerms": []}, "at least 1"),
        ({"subnetSelectorTerms": [{"tags": {"a": "b"}, "id": "subnet-1"}]}, "exactly one of tags, id"),
        ({"securityGroupSelectorTerms": [{}]}, "exactly one of tags, id, name"),
        ({"amiSelectorTerms": [{"alias": "windows@latest"}]}, "should match pattern"),
        ({"subnetSelectorTerms": [{"id": "sg-1"}]}, "should match pattern"),
    ],
)
def test_invalid_specs_are_rejected_with_a_message(change: dict[str, Any], message: str) -> None:
    doc = spec(**change)
    doc["spec"] = {k: v for k, v in doc["spec"].items() if v is not None}
    with pytest.raises(ValidationError, match=message):
        EC2NodeClass.model_validate(doc)


def test_instance_profile_instead_of_role_and_an_ami_family_without_terms() -> None:
    doc = spec(instanceProfile="prof", amiFamily="AL2023", amiSelectorTerms=[])
    del doc["spec"]["role"]
    assert EC2NodeClass.model_validate(doc).spec.instance_profile == "prof"


def test_crd_has_printer_columns_and_cel_rules() -> None:
    kind = next(k for k in crdgen.KINDS if k.kind == "EC2NodeClass")
    crd = crdgen.crd(kind)
    version = crd["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:3] == ["Role", "Ready", "Age"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    assert "has(self.role) != has(self.instanceProfile)" in rules
    term = schema["properties"]["subnetSelectorTerms"]["items"]
    assert term["x-kubernetes-validations"][0]["rule"] == "has(self.tags) != has(self.id)"
    assert schema["properties"]["metadataOptions"]["properties"]["httpPutResponseHopLimit"]["default"] == 1
