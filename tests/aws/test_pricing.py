"""On-demand prices refreshed from the AWS Price List API over the shipped table.

moto has no Price List API, so the fault proxy in front of it answers ``GetProducts`` (JSON protocol)
with what AWS sends: ``PriceList`` entries that are JSON documents in strings, paginated.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.cloudprovider.aws.api import pricing_region
from controller.cloudprovider.aws.pricing import PRICING_REFRESHES, parse_price_list
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, Params

Obj = dict[str, Any]
POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def product(instance_type: str, usd: str) -> str:
    """One PriceList entry as AWS writes it (trimmed to the fields that matter)."""
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {"instanceType": instance_type, "regionCode": "us-east-1", "operatingSystem": "Linux"},
            },
            "terms": {
                "OnDemand": {
                    "SKU.JRTCKXETXF": {
                        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}
                    }
                }
            },
        }
    )


def answer_pages(proxy: FaultProxy, pages: list[list[str]]) -> list[Params]:
    """Answer GetProducts with ``pages`` (NextToken between them); returns the requests seen."""
    seen: list[Params] = []

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "AWSPriceListService.GetProducts":
            return None
        index = len(seen)
        seen.append(params)
        body: Obj = {"FormatVersion": "aws_v1", "PriceList": pages[index] if index < len(pages) else []}
        if index + 1 < len(pages):
            body["NextToken"] = f"page-{index + 1}"
        return 200, json.dumps(body)

    proxy.rules.append(rule)
    return seen


def on_demand_price(types: list[Any], name: str) -> float:
    it = next(t for t in types if t.name == name)
    return float(next(o.price for o in it.offerings if o.capacity_type == "on-demand"))


async def test_refreshed_prices_replace_the_shipped_ones_and_the_rest_are_kept(
    provider: AWSCloudProvider, proxy: FaultProxy
) -> None:
    shipped = on_demand_price(list(await provider.instance_types(POOL)), "g6.xlarge")
    m5 = on_demand_price(list(await provider.instance_types(POOL)), "m5.large")
    seen = answer_pages(proxy, [[product("g6.xlarge", "0.9100000000")], [product("p5.48xlarge", "60.1")]])
    assert await provider.refresh_prices()
    assert len(seen) == 2  # both pages read
    types = list(await provider.instance_types(POOL))
    assert on_demand_price(types, "g6.xlarge") == pytest.approx(0.91) != pytest.approx(shipped)
    assert on_demand_price(types, "p5.48xlarge") == pytest.approx(60.1)
    assert on_demand_price(types, "m5.large") == pytest.approx(m5)  # not in the answer: shipped price kept


async def test_a_failed_refresh_keeps_the_prices_and_is_counted(provider: AWSCloudProvider, proxy: FaultProxy) -> None:
    before = on_demand_price(list(await provider.instance_types(POOL)), "g6.xlarge")
    failed = PRICING_REFRESHES.labels("failed")._value.get()

    def deny(action: str, params: Params) -> tuple[int, str] | None:
        if action != "AWSPriceListService.GetProducts":
            return None
        return 400, json.dumps({"__type": "AccessDeniedException", "message": "not authorized: pricing:GetProducts"})

    proxy.rules.append(deny)
    assert not await provider.refresh_prices()
    assert PRICING_REFRESHES.labels("failed")._value.get() == failed + 1
    assert on_demand_price(list(await provider.instance_types(POOL)), "g6.xlarge") == pytest.approx(before)


async def test_the_request_asks_for_linux_on_demand_in_the_cluster_region(
    provider: AWSCloudProvider, proxy: FaultProxy
) -> None:
    seen = answer_pages(proxy, [[product("m5.large", "0.096")]])
    assert await provider.refresh_prices()
    body = json.loads(seen[0]["Body"])
    assert body["ServiceCode"] == "AmazonEC2"
    wanted = {f["Field"]: f["Value"] for f in body["Filters"]}
    assert wanted == {
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "licenseModel": "No License required",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",  # not the Capacity Block rows of the same type
    }


def test_prices_that_are_not_positive_finite_numbers_are_ignored() -> None:
    items = [
        product("a.large", "0.5"),
        product("b.large", "0.0000000000"),
        product("c.large", "NaN"),
        product("d.large", "-1"),
        product("e.large", "Infinity"),
        product("f.large", "abc"),
        "not json",
        json.dumps([1, 2]),
        json.dumps({"product": {"attributes": {}}}),
        product("a.large", "0.4"),  # listed twice: the lower price
    ]
    assert parse_price_list(items) == {"a.large": 0.4}


@given(
    st.lists(
        st.one_of(
            st.text(max_size=30), st.builds(product, st.sampled_from(["x.large", "y.xlarge"]), st.text(max_size=12))
        )
    )
)
def test_parsing_never_fails_and_keeps_only_positive_finite_prices(items: list[str]) -> None:
    prices = parse_price_list(items)
    assert set(prices) <= {"x.large", "y.xlarge"}
    assert all(math.isfinite(v) and v > 0 for v in prices.values())


def test_the_price_list_api_region_nearest_the_cluster() -> None:
    assert pricing_region("us-west-2") == "us-east-1"
    assert pricing_region("eu-west-1") == "eu-central-1"
    assert pricing_region("ap-northeast-1") == "ap-south-1"
    assert pricing_region("sa-east-1") == "us-east-1"
