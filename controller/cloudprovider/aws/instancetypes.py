"""EC2 instance types as the solver's InstanceType: shapes, overhead, labels, offerings. Pure.

From a DescribeInstanceTypes row:

* ``cpu`` = vCPUs; ``memory`` = the advertised MiB minus the VM overhead (``VM_MEMORY_OVERHEAD``,
  7.5 %: the hypervisor and firmware keep memory the operating system never sees);
  ``nvidia.com/gpu`` (or ``amd.com/gpu``) = GpuInfo's count; ``pods`` = the ENI limit of the
  default network card (``interfaces * (IPv4 per interface - 1) + 2``, :func:`max_pods`; ``MAX_PODS``
  when the row says nothing of its network); ``ephemeral-storage`` = the
  root volume of the EC2NodeClass (20 GiB when it names none).
* overhead (what the kubelet reserves): kube-reserved CPU (6 % of the first core, 1 % of the second,
  0.5 % of the third and fourth, 0.25 % of the rest), kube-reserved memory (11 MiB per pod + 255 MiB),
  the 100 MiB hard eviction threshold, and 10 % of the root volume for ephemeral storage.
* labels: the well-known ones plus the same GPU labels the kwok catalog carries
  (``joiner.sh/gpu-name``, ``gpu-count``, ``gpu-memory`` in MiB per GPU, ``gpu-manufacturer`` in
  lower case), ``joiner.sh/instance-family``, ``instance-cpu``, ``instance-memory`` (MiB) and
  ``instance-local-nvme`` (GB of local NVMe) where the type has it.

Offerings: one per zone (of the NodeClass's subnets, where the type is offered) and capacity type:
``on-demand`` at the shipped price table's price, ``spot`` at the latest spot price of that zone,
``reserved`` for each selected capacity reservation, priced at ``RESERVED_PRICE_FACTOR`` of on-demand
(already paid for, so the solver fills it first) and available while it has room.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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
VM_MEMORY_OVERHEAD: Final = 0.075
MAX_PODS: Final = 110
DEFAULT_ROOT_VOLUME_GIB: Final = 20
RESERVED_PRICE_FACTOR: Final = 0.001
EVICTION_MIB: Final = 100
LABEL_INSTANCE_FAMILY: Final = "joiner.sh/instance-family"
LABEL_INSTANCE_CPU: Final = "joiner.sh/instance-cpu"
LABEL_INSTANCE_MEMORY: Final = "joiner.sh/instance-memory"
LABEL_INSTANCE_LOCAL_NVME: Final = "joiner.sh/instance-local-nvme"
ARCHITECTURES: Final = {"x86_64": "amd64", "arm64": "arm64"}
GPU_RESOURCES: Final = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
EFA_RESOURCE: Final = "vpc.amazonaws.com/efa"  # what the EFA device plugin registers
PRICES_RESOURCE: Final = "prices.json"


@dataclass(frozen=True, slots=True)
class Reservation:
    """A capacity reservation the NodeClass selected, with what is left of it."""

    id: str
    instance_type: str
    zone: str
    available: int
    capacity_block: bool = False


@dataclass(frozen=True, slots=True)
class Shape:
    """What the provider needs of a DescribeInstanceTypes row beyond the solver's InstanceType."""

    name: str
    architecture: str  # amd64 / arm64
    gpu_manufacturer: str  # "" when the type has no GPU


def on_demand_prices(region: str) -> dict[str, float]:
    """The shipped on-demand price table (USD per hour) for ``region``; us-east-1's when it has none."""
    data = json.loads(resources.files(__package__ or "").joinpath(PRICES_RESOURCE).read_text(encoding="utf-8"))
    regions: Mapping[str, Mapping[str, float]] = data["regions"]
    table = regions.get(region) or regions["us-east-1"]
    return {str(k): float(v) for k, v in table.items()}


def kube_reserved_millicores(vcpus: int) -> int:
    cores = vcpus * 1000
    steps = ((1000, 60), (1000, 10), (2000, 5))
    reserved, used = 0.0, 0
    for size, per_mille in steps:
        take = min(size, max(0, cores - used))
        reserved += take * per_mille / 1000
        used += take
    reserved += max(0, cores - used) * 2.5 / 1000
    return round(reserved)


def max_pods(row: Obj) -> int:
    """The pods a node of this type runs with the VPC CNI, as Karpenter and the EKS images count them:
    the default network card's interfaces x (IPv4 addresses per interface - 1) + 2 (the -1 is each
    interface's own address; the +2 are the host-network pods of the CNI and kube-proxy). The
    other network cards carry EFA and extra bandwidth, not pod addresses. This is what the
    instance type's capacity says and what the kubelet is told (``maxPods``)."""
    net = row.get("NetworkInfo") or {}
    ips = int(net.get("Ipv4AddressesPerInterface") or 0)
    default_card = int(net.get("DefaultNetworkCardIndex") or 0)
    cards = {int(c.get("NetworkCardIndex") or 0): c for c in net.get("NetworkCards") or []}
    card = cards.get(default_card)
    enis = int((card or net).get("MaximumNetworkInterfaces") or 0)
    if enis <= 0 or ips <= 1:
        return MAX_PODS
    return max(1, enis * (ips - 1) + 2)


def architecture(row: Obj) -> str:
    for arch in (row.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    return "amd64"


def shape(row: Obj) -> Shape:
    gpus = (row.get("GpuInfo") or {}).get("Gpus") or []
    manufacturer = str(gpus[0].get("Manufacturer") or "").lower() if gpus else ""
    return Shape(name=str(row["InstanceType"]), architecture=architecture(row), gpu_manufacturer=manufacturer)


def efa_interfaces(row: Obj) -> int:
    """The EFA interfaces the type takes (0 when it has no EFA)."""
    net = row.get("NetworkInfo") or {}
    if not net.get("EfaSupported"):
        return 0
    return int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0)


def local_nvme_gb(row: Obj) -> int:
    """GB of local NVMe instance storage (0 when the type has none)."""
    storage = row.get("InstanceStorageInfo") or {}
    if storage.get("NvmeSupport") in ("required", "supported") and storage.get("TotalSizeInGB"):
        return int(storage["TotalSizeInGB"])
    return 0


def build_instance_type(
    row: Obj,
    *,
    root_volume_gib: int = DEFAULT_ROOT_VOLUME_GIB,
    offerings: tuple[Offering, ...] = (),
    raid0: bool = False,
) -> InstanceType:
    """The solver's InstanceType for one DescribeInstanceTypes row (see the module docstring). With
    ``raid0`` (instanceStorePolicy RAID0) a type with local NVMe keeps its ephemeral storage there."""
    name = str(row["InstanceType"])
    vcpus = int((row.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    mib = int((row.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    pods = max_pods(row)
    nvme_gb = local_nvme_gb(row) if raid0 else 0
    ephemeral_mib = nvme_gb * 1000**3 // 1024**2 if nvme_gb else root_volume_gib * 1024
    capacity: dict[str, str] = {
        "cpu": str(vcpus),
        "memory": f"{int(mib * (1 - VM_MEMORY_OVERHEAD))}Mi",
        "pods": str(pods),
        "ephemeral-storage": f"{ephemeral_mib}Mi" if nvme_gb else f"{root_volume_gib}Gi",
    }
    labels: dict[str, str] = {
        LABEL_INSTANCE_TYPE: name,
        LABEL_ARCH: architecture(row),
        LABEL_OS: "linux",
        LABEL_INSTANCE_FAMILY: name.split(".", 1)[0],
        LABEL_INSTANCE_CPU: str(vcpus),
        LABEL_INSTANCE_MEMORY: str(mib),
    }
    if efa_interfaces(row):  # a pod asking for EFA gets a type that has it; the launch attaches them
        capacity[EFA_RESOURCE] = str(efa_interfaces(row))
    gpus = (row.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        gpu = gpus[0]
        manufacturer = str(gpu.get("Manufacturer") or "").lower()
        count = sum(int(g.get("Count") or 0) for g in gpus)
        resource = GPU_RESOURCES.get(manufacturer)
        if resource and count:
            capacity[resource] = str(count)
        labels[LABEL_GPU_NAME] = str(gpu.get("Name") or "")
        labels[LABEL_GPU_COUNT] = str(count)
        labels[LABEL_GPU_MEMORY] = str(int((gpu.get("MemoryInfo") or {}).get("SizeInMiB") or 0))
        labels[LABEL_GPU_MANUFACTURER] = manufacturer
    if local_nvme_gb(row):
        labels[LABEL_INSTANCE_LOCAL_NVME] = str(local_nvme_gb(row))
    overhead = {
        "cpu": f"{kube_reserved_millicores(vcpus)}m",
        "memory": f"{11 * pods + 255 + EVICTION_MIB}Mi",
        "ephemeral-storage": f"{ephemeral_mib // 10}Mi",
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
    capacity_types: Iterable[str],
    on_demand: Mapping[str, float],
    spot: Mapping[tuple[str, str], float],
    reservations: Iterable[Reservation] = (),
) -> tuple[Offering, ...]:
    """The offerings of one type: zones x capacity types with a known price, plus its reservations."""
    out: list[Offering] = []
    allowed = set(capacity_types)
    od_price = on_demand.get(name)
    for zone in sorted(set(zones)):
        if CAPACITY_TYPE_ON_DEMAND in allowed and od_price is not None:
            out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_ON_DEMAND, price=od_price))
        spot_price = spot.get((name, zone))
        if CAPACITY_TYPE_SPOT in allowed and spot_price is not None:
            out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_SPOT, price=spot_price))
    if CAPACITY_TYPE_RESERVED in allowed:
        room: dict[str, int] = {}
        for r in reservations:
            if r.instance_type == name:
                room[r.zone] = room.get(r.zone, 0) + max(0, r.available)
        for zone, free in sorted(room.items()):
            price = round((od_price or 0.0) * RESERVED_PRICE_FACTOR, 6)
            out.append(Offering(zone=zone, capacity_type=CAPACITY_TYPE_RESERVED, price=price, available=free > 0))
    return tuple(out)


def latest_spot_prices(rows: Iterable[Obj]) -> dict[tuple[str, str], float]:
    """(instance type, zone) -> the newest spot price among DescribeSpotPriceHistory rows."""
    newest: dict[tuple[str, str], tuple[Any, float]] = {}
    for row in rows:
        key = (str(row.get("InstanceType")), str(row.get("AvailabilityZone")))
        try:
            price = float(row.get("SpotPrice") or "")
        except ValueError:
            continue
        stamp = row.get("Timestamp")
        current = newest.get(key)
        if current is None or (stamp is not None and current[0] is not None and stamp > current[0]):
            newest[key] = (stamp, price)
    return {key: price for key, (_, price) in newest.items()}


@dataclass(frozen=True, slots=True)
class TypesCache:
    """What DescribeInstanceTypes gave for one NodeClass, cached by the provider: the types with
    their offerings, and what a launch needs of each (architecture, GPU maker, pods, EFA)."""

    at: float
    key: tuple[Any, ...]
    types: tuple[InstanceType, ...]
    architectures: Mapping[str, str]
    gpu_makers: Mapping[str, str]
    max_pods: Mapping[str, int]  # what the kubelet of each type is told: the pods its capacity says
    efa: Mapping[str, int] = field(default_factory=dict)  # EFA interfaces per type
