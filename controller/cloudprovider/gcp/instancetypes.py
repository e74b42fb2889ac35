"""Compute Engine machine types as the solver's InstanceType: shapes, overhead, labels, offerings. Pure.

From the ``machineTypes`` and ``acceleratorTypes`` of each zone:

* a machine type with GPUs built in (A2, A3, G2: its ``accelerators`` field) is one instance type;
* an N1 machine type can take GPUs (``guestAccelerators``): each N1 type in the price table x each
  attachable accelerator of the zone x 1, 2, 4 (8 for V100) GPUs, up to the accelerator's
  ``maximumCardsPerInstance``, is one instance type named ``<machine>_<accelerator>_<count>``
  (``n1-standard-8_nvidia-tesla-t4_1``; label values allow ``_``, and :func:`split_name` reads it
  back);
* ``cpu`` = guestCpus; ``memory`` = memoryMb minus ``VM_MEMORY_OVERHEAD``; ``nvidia.com/gpu`` = the
  GPU count; ``pods`` = 110; ``ephemeral-storage`` = the boot disk of the GCENodeClass.
* the kubelet's reservations follow GKE's published formula (CPU: 6 % of the first core, 1 % of the
  second, 0.5 % of the next two, 0.25 % above; memory 255 MiB + 11 MiB per pod plus the 100 MiB
  eviction threshold); 10 % of the boot disk for ephemeral storage.
* labels: the well-known ones plus ``joiner.sh/gpu-name``, ``gpu-count``, ``gpu-memory`` (MiB per
  GPU), ``gpu-manufacturer``, and ``joiner.sh/instance-family`` (``a3``, ``g2``, ``n1``...).

Offerings: per zone where the machine type (and accelerator) is offered, ``on-demand`` and ``spot`` at
the price table's prices (machine + GPUs), and ``reserved`` for each selected reservation with room,
priced at ``RESERVED_PRICE_FACTOR`` of on-demand (already paid for, so the solver fills it first).
"""

from __future__ import annotations

import json
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
VM_MEMORY_OVERHEAD: Final = 0.06
MAX_PODS: Final = 110
EVICTION_MIB: Final = 100
RESERVED_PRICE_FACTOR: Final = 0.001
LABEL_INSTANCE_FAMILY: Final = "joiner.sh/instance-family"
LABEL_INSTANCE_CPU: Final = "joiner.sh/instance-cpu"
LABEL_INSTANCE_MEMORY: Final = "joiner.sh/instance-memory"
PRICES_RESOURCE: Final = "prices.json"
ATTACHABLE_FAMILIES: Final = ("n1",)
ATTACH_COUNTS: Final = (1, 2, 4, 8)

# accelerator type -> (the GPU's name as the gpu-name label carries it, MiB per GPU)
GPUS: Final[Mapping[str, tuple[str, int]]] = {
    "nvidia-tesla-t4": ("T4", 16384),
    "nvidia-tesla-v100": ("V100", 16384),
    "nvidia-tesla-p100": ("P100", 16384),
    "nvidia-tesla-p4": ("P4", 8192),
    "nvidia-l4": ("L4", 24576),
    "nvidia-tesla-a100": ("A100", 40960),
    "nvidia-a100-80gb": ("A100", 81920),
    "nvidia-h100-80gb": ("H100", 81920),
    "nvidia-h100-mega-80gb": ("H100", 81920),
    "nvidia-h200-141gb": ("H200", 144384),
    "nvidia-b200": ("B200", 184320),
}


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per hour: machine types and attachable GPUs, on-demand and spot."""

    on_demand: Mapping[str, float]
    spot: Mapping[str, float]
    gpu_on_demand: Mapping[str, float]
    gpu_spot: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Reservation:
    """A specific reservation the NodeClass selected, with what is left of it."""

    name: str
    project: str
    zone: str
    instance_type: str
    available: int


@dataclass(frozen=True, slots=True)
class Shape:
    """How to launch an instance type: the machine type and the GPUs to attach (N1) or built in."""

    name: str
    machine_type: str
    accelerator: str = ""  # attached (guestAccelerators) when ``attached``, else built in
    gpus: int = 0
    attached: bool = False


def shipped_prices(region: str) -> Prices:
    """The shipped price table for ``region`` (us-central1's when it has none)."""
    data = json.loads(resources.files(__package__ or "").joinpath(PRICES_RESOURCE).read_text(encoding="utf-8"))
    regions: Mapping[str, Mapping[str, Mapping[str, float]]] = data["regions"]
    table = regions.get(region) or regions["us-central1"]
    return Prices(
        on_demand={k: float(v) for k, v in table["on-demand"].items()},
        spot={k: float(v) for k, v in table["spot"].items()},
        gpu_on_demand={k: float(v) for k, v in table["gpu-on-demand"].items()},
        gpu_spot={k: float(v) for k, v in table["gpu-spot"].items()},
    )


def split_name(name: str) -> Shape:
    """The launch shape of an instance type name (``n1-standard-8_nvidia-tesla-t4_2`` or ``a3-highgpu-8g``)."""
    parts = name.split("_")
    if len(parts) == 3 and parts[2].isdigit():
        return Shape(name=name, machine_type=parts[0], accelerator=parts[1], gpus=int(parts[2]), attached=True)
    return Shape(name=name, machine_type=name)


def kube_reserved_millicores(vcpus: int) -> int:
    cores = vcpus * 1000
    reserved, used = 0.0, 0
    for size, per_mille in ((1000, 60), (1000, 10), (2000, 5)):
        take = min(size, max(0, cores - used))
        reserved += take * per_mille / 1000
        used += take
    reserved += max(0, cores - used) * 2.5 / 1000
    return round(reserved)


def shapes(
    machine_types: Iterable[Obj], accelerator_types: Iterable[Obj], prices: Prices
) -> dict[str, tuple[Shape, Obj]]:
    """Every instance type of one zone: name -> (shape, its machineTypes row)."""
    out: dict[str, tuple[Shape, Obj]] = {}
    attachable = {str(a["name"]): int(a.get("maximumCardsPerInstance") or 0) for a in accelerator_types}
    for row in machine_types:
        name = str(row["name"])
        built_in = row.get("accelerators") or []
        if built_in:
            acc = built_in[0]
            out[name] = (
                Shape(
                    name=name,
                    machine_type=name,
                    accelerator=str(acc.get("guestAcceleratorType") or ""),
                    gpus=sum(int(a.get("guestAcceleratorCount") or 0) for a in built_in),
                ),
                row,
            )
            continue
        out[name] = (Shape(name=name, machine_type=name), row)
        if name.split("-", 1)[0] not in ATTACHABLE_FAMILIES or name not in prices.on_demand:
            continue
        for accelerator, most in attachable.items():
            if accelerator not in prices.gpu_on_demand or accelerator not in GPUS:
                continue
            for count in ATTACH_COUNTS:
                if count > most or (count == 8 and accelerator != "nvidia-tesla-v100"):
                    continue
                combo = f"{name}_{accelerator}_{count}"
                out[combo] = (
                    Shape(name=combo, machine_type=name, accelerator=accelerator, gpus=count, attached=True),
                    row,
                )
    return out


def price_of(shape: Shape, capacity_type: str, prices: Prices) -> float | None:
    machine = (prices.spot if capacity_type == CAPACITY_TYPE_SPOT else prices.on_demand).get(shape.machine_type)
    if machine is None:
        return None
    if not shape.attached:
        return machine
    gpu = (prices.gpu_spot if capacity_type == CAPACITY_TYPE_SPOT else prices.gpu_on_demand).get(shape.accelerator)
    return None if gpu is None else round(machine + gpu * shape.gpus, 6)


def build_offerings(
    *, shape: Shape, zones: Iterable[str], prices: Prices, reservations: Iterable[Reservation] = ()
) -> tuple[Offering, ...]:
    out: list[Offering] = []
    for zone in sorted(set(zones)):
        for capacity_type in (CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT):
            price = price_of(shape, capacity_type, prices)
            if price is not None:
                out.append(Offering(zone=zone, capacity_type=capacity_type, price=price))
    room: dict[str, int] = {}
    for r in reservations:
        if r.instance_type == shape.name:
            room[r.zone] = room.get(r.zone, 0) + max(0, r.available)
    od = price_of(shape, CAPACITY_TYPE_ON_DEMAND, prices) or 0.0
    for zone, free in sorted(room.items()):
        out.append(
            Offering(
                zone=zone,
                capacity_type=CAPACITY_TYPE_RESERVED,
                price=round(od * RESERVED_PRICE_FACTOR, 6),
                available=free > 0,
            )
        )
    return tuple(out)


def build_instance_type(shape: Shape, row: Obj, *, boot_disk_gib: int, offerings: tuple[Offering, ...]) -> InstanceType:
    """The solver's InstanceType for one shape (see the module docstring)."""
    vcpus = int(row.get("guestCpus") or 0)
    mib = int(row.get("memoryMb") or 0)
    arch = "arm64" if str(row.get("architecture") or "").upper() == "ARM64" else "amd64"
    capacity: dict[str, str] = {
        "cpu": str(vcpus),
        "memory": f"{int(mib * (1 - VM_MEMORY_OVERHEAD))}Mi",
        "pods": str(MAX_PODS),
        "ephemeral-storage": f"{boot_disk_gib}Gi",
    }
    labels: dict[str, str] = {
        LABEL_INSTANCE_TYPE: shape.name,
        LABEL_ARCH: arch,
        LABEL_OS: "linux",
        LABEL_INSTANCE_FAMILY: shape.machine_type.split("-", 1)[0],
        LABEL_INSTANCE_CPU: str(vcpus),
        LABEL_INSTANCE_MEMORY: str(mib),
    }
    if shape.gpus:
        gpu_name, gpu_mib = GPUS.get(shape.accelerator, (shape.accelerator, 0))
        capacity["nvidia.com/gpu"] = str(shape.gpus)
        labels[LABEL_GPU_NAME] = gpu_name
        labels[LABEL_GPU_COUNT] = str(shape.gpus)
        labels[LABEL_GPU_MEMORY] = str(gpu_mib)
        labels[LABEL_GPU_MANUFACTURER] = "nvidia"
    overhead = {
        "cpu": f"{kube_reserved_millicores(vcpus)}m",
        "memory": f"{11 * MAX_PODS + 255 + EVICTION_MIB}Mi",
        "ephemeral-storage": f"{boot_disk_gib * 1024 // 10}Mi",
    }
    return InstanceType(
        name=shape.name,
        capacity=Resources.parse(capacity),
        overhead=Resources.parse(overhead),
        labels=labels,
        offerings=offerings,
    )


@dataclass(frozen=True, slots=True)
class TypesCache:
    """What the provider listed for one NodeClass: the instance types and the shape of each."""

    at: float
    key: tuple[Any, ...]
    types: tuple[InstanceType, ...]
    shapes: Mapping[str, Shape]
