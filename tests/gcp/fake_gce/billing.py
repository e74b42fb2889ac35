"""The Cloud Billing Catalog's Compute Engine SKUs (``services/<id>/skus``), from the rates below."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.gcp.fake_gce.common import REGION, Obj, _error
from tests.gcp.fake_gce.pubsub import PubSub

# Cloud Billing Catalog rates of us-central1, USD per hour: (family, per vCPU, per GiB) on demand;
# spot is 30 % of it. GPUs per GPU.
CORE_RAM_RATES = {
    "E2": (0.021811, 0.002923),
    "N2": (0.031611, 0.004237),
    "N1": (0.031611, 0.004237),
    "G2": (0.02505, 0.002934),
    "A2": (0.031611, 0.004237),
    "A3": (0.0294, 0.0031),
}

GPU_RATES = {"Nvidia L4": 0.56, "Nvidia Tesla A100": 2.933908, "Nvidia H100 80GB": 9.7996, "Nvidia Tesla T4": 0.35}


class Billing(PubSub):
    """The SKUs, once the project has the Cloud Billing API on."""

    def __init__(self, **pubsub: Any) -> None:
        super().__init__(**pubsub)
        self.billing_enabled = False  # a project's default: the Cloud Billing API is off

    def sku_list(self) -> list[Obj]:
        """The catalog's SKUs as cloudbilling.googleapis.com lists them (a few it must ignore too)."""

        def sku(description: str, group: str, usage: str, price: float, regions: list[str], unit: str) -> Obj:
            units, nanos = int(price), round((price - int(price)) * 1e9)
            return {
                "name": f"services/6F81-5844-456A/skus/{next(self.ids):X}",
                "skuId": f"{next(self.ids):X}",
                "description": description,
                "category": {
                    "serviceDisplayName": "Compute Engine",
                    "resourceFamily": "Compute",
                    "resourceGroup": group,
                    "usageType": usage,
                },
                "serviceRegions": regions,
                "pricingInfo": [
                    {
                        "pricingExpression": {
                            "usageUnit": unit,
                            "tieredRates": [
                                {
                                    "startUsageAmount": 0,
                                    "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                                }
                            ],
                        }
                    }
                ],
            }

        here = [REGION, "us-east1"]
        out: list[Obj] = []
        for family, (core, ram) in CORE_RAM_RATES.items():
            infix = "Predefined " if family == "N1" else ""
            for prefix, usage, factor in (("", "OnDemand", 1.0), ("Spot Preemptible ", "Preemptible", 0.3)):
                out.append(
                    sku(
                        f"{prefix}{family} {infix}Instance Core running in Americas",
                        "CPU",
                        usage,
                        core * factor,
                        here,
                        "h",
                    )
                )
                out.append(
                    sku(
                        f"{prefix}{family} {infix}Instance Ram running in Americas",
                        "RAM",
                        usage,
                        ram * factor,
                        here,
                        "GiBy.h",
                    )
                )
            out.append(
                sku(f"Commitment v1: {family} Cpu in Americas for 1 Year", "CPU", "Commit1Yr", core * 0.6, here, "h")
            )
        for name, price in GPU_RATES.items():
            out.append(sku(f"{name} GPU running in Americas", "GPU", "OnDemand", price, here, "h"))
            out.append(
                sku(
                    f"{name} GPU attached to Spot Preemptible VMs running in Americas",
                    "GPU",
                    "Preemptible",
                    price * 0.3,
                    here,
                    "h",
                )
            )
        out.append(sku("E2 Instance Core running in Belgium", "CPU", "OnDemand", 0.5, ["europe-west1"], "h"))
        return out

    async def skus(self, request: web.Request) -> web.Response:
        if not self.billing_enabled:
            message = (
                "Cloud Billing API has not been used in project joiner-test before or it is disabled. "
                "Enable it by visiting https://console.developers.google.com/apis/api/cloudbilling.googleapis.com"
            )
            return _error(403, "accessNotConfigured", message)
        rows = self.sku_list()
        start = int(request.query.get("pageToken") or 0)
        size = 10
        page: Obj = {"skus": rows[start : start + size], "nextPageToken": ""}
        if start + size < len(rows):
            page["nextPageToken"] = str(start + size)
        return web.json_response(page)
