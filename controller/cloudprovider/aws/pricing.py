"""On-demand prices from the AWS Price List API, refreshing the table shipped with joiner.

The shipped table (``prices.json``) is what joiner starts with, so it buys sensibly without the
Pricing API (no permission, no network path, an air-gapped region). With
``--aws-pricing-refresh`` (default 12h) the provider asks ``pricing:GetProducts`` for the region's
Linux, shared-tenancy, no-license on-demand prices and lays them over the table: a type the answer
has gets AWS's price, the others keep the shipped one. A failed refresh keeps the last prices and is
tried again at the next interval; a price that is not a positive finite number is ignored.

The Price List API answers only in a few regions; joiner asks the one nearest to the cluster's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from controller.clock import Clock
from controller.cloudprovider.aws.api import AWSApi, AWSError, pricing_region
from controller.metrics import counter, gauge

__all__ = ["OnDemandPrices", "fetch_on_demand_prices", "filters", "parse_price_list", "pricing_region"]

PRICING_REFRESHES = counter(
    "joiner_aws_pricing_refreshes_total",
    "On-demand price refreshes from the AWS Price List API, by result (ok, failed, empty).",
    ("result",),
)
for _result in ("ok", "failed", "empty"):
    PRICING_REFRESHES.labels(_result)
PRICES_KNOWN = gauge("joiner_aws_on_demand_prices", "Instance types with a known on-demand price.")
PRICING_LAST_SUCCESS = gauge(
    "joiner_aws_pricing_last_refresh_timestamp_seconds",
    "When the on-demand prices were last refreshed from the Price List API (Unix time; 0: never).",
)

log = structlog.get_logger()
Obj = dict[str, Any]


def filters(region: str) -> list[Obj]:
    """GetProducts filters: the region's Linux on-demand instances on shared hardware, no license."""
    fields = {
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "licenseModel": "No License required",
        "capacitystatus": "Used",
        # without it, the answer mixes in Capacity Block and reserved rows of the same type
        "marketoption": "OnDemand",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def _price(item: Mapping[str, Any]) -> tuple[str, float] | None:
    attributes = (item.get("product") or {}).get("attributes") or {}
    name = attributes.get("instanceType")
    terms = (item.get("terms") or {}).get("OnDemand") or {}
    if not isinstance(name, str) or not name or not isinstance(terms, Mapping):
        return None
    for term in terms.values():
        for dimension in ((term or {}).get("priceDimensions") or {}).values():
            raw = ((dimension or {}).get("pricePerUnit") or {}).get("USD")
            if not isinstance(raw, str | int | float):
                continue
            try:
                value = float(raw)
            except (TypeError, ValueError):
                continue
            if math.isfinite(value) and value > 0:
                return name, value
    return None


def parse_price_list(items: Iterable[str | Mapping[str, Any]]) -> dict[str, float]:
    """Instance type -> USD per hour from GetProducts' ``PriceList`` entries (JSON strings).

    Entries that are not JSON, have no instance type or no positive finite USD price are skipped; a
    type listed twice keeps its lowest price.
    """
    out: dict[str, float] = {}
    for raw in items:
        try:
            item = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if not isinstance(item, Mapping):
            continue
        found = _price(item)
        if found is not None:
            name, value = found
            out[name] = min(value, out.get(name, value))
    return out


async def fetch_on_demand_prices(api: AWSApi, region: str) -> dict[str, float]:
    """The region's on-demand Linux prices from the Price List API (raises AWSError on failure)."""
    items = await api.collect(
        "pricing",
        "get_products",
        key="PriceList",
        ServiceCode="AmazonEC2",
        FormatVersion="aws_v1",
        Filters=filters(region),
        MaxResults=100,
    )
    return parse_price_list(items)


class OnDemandPrices:
    """The on-demand price table the provider buys by: the shipped table, refreshed from the Price
    List API by ``refresh`` (and ``run`` every ``interval`` seconds)."""

    def __init__(self, api: AWSApi, table: Mapping[str, float], *, clock: Clock) -> None:
        self._api = api
        self._clock = clock
        self.table: dict[str, float] = dict(table)
        PRICES_KNOWN.set(len(self.table))

    async def refresh(self) -> set[str] | None:
        """Lay the Price List API's prices over the table: the instance types whose price changed,
        or None (the prices kept) when the API failed or answered nothing."""
        region = self._api.region
        try:
            fetched = await fetch_on_demand_prices(self._api, region)
        except AWSError as err:
            PRICING_REFRESHES.labels("failed").inc()
            log.warning("aws.pricing_refresh_failed", error=str(err), code=err.code, kept=len(self.table))
            return None
        if not fetched:
            PRICING_REFRESHES.labels("empty").inc()
            log.warning("aws.pricing_refresh_empty", region=region, kept=len(self.table))
            return None
        changed = {k for k, v in fetched.items() if self.table.get(k) != v}
        self.table = {**self.table, **fetched}
        PRICING_REFRESHES.labels("ok").inc()
        PRICES_KNOWN.set(len(self.table))
        PRICING_LAST_SUCCESS.set(self._clock.now().timestamp())
        log.info("aws.prices_refreshed", region=region, fetched=len(fetched), changed=len(changed))
        return changed
