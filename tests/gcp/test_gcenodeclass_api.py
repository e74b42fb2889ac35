"""The GCENodeClass model: the shipped examples are valid; the rules the CRD enforces are the model's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from api.v1.gcenodeclass import GCENodeClass
from api.v1.nodepool import NodePool
from tests.gcp.conftest import nodeclass

ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_are_valid() -> None:
    classes = list(yaml.safe_load_all((ROOT / "deploy/examples/gcp/gcenodeclass.yaml").read_text(encoding="utf-8")))
    assert [GCENodeClass.model_validate(c).name for c in classes] == ["gpu", "self-managed"]
    pools = list(yaml.safe_load_all((ROOT / "deploy/examples/gcp/gpu-nodepools.yaml").read_text(encoding="utf-8")))
    assert [NodePool.model_validate(p).metadata.name for p in pools] == ["h100-training", "inference"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"imageSelectorTerms": [{"image": "projects/p/global/images/x", "instanceTemplate": "t"}]}, "exactly one"),
        ({"imageSelectorTerms": [{"image": "cos-stable"}]}, "pattern"),
        ({"disks": [{"boot": True}, {"boot": True}]}, "at most one boot disk"),
        ({"disks": [{"boot": True, "category": "local-ssd"}]}, "local SSD"),
        ({"region": "us-central1-a"}, "pattern"),
        ({"labels": {"Team": "ml"}}, "pattern"),
        ({"subnetworkSelectorTerms": []}, "at least 1"),
    ],
)
def test_invalid_specs_are_refused_with_a_reason(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GCENodeClass.model_validate(nodeclass(**change))
