"""Azure VM sizes as the solver's InstanceType, from Resource SKUs. Pure.

From a ``resourceSkus`` row of type ``virtualMachines``: ``cpu`` = the ``vCPUs`` capability;
``memory`` = ``MemoryGB`` less ``VM_MEMORY_OVERHEAD``; ``nvidia.com/gpu`` = ``GPUs`` (whole GPUs only:
fractional-GPU sizes such as NVadsA10 v5 are left out); ``pods`` = 110 (Azure CNI overlay / kubenet
default is 250 or 110: joiner assumes 110); ``ephemeral-storage`` = the AKSNodeClass's OS disk. The
GPU's name and memory come from the size's name (``GPU_SIZES``). A zone is offered where
``locationInfo`` lists it and no ``Zone`` restriction (``NotAvailableForSubscription``) removes it;
a size with a ``Location`` restriction is not offered at all. Zones are named as Kubernetes on Azure
labels them: ``<location>-<zone>`` (``eastus-1``).

Offerings: ``on-demand`` (priority Regular) and ``spot`` (priority Spot) at the Retail Prices API's
Linux prices (the shipped table where it has none), and ``reserved`` for each capacity reservation
of the AKSNodeClass's group with room, at a thousandth of on-demand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_ARCH,
    LABEL_GPU_COUNT,
    LABEL_GPU_MANUFACTURER,
    LABEL_GPU_MEMORY,
    LABEL_GPU_NAME,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
)
from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.resources import Resources

Obj = dict[str, Any]
VM_MEMORY_OVERHEAD: Final = 0.07
MAX_PODS: Final = 110
EVICTION_MIB: Final = 100
RESERVED_PRICE_FACTOR: Final = 0.001
LABEL_INSTANCE_FAMILY: Final = "joiner.sh/instance-family"
# size name pattern -> (GPU name, MiB per GPU)
GPU_SIZES: Final = (
    (re.compile(r"^Standard_ND\d+is[r]?_H100_v5$"), ("H100", 81920)),
    (re.compile(r"^Standard_NC\d+adi?s_H100_v5$"), ("H100", 96256)),
    (re.compile(r"^Standard_ND\d+amsr_A100_v4$"), ("A100", 81920)),
    (re.compile(r"^Standard_ND\d+asr_v4$"), ("A100", 40960)),
    (re.compile(r"^Standard_NC\d+ads_A100_v4$"), ("A100", 81920)),
    (re.compile(r"^Standard_NC\d+as_T4_v3$"), ("T4", 16384)),
    (re.compile(r"^Standard_NC\d+s_v3$"), ("V100", 16384)),
)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A capacity reservation of the AKSNodeClass's group, with its room."""

    id: str
    size: str
    zone: str  # ``<location>-<zone>``
    available: int


def shipped_prices(location: str) -> tuple[dict[str, float], dict[str, float]]:
    """(on-demand, spot) USD per hour of the shipped table for ``location`` (eastus's when it has none)."""
    data = json.loads(resources.files(__package__ or "").joinpath("prices.json").read_text(encoding="utf-8"))
    table = data["locations"].get(location) or data["locations"]["eastus"]
    return dict(table["on-demand"]), dict(table["spot"])


def retail_prices(items: Iterable[Obj]) -> tuple[dict[str, float], dict[str, float]]:
    """(on-demand, spot) Linux prices per hour from Retail Prices API items."""
    on_demand: dict[str, float] = {}
    spot: dict[str, float] = {}
    for item in items:
        product, sku = str(item.get("productName") or ""), str(item.get("skuName") or "")
        if product.endswith("Windows") or "Low Priority" in sku or item.get("unitOfMeasure") != "1 Hour":
            continue
        if item.get("type", "Consumption") != "Consumption":
            continue
        table = spot if sku.endswith(" Spot") else on_demand
        name = str(item.get("armSkuName") or "")
        if name:
            table[name] = float(item.get("retailPrice") or 0.0)
    return on_demand, spot


def _capabilities(row: Obj) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in row.get("capabilities") or []}


def offered_zones(row: Obj, location: str) -> set[str]:
    """``<location>-<zone>`` of the zones the size is offered in (none when the location is restricted)."""
    zones: set[str] = set()
    for info in row.get("locationInfo") or []:
        if str(info.get("location") or "").lower() == location:
            zones |= {str(z) for z in info.get("zones") or []}
    for restriction in row.get("restrictions") or []:
        if restriction.get("type") == "Location":
            return set()
        if restriction.get("type") == "Zone":
            zones -= {str(z) for z in (restriction.get("restrictionInfo") or {}).get("zones") or []}
    return {f"{location}-{z}" for z in zones}


def gpu_of(size: str) -> tuple[str, int] | None:
    return next((gpu for pattern, gpu in GPU_SIZES if pattern.match(size)), None)


def build_instance_type(row: Obj, *, os_disk_gib: int, offerings: tuple[Offering, ...]) -> InstanceType | None:
    """The solver's InstanceType for a VM size (None for a size joiner does not offer)."""
    name = str(row["name"])
    caps = _capabilities(row)
    vcpus = int(float(caps.get("vCPUs", "0")))
    mib = int(float(caps.get("MemoryGB", "0")) * 1024)
    gpus_raw = float(caps.get("GPUs", "0"))
    if vcpus <= 0 or mib <= 0 or gpus_raw != int(gpus_raw):
        return None
    gpus = int(gpus_raw)
    capacity = {
        "cpu": str(vcpus),
        "memory": f"{int(mib * (1 - VM_MEMORY_OVERHEAD))}Mi",
        "pods": str(MAX_PODS),
        "ephemeral-storage": f"{os_disk_gib}Gi",
    }
    labels = {
        LABEL_INSTANCE_TYPE: name,
        LABEL_ARCH: "arm64" if caps.get("CpuArchitectureType") == "Arm64" else "amd64",
        LABEL_OS: "linux",
        LABEL_INSTANCE_FAMILY: str(row.get("family") or ""),
    }
    if gpus:
        gpu = gpu_of(name)
        if gpu is None:
            return None  # a GPU size whose GPU joiner cannot name: not offered rather than mislabelled
        capacity["nvidia.com/gpu"] = str(gpus)
        labels.update(
            {
                LABEL_GPU_NAME: gpu[0],
                LABEL_GPU_COUNT: str(gpus),
                LABEL_GPU_MEMORY: str(gpu[1]),
                LABEL_GPU_MANUFACTURER: "nvidia",
            }
        )
    cores = vcpus * 1000
    reserved_cpu = 60 + (10 if vcpus > 1 else 0) + 5 * max(0, min(2, vcpus - 2)) + 2.5 * max(0, vcpus - 4)
    overhead = {
        "cpu": f"{min(cores, round(reserved_cpu))}m",
        "memory": f"{11 * MAX_PODS + 255 + EVICTION_MIB}Mi",
        "ephemeral-storage": f"{os_disk_gib * 1024 // 10}Mi",
    }
    return InstanceType(
        name=name,
        capacity=Resources.parse(capacity),
        overhead=Resources.parse(overhead),
        labels=labels,
        offerings=offerings,
    )


def build_offerings(
    *,
    name: str,
    zones: Iterable[str],
    on_demand: Mapping[str, float],
    spot: Mapping[str, float],
    reservations: Iterable[Reservation] = (),
) -> tuple[Offering, ...]:
    out: list[Offering] = []
    for zone in sorted(set(zones)):
        if name in on_demand:
            out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_ON_DEMAND, price=on_demand[name]))
        if name in spot:
            out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_SPOT, price=spot[name]))
    room: dict[str, int] = {}
    for r in reservations:
        if r.size == name:
            room[r.zone] = room.get(r.zone, 0) + max(0, r.available)
    for zone, free in sorted(room.items()):
        price = round(on_demand.get(name, 0.0) * RESERVED_PRICE_FACTOR, 6)
        out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_RESERVED, price=price, available=free > 0))
    return tuple(out)
