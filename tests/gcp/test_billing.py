"""Prices from the Cloud Billing Catalog API (the fake's SKUs), the shipped table filling in."""

from __future__ import annotations

from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.gcp.billing import Rates, parse_skus, priced
from controller.cloudprovider.gcp.instancetypes import shipped_prices
from controller.cloudprovider.gcp.provider import GCPCloudProvider
from controller.scheduling.instancetypes import InstanceType
from tests.gcp.fake_gce import CORE_RAM_RATES, GPU_RATES, FakeGCE

POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def price(types: dict[str, InstanceType], name: str, capacity_type: str) -> float:
    return next(o.price for o in types[name].offerings if o.capacity_type == capacity_type)


async def test_machine_types_are_priced_from_the_catalog_rates(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    gce.billing_enabled = True
    types = {it.name: it for it in await provider.instance_types(POOL)}
    core, ram = CORE_RAM_RATES["A2"]
    a2 = 12 * core + 87040 / 1024 * ram + GPU_RATES["Nvidia Tesla A100"]
    assert price(types, "a2-highgpu-1g", "on-demand") == pytest.approx(a2, rel=1e-6)
    assert price(types, "a2-highgpu-1g", "spot") == pytest.approx(a2 * 0.3, rel=1e-6)
    core, ram = CORE_RAM_RATES["E2"]
    assert price(types, "e2-standard-4", "on-demand") == pytest.approx(4 * core + 16 * ram, rel=1e-6)
    # N1 + attached T4s: the N1 machine from its family's rates, each T4 from the GPU rate
    core, ram = CORE_RAM_RATES["N1"]
    n1 = 8 * core + 30 * ram
    assert price(types, "n1-standard-8_nvidia-tesla-t4_2", "on-demand") == pytest.approx(n1 + 2 * 0.35, rel=1e-6)
    pages = [path for _, path in gce.requests if path.endswith("/skus")]
    assert len(pages) > 1  # the SKU list is paged: every page was read


async def test_without_the_billing_api_the_shipped_table_prices_and_it_is_asked_again_later(
    provider: GCPCloudProvider, gce: FakeGCE, clock: FakeClock
) -> None:
    shipped = shipped_prices("us-central1")
    types = {it.name: it for it in await provider.instance_types(POOL)}
    assert price(types, "a2-highgpu-1g", "on-demand") == shipped.on_demand["a2-highgpu-1g"]
    asked = sum(1 for _, path in gce.requests if path.endswith("/skus"))
    assert asked == 1
    await clock.advance(301)  # the catalog cache expires; the billing API is not asked again so soon
    await provider.instance_types(POOL)
    assert sum(1 for _, path in gce.requests if path.endswith("/skus")) == 1
    gce.billing_enabled = True  # someone enables the API: an hour after the failure it is read
    await clock.advance(3600)
    types = {it.name: it for it in await provider.instance_types(POOL)}
    assert price(types, "a2-highgpu-1g", "on-demand") != shipped.on_demand["a2-highgpu-1g"]


def test_parse_keeps_the_regions_on_demand_and_spot_rates_only(gce: FakeGCE) -> None:
    rates = parse_skus(gce.sku_list(), "us-central1")
    assert rates.core[("n1", "on-demand")] == pytest.approx(CORE_RAM_RATES["N1"][0])
    assert rates.ram[("g2", "spot")] == pytest.approx(CORE_RAM_RATES["G2"][1] * 0.3)
    assert rates.gpu[("nvidia-tesla-t4", "spot")] == pytest.approx(0.35 * 0.3)
    assert rates.gpu[("nvidia-h100-80gb", "on-demand")] == pytest.approx(9.7996)
    assert ("e2", "on-demand") in rates.core
    assert not parse_skus(gce.sku_list(), "europe-west4")  # only SKUs of other regions


def test_a_family_or_gpu_the_catalog_lacks_keeps_its_shipped_price() -> None:
    shipped = shipped_prices("us-central1")
    rates = Rates(core={("e2", "on-demand"): 0.01}, ram={("e2", "on-demand"): 0.001})
    rows: dict[str, dict[str, Any]] = {
        "e2-standard-4": {"guestCpus": 4, "memoryMb": 16384},
        "a2-highgpu-1g": {
            "guestCpus": 12,
            "memoryMb": 87040,
            "accelerators": [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}],
        },
    }
    out = priced(shipped, rates, rows)
    assert out.on_demand["e2-standard-4"] == pytest.approx(4 * 0.01 + 16 * 0.001)
    assert out.spot["e2-standard-4"] == shipped.spot["e2-standard-4"]  # no spot rate for e2
    assert out.on_demand["a2-highgpu-1g"] == shipped.on_demand["a2-highgpu-1g"]
    assert out.gpu_on_demand == shipped.gpu_on_demand
