"""Compute Engine prices from the Cloud Billing Catalog API, over the shipped table. Pure, but for
:func:`fetch_rates`.

The catalog prices resources, not machine types: a vCPU-hour and a GiB-hour of memory per machine
family ("N2 Instance Core running in Americas", "Spot Preemptible N2 Instance Ram running in
Americas"), and a GPU-hour per accelerator ("Nvidia L4 GPU running in Americas", "Nvidia Tesla T4
GPU attached to Spot Preemptible VMs running in Americas"). A machine type's price is its vCPUs x
the family's core rate + its memory x the RAM rate + its built-in GPUs x the GPU rate, for the
SKUs whose ``serviceRegions`` include the region and whose ``usageType`` is ``OnDemand`` or
``Preemptible`` (spot). A machine type whose family or GPU the catalog does not price keeps the
shipped table's price; so does everything when the API cannot be read (it is off by default in a
project: enable ``cloudbilling.googleapis.com`` to use it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from controller.cloudprovider.gcp.api import GCPApi
from controller.cloudprovider.gcp.instancetypes import Prices

Obj = dict[str, Any]
COMPUTE_SERVICE: Final = "services/6F81-5844-456A"
ON_DEMAND: Final = "on-demand"
SPOT: Final = "spot"
_RESOURCE = re.compile(
    r"^(?:Spot Preemptible |Preemptible )?([A-Za-z0-9]+) (?:Predefined |Custom )?Instance (Core|Ram)\b"
)
# the catalog's GPU names -> accelerator types (longest first: "A100 80GB" before "A100")
GPU_NAMES: Final = (
    ("H100 80GB Mega", "nvidia-h100-mega-80gb"),
    ("H100 80GB", "nvidia-h100-80gb"),
    ("H200 141GB", "nvidia-h200-141gb"),
    ("A100 80GB", "nvidia-a100-80gb"),
    ("Tesla A100", "nvidia-tesla-a100"),
    ("Tesla V100", "nvidia-tesla-v100"),
    ("Tesla P100", "nvidia-tesla-p100"),
    ("Tesla P4", "nvidia-tesla-p4"),
    ("Tesla T4", "nvidia-tesla-t4"),
    ("L4", "nvidia-l4"),
    ("B200", "nvidia-b200"),
)


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per unit-hour: (family, on-demand|spot) -> per vCPU and per GiB; (accelerator, ...) -> per GPU."""

    core: Mapping[tuple[str, str], float] = field(default_factory=dict)
    ram: Mapping[tuple[str, str], float] = field(default_factory=dict)
    gpu: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.core or self.gpu)


def _unit_price(sku: Obj) -> float | None:
    for info in sku.get("pricingInfo") or []:
        rates = (info.get("pricingExpression") or {}).get("tieredRates") or []
        if not rates:
            continue
        price = rates[-1].get("unitPrice") or {}  # the last tier: the rate past any free tier
        return int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9
    return None


def parse_skus(skus: Iterable[Obj], region: str) -> Rates:
    """The rates of ``region`` among the catalog's SKUs."""
    core: dict[tuple[str, str], float] = {}
    ram: dict[tuple[str, str], float] = {}
    gpu: dict[tuple[str, str], float] = {}
    for sku in skus:
        category = sku.get("category") or {}
        usage = {"OnDemand": ON_DEMAND, "Preemptible": SPOT}.get(str(category.get("usageType") or ""))
        if usage is None or region not in (sku.get("serviceRegions") or []):
            continue
        if category.get("resourceFamily") != "Compute":
            continue
        price = _unit_price(sku)
        if price is None:
            continue
        description = str(sku.get("description") or "")
        if " GPU " in f"{description} " and description.startswith(("Nvidia", "Spot Preemptible Nvidia")):
            name = description.removeprefix("Spot Preemptible ").removeprefix("Nvidia ")
            accelerator = next((acc for label, acc in GPU_NAMES if name.startswith(label + " GPU")), None)
            if accelerator is not None:
                gpu[(accelerator, usage)] = price
            continue
        match = _RESOURCE.match(description)
        if match is None:
            continue
        family = match[1].lower()
        (core if match[2] == "Core" else ram)[(family, usage)] = price
    return Rates(core=core, ram=ram, gpu=gpu)


async def fetch_rates(api: GCPApi, region: str) -> Rates:
    """Every SKU of Compute Engine (paged), read into the region's rates. Raises GCPError."""
    skus: list[Obj] = []
    token = ""
    while True:
        page = await api.billing(
            "GET", f"{COMPUTE_SERVICE}/skus", params={"currencyCode": "USD", "pageToken": token or None}
        )
        skus += page.get("skus") or []
        token = str(page.get("nextPageToken") or "")
        if not token:
            return parse_skus(skus, region)


def priced(shipped: Prices, rates: Rates, machines: Mapping[str, Obj]) -> Prices:
    """The shipped prices with every machine type (``machineTypes`` rows by name) and attachable GPU
    the catalog prices replaced by the catalog's price."""
    on_demand = dict(shipped.on_demand)
    spot = dict(shipped.spot)
    for name, row in machines.items():
        family = name.split("-", 1)[0]
        vcpus = int(row.get("guestCpus") or 0)
        gib = int(row.get("memoryMb") or 0) / 1024
        built_in = [
            (str(a.get("guestAcceleratorType") or ""), int(a.get("guestAcceleratorCount") or 0))
            for a in row.get("accelerators") or []
        ]
        for usage, table in ((ON_DEMAND, on_demand), (SPOT, spot)):
            core, mem = rates.core.get((family, usage)), rates.ram.get((family, usage))
            gpus = [rates.gpu.get((acc, usage)) for acc, _ in built_in]
            if core is None or mem is None or any(g is None for g in gpus):
                continue
            gpu_cost = sum((g or 0.0) * n for g, (_, n) in zip(gpus, built_in, strict=True))
            table[name] = round(vcpus * core + gib * mem + gpu_cost, 6)
    gpu_on_demand = dict(shipped.gpu_on_demand)
    gpu_spot = dict(shipped.gpu_spot)
    for accelerator in list(gpu_on_demand):
        if (accelerator, ON_DEMAND) in rates.gpu:
            gpu_on_demand[accelerator] = rates.gpu[(accelerator, ON_DEMAND)]
    for accelerator in list(gpu_spot):
        if (accelerator, SPOT) in rates.gpu:
            gpu_spot[accelerator] = rates.gpu[(accelerator, SPOT)]
    return Prices(on_demand=on_demand, spot=spot, gpu_on_demand=gpu_on_demand, gpu_spot=gpu_spot)
