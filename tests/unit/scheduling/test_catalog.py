"""The catalog format, its parser, and the built-in catalog's promises (docs/catalog.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cloudprovider.catalog import load_catalog
from controller.scheduling import CatalogError, InstanceType, Resources, catalog_to_dict, parse_catalog

ROOT = Path(__file__).resolve().parents[3]
GPU_LABELS = ("joiner.sh/gpu-name", "joiner.sh/gpu-count", "joiner.sh/gpu-memory", "joiner.sh/gpu-manufacturer")


@pytest.fixture(scope="module")
def builtin() -> tuple[InstanceType, ...]:
    return load_catalog()


def test_parses_the_documented_format() -> None:
    doc = {
        "instanceTypes": [
            {
                "name": "x.large",
                "capacity": {"cpu": "2", "memory": "8Gi"},
                "overhead": {"cpu": "100m"},
                "labels": {"kubernetes.io/arch": "amd64"},
                "offerings": [{"zone": "z", "capacityType": "spot", "price": 0.1, "available": False}],
            }
        ]
    }
    [it] = parse_catalog(doc)
    assert it.allocatable == Resources.parse({"cpu": "1900m", "memory": "8Gi", "pods": 110})
    assert it.labels["node.kubernetes.io/instance-type"] == "x.large"
    assert it.cheapest_price() is None  # its only offering is unavailable
    assert parse_catalog(catalog_to_dict([it])) == (it,)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"capacity": {}}, r"instanceTypes\[0\].name: must be a non-empty string"),
        ({"name": "a", "capacity": {"cpu": "lots"}}, r"instanceTypes\[0\] \(a\).capacity: 'lots' is not a quantity"),
        (
            {"name": "a", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "preemptible", "price": 1}]},
            r"instanceTypes\[0\] \(a\).offerings\[0\].capacityType: must be one of spot, on-demand, reserved",
        ),
        (
            {"name": "a", "capacity": {}, "offerings": [{"zone": "z", "capacityType": "spot", "price": -1}]},
            r"offerings\[0\].price: must be a non-negative number",
        ),
    ],
)
def test_bad_entries_name_the_field(entry: dict[str, object], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        parse_catalog({"instanceTypes": [entry]})


def test_duplicates_and_bad_files_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="duplicate"):
        parse_catalog({"instanceTypes": [{"name": "a", "capacity": {}}, {"name": "a", "capacity": {}}]})
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(CatalogError, match=f"{path}: not valid JSON"):
        load_catalog(path)


def test_builtin_catalog_models_real_gpu_shapes(builtin: tuple[InstanceType, ...]) -> None:
    assert 120 <= len(builtin) <= 200
    by_name = {it.name: it for it in builtin}
    p5 = by_name["p5.48xlarge"]
    assert p5.capacity.get("nvidia.com/gpu") == 8000
    assert p5.capacity.get("cpu") == 192_000
    assert p5.labels["joiner.sh/gpu-name"] == "H100"
    names = {it.labels.get("joiner.sh/gpu-name") for it in builtin}
    assert names >= {"H100", "H200", "A100", "L40S", "L4", "A10G"}
    for name in ("H100", "H200", "A100"):
        counts = {it.labels["joiner.sh/gpu-count"] for it in builtin if it.labels.get("joiner.sh/gpu-name") == name}
        assert counts == {"1", "2", "4", "8"}
    assert {it.labels["kubernetes.io/arch"] for it in builtin} == {"amd64", "arm64"}
    for it in builtin:
        assert it.allocatable.fits_in(it.capacity)
        assert it.allocatable != it.capacity  # every type has kube-reserved overhead
        assert {"cpu", "memory", "pods", "ephemeral-storage"} <= set(it.capacity)
        if "nvidia.com/gpu" in it.capacity:
            assert all(label in it.labels for label in GPU_LABELS)
            assert it.labels["joiner.sh/gpu-manufacturer"] == "nvidia"
            assert int(it.labels["joiner.sh/gpu-count"]) * 1000 == it.capacity.get("nvidia.com/gpu")


def test_builtin_offerings(builtin: tuple[InstanceType, ...]) -> None:
    offerings = [(it, o) for it in builtin for o in it.offerings]
    assert {o.zone for _, o in offerings} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert any(not o.available for _, o in offerings)
    reserved = {it.name for it, o in offerings if o.capacity_type == "reserved"}
    assert "p5.48xlarge" in reserved
    assert all(it.capacity.get("nvidia.com/gpu") == 8000 for it in builtin if it.name in reserved)
    for it in builtin:
        on_demand = {o.zone: o.price for o in it.offerings if o.capacity_type == "on-demand"}
        for o in it.offerings:
            if o.capacity_type == "spot":
                discount = 1 - o.price / on_demand[o.zone]
                assert 0.29 <= discount <= 0.71, (it.name, o)


def test_generated_files_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen-catalog.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    bench = json.loads((ROOT / "hack" / "bench" / "catalog-400.json").read_text())
    assert 380 <= len(bench["instanceTypes"]) <= 420
