#!/usr/bin/env python3
"""Generate the built-in KWOK instance catalog and the benchmark catalog.

    python hack/gen-catalog.py            # writes both files
    python hack/gen-catalog.py --check    # exits 1 if a committed file is out of date

Outputs (the format is documented in docs/catalog.md):

* ``controller/cloudprovider/kwok/catalog.json`` -- the default catalog (~140 types): GPU shapes
  modelled on AWS p5/p5e/p5en (H100/H200), p4d/p4de (A100 40/80 GB), g6e (L40S), g6 (L4),
  g5 (A10G), and CPU families m7i/c7i/r7i, m7a/c7a/r7a, m7g/c7g/r7g (arm64), m6i/c6i.
* ``hack/bench/catalog-400.json`` -- the same plus older and burstable families (~400 types),
  the instance-type count of Karpenter's scheduling benchmark.

Everything is deterministic: spot discounts (30-70 %) and the few unavailable offerings come
from a hash of (instance type, zone), not from a random generator. Shapes and on-demand prices
are list prices of us-east-1 (rounded); 1/2/4-GPU H100, H200 and A100 shapes are modelled on
their 8-GPU siblings (same price per GPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "controller" / "cloudprovider" / "kwok" / "catalog.json"
BENCH_OUT = ROOT / "hack" / "bench" / "catalog-400.json"

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
GIB = 1024
VM_MEMORY_OVERHEAD = 0.075
"""Share of nominal memory the hypervisor and firmware keep (what Karpenter assumes too)."""

SIZE_VCPU = {
    "nano": 2,
    "micro": 2,
    "small": 2,
    "medium": 1,
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "3xlarge": 12,
    "4xlarge": 16,
    "6xlarge": 24,
    "8xlarge": 32,
    "9xlarge": 36,
    "12xlarge": 48,
    "16xlarge": 64,
    "18xlarge": 72,
    "24xlarge": 96,
    "32xlarge": 128,
    "48xlarge": 192,
}


def max_pods(vcpu: int) -> int:
    """ENI-based pod density (AWS VPC CNI) capped at 110, like most clusters configure it."""
    if vcpu <= 1:
        return 8
    if vcpu == 2:
        return 29
    if vcpu <= 12:
        return 58
    return 110


def kube_reserved_cpu_milli(vcpu: int) -> int:
    """EKS formula: 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % after."""
    total = 0.0
    for core in range(1, vcpu + 1):
        total += 60 if core == 1 else 10 if core == 2 else 5 if core <= 4 else 2.5
    return int(-(-total // 1))


def _frac(*parts: str) -> float:
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Shape:
    name: str
    family: str
    vcpu: int
    memory_gib: float
    price: float
    arch: str = "amd64"
    gpus: int = 0
    gpu_name: str = ""
    gpu_memory_mib: int = 0
    storage_gib: int = 100
    reserved: bool = False


def cpu_family(
    family: str, sizes: list[str], *, gib_per_vcpu: float, price_per_vcpu: float, arch: str = "amd64"
) -> list[Shape]:
    out = []
    for size in sizes:
        vcpu = SIZE_VCPU[size]
        out.append(
            Shape(
                name=f"{family}.{size}",
                family=family,
                vcpu=vcpu,
                memory_gib=vcpu * gib_per_vcpu,
                price=round(vcpu * price_per_vcpu, 4),
                arch=arch,
            )
        )
    return out


def burstable_family(family: str, *, price_medium: float, arch: str = "amd64") -> list[Shape]:
    # t3-style: nano 0.5 GiB ... 2xlarge 32 GiB; price doubles with memory
    table = [
        ("nano", 2, 0.5),
        ("micro", 2, 1),
        ("small", 2, 2),
        ("medium", 2, 4),
        ("large", 2, 8),
        ("xlarge", 4, 16),
        ("2xlarge", 8, 32),
    ]
    return [
        Shape(
            name=f"{family}.{size}",
            family=family,
            vcpu=vcpu,
            memory_gib=mem,
            price=round(price_medium * mem / 4, 4),
            arch=arch,
            storage_gib=50,
        )
        for size, vcpu, mem in table
    ]


def gpu_family(
    family: str,
    rows: list[tuple[str, int, int, int, float]],
    *,
    gpu_name: str,
    gpu_memory_mib: int,
    storage_gib: int,
    reserved_sizes: tuple[str, ...] = (),
) -> list[Shape]:
    """rows: (size, gpus, vcpu, memory GiB, on-demand price)."""
    return [
        Shape(
            name=f"{family}.{size}",
            family=family,
            vcpu=vcpu,
            memory_gib=mem,
            price=price,
            gpus=gpus,
            gpu_name=gpu_name,
            gpu_memory_mib=gpu_memory_mib,
            storage_gib=storage_gib,
            reserved=size in reserved_sizes,
        )
        for size, gpus, vcpu, mem, price in rows
    ]


def _per_gpu(sizes: list[tuple[str, int, int, int]], per_gpu: float) -> list[tuple[str, int, int, int, float]]:
    return [(size, gpus, vcpu, mem, round(gpus * per_gpu, 4)) for size, gpus, vcpu, mem in sizes]


_P5_SIZES = [
    ("4xlarge", 1, 16, 256),
    ("12xlarge", 2, 48, 512),
    ("24xlarge", 4, 96, 1024),
    ("48xlarge", 8, 192, 2048),
]
_P4_SIZES = [
    ("3xlarge", 1, 12, 144),
    ("6xlarge", 2, 24, 288),
    ("12xlarge", 4, 48, 576),
    ("24xlarge", 8, 96, 1152),
]


def gpu_shapes() -> list[Shape]:
    shapes: list[Shape] = []
    shapes += gpu_family(
        "p5",
        _per_gpu(_P5_SIZES, 6.88),
        gpu_name="H100",
        gpu_memory_mib=81559,
        storage_gib=3576,
        reserved_sizes=("48xlarge",),
    )
    shapes += gpu_family(
        "p5e",
        _per_gpu(_P5_SIZES, 7.58),
        gpu_name="H200",
        gpu_memory_mib=143771,
        storage_gib=3576,
        reserved_sizes=("48xlarge",),
    )
    shapes += gpu_family(
        "p5en",
        [("48xlarge", 8, 192, 2048, 63.296)],
        gpu_name="H200",
        gpu_memory_mib=143771,
        storage_gib=3576,
        reserved_sizes=("48xlarge",),
    )
    shapes += gpu_family(
        "p4d",
        _per_gpu(_P4_SIZES, 2.745),
        gpu_name="A100",
        gpu_memory_mib=40960,
        storage_gib=1900,
        reserved_sizes=("24xlarge",),
    )
    shapes += gpu_family(
        "p4de",
        _per_gpu(_P4_SIZES, 3.4309),
        gpu_name="A100",
        gpu_memory_mib=81920,
        storage_gib=1900,
        reserved_sizes=("24xlarge",),
    )
    shapes += gpu_family(
        "g6e",
        [
            ("xlarge", 1, 4, 32, 1.861),
            ("2xlarge", 1, 8, 64, 2.242),
            ("4xlarge", 1, 16, 128, 3.004),
            ("8xlarge", 1, 32, 256, 4.529),
            ("16xlarge", 1, 64, 512, 7.577),
            ("12xlarge", 4, 48, 384, 10.493),
            ("24xlarge", 4, 96, 768, 15.066),
            ("48xlarge", 8, 192, 1536, 30.131),
        ],
        gpu_name="L40S",
        gpu_memory_mib=46068,
        storage_gib=500,
        reserved_sizes=("48xlarge",),
    )
    shapes += gpu_family(
        "g6",
        [
            ("xlarge", 1, 4, 16, 0.8048),
            ("2xlarge", 1, 8, 32, 0.9776),
            ("4xlarge", 1, 16, 64, 1.3232),
            ("8xlarge", 1, 32, 128, 2.0144),
            ("16xlarge", 1, 64, 256, 3.3968),
            ("12xlarge", 4, 48, 192, 4.6016),
            ("24xlarge", 4, 96, 384, 6.6752),
            ("48xlarge", 8, 192, 768, 13.3504),
        ],
        gpu_name="L4",
        gpu_memory_mib=23034,
        storage_gib=250,
    )
    shapes += gpu_family(
        "g5",
        [
            ("xlarge", 1, 4, 16, 1.006),
            ("2xlarge", 1, 8, 32, 1.212),
            ("4xlarge", 1, 16, 64, 1.624),
            ("8xlarge", 1, 32, 128, 2.448),
            ("16xlarge", 1, 64, 256, 4.096),
            ("12xlarge", 4, 48, 192, 5.672),
            ("24xlarge", 4, 96, 384, 8.144),
            ("48xlarge", 8, 192, 768, 16.288),
        ],
        gpu_name="A10G",
        gpu_memory_mib=23028,
        storage_gib=250,
    )
    return shapes


_I_SIZES = [
    "large",
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "48xlarge",
]
_A_SIZES = [
    "medium",
    "large",
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "32xlarge",
    "48xlarge",
]
_G_SIZES = ["medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge"]
_6I_SIZES = [
    "large",
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "32xlarge",
]
_6A_SIZES = [
    "large",
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "32xlarge",
    "48xlarge",
]
_5_SIZES = ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge"]
_C5_SIZES = ["large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge"]


def default_shapes() -> list[Shape]:
    shapes = gpu_shapes()
    shapes += cpu_family("m7i", _I_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0504)
    shapes += cpu_family("c7i", _I_SIZES, gib_per_vcpu=2, price_per_vcpu=0.04465)
    shapes += cpu_family("r7i", _I_SIZES, gib_per_vcpu=8, price_per_vcpu=0.06615)
    shapes += cpu_family("m7a", _A_SIZES, gib_per_vcpu=4, price_per_vcpu=0.05796)
    shapes += cpu_family("c7a", _A_SIZES, gib_per_vcpu=2, price_per_vcpu=0.05131)
    shapes += cpu_family("r7a", _A_SIZES, gib_per_vcpu=8, price_per_vcpu=0.07608)
    shapes += cpu_family("m7g", _G_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0408, arch="arm64")
    shapes += cpu_family("c7g", _G_SIZES, gib_per_vcpu=2, price_per_vcpu=0.03625, arch="arm64")
    shapes += cpu_family("r7g", _G_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0536, arch="arm64")
    shapes += cpu_family("m6i", _6I_SIZES, gib_per_vcpu=4, price_per_vcpu=0.048)
    shapes += cpu_family("c6i", _6I_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0425)
    return shapes


def bench_shapes() -> list[Shape]:
    shapes = default_shapes()
    shapes += cpu_family("r6i", _6I_SIZES, gib_per_vcpu=8, price_per_vcpu=0.063)
    shapes += cpu_family("m6a", _6A_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0432)
    shapes += cpu_family("c6a", _6A_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0383)
    shapes += cpu_family("r6a", _6A_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0567)
    shapes += cpu_family("m6g", _G_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0385, arch="arm64")
    shapes += cpu_family("c6g", _G_SIZES, gib_per_vcpu=2, price_per_vcpu=0.034, arch="arm64")
    shapes += cpu_family("r6g", _G_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0504, arch="arm64")
    shapes += cpu_family("m6gd", _G_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0452, arch="arm64")
    shapes += cpu_family("m5", _5_SIZES, gib_per_vcpu=4, price_per_vcpu=0.048)
    shapes += cpu_family("c5", _C5_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0425)
    shapes += cpu_family("r5", _5_SIZES, gib_per_vcpu=8, price_per_vcpu=0.063)
    shapes += cpu_family("m5a", _5_SIZES, gib_per_vcpu=4, price_per_vcpu=0.043)
    shapes += cpu_family("c5a", _5_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0385)
    shapes += cpu_family("r5a", _5_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0565)
    shapes += cpu_family("m5d", _5_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0565)
    shapes += cpu_family("r5d", _5_SIZES, gib_per_vcpu=8, price_per_vcpu=0.072)
    shapes += cpu_family("m6id", _6I_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0593)
    shapes += cpu_family("c6id", _6I_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0504)
    shapes += cpu_family("r6id", _6I_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0756)
    shapes += cpu_family("i4i", _6I_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0858)
    shapes += cpu_family(
        "m7i-flex",
        ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge"],
        gib_per_vcpu=4,
        price_per_vcpu=0.04788,
    )
    shapes += cpu_family("c7gn", _G_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0624, arch="arm64")
    shapes += cpu_family(
        "r7iz",
        ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "32xlarge"],
        gib_per_vcpu=8,
        price_per_vcpu=0.093,
    )
    shapes += cpu_family("c6gd", _G_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0384, arch="arm64")
    shapes += cpu_family("r6gd", _G_SIZES, gib_per_vcpu=8, price_per_vcpu=0.0576, arch="arm64")
    shapes += cpu_family("m7gd", _G_SIZES, gib_per_vcpu=4, price_per_vcpu=0.0534, arch="arm64")
    shapes += cpu_family("c5d", _C5_SIZES, gib_per_vcpu=2, price_per_vcpu=0.048)
    shapes += cpu_family("c6in", _6I_SIZES, gib_per_vcpu=2, price_per_vcpu=0.0567)
    shapes += burstable_family("t3", price_medium=0.0416)
    shapes += burstable_family("t3a", price_medium=0.0376)
    shapes += burstable_family("t4g", price_medium=0.0336, arch="arm64")
    shapes += gpu_family(
        "g4dn",
        [
            ("xlarge", 1, 4, 16, 0.526),
            ("2xlarge", 1, 8, 32, 0.752),
            ("4xlarge", 1, 16, 64, 1.204),
            ("8xlarge", 1, 32, 128, 2.176),
            ("16xlarge", 1, 64, 256, 4.352),
            ("12xlarge", 4, 48, 192, 3.912),
        ],
        gpu_name="T4",
        gpu_memory_mib=15360,
        storage_gib=125,
    )
    return shapes


def offerings(shape: Shape) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for zone in ZONES:
        od_available = _frac(shape.name, zone, "od") >= 0.03
        if shape.gpu_name == "H200" and zone == "us-east-1a":
            od_available = False  # H200 on-demand capacity is scarce in one zone
        out.append({"zone": zone, "capacityType": "on-demand", "price": shape.price, "available": od_available})
    for zone in ZONES:
        discount = 0.30 + 0.40 * _frac(shape.name, zone, "spot")
        available = _frac(shape.name, zone, "spot-available") >= 0.08
        if shape.gpus >= 8 and zone == "us-east-1c":
            available = False  # big GPU spot pools run dry
        out.append(
            {
                "zone": zone,
                "capacityType": "spot",
                "price": round(shape.price * (1 - discount), 4),
                "available": available,
            }
        )
    if shape.reserved:
        for zone in ZONES[:2]:
            discount = 0.35 + 0.10 * _frac(shape.name, zone, "reserved")
            out.append(
                {
                    "zone": zone,
                    "capacityType": "reserved",
                    "price": round(shape.price * (1 - discount), 4),
                    "available": zone == ZONES[0] or _frac(shape.name, "reserved-b") >= 0.5,
                }
            )
    return out


def instance_type(shape: Shape) -> dict[str, Any]:
    pods = max_pods(shape.vcpu)
    memory_mib = int(shape.memory_gib * GIB * (1 - VM_MEMORY_OVERHEAD))
    storage_gib = shape.storage_gib
    capacity = {
        "cpu": str(shape.vcpu),
        "memory": f"{memory_mib}Mi",
        "ephemeral-storage": f"{storage_gib}Gi",
        "pods": str(pods),
    }
    if shape.gpus:
        capacity["nvidia.com/gpu"] = str(shape.gpus)
    overhead = {
        "cpu": f"{kube_reserved_cpu_milli(shape.vcpu)}m",
        "memory": f"{255 + 11 * pods + 100}Mi",
        "ephemeral-storage": f"{1024 + storage_gib * 1024 // 10}Mi",
    }
    labels = {
        "node.kubernetes.io/instance-type": shape.name,
        "kubernetes.io/arch": shape.arch,
        "kubernetes.io/os": "linux",
        "joiner.sh/instance-family": shape.family,
        "joiner.sh/instance-cpu": str(shape.vcpu),
        "joiner.sh/instance-memory": str(int(shape.memory_gib * GIB)),
    }
    if shape.gpus:
        labels |= {
            "joiner.sh/gpu-name": shape.gpu_name,
            "joiner.sh/gpu-count": str(shape.gpus),
            "joiner.sh/gpu-memory": str(shape.gpu_memory_mib),
            "joiner.sh/gpu-manufacturer": "nvidia",
        }
    return {
        "name": shape.name,
        "capacity": capacity,
        "overhead": overhead,
        "labels": labels,
        "offerings": offerings(shape),
    }


def catalog(shapes: list[Shape]) -> dict[str, Any]:
    names = [s.name for s in shapes]
    if len(names) != len(set(names)):
        raise SystemExit("duplicate instance type names")
    return {"instanceTypes": [instance_type(s) for s in shapes]}


def render(data: dict[str, Any]) -> str:
    # one instance type per block, one offering per line: diffs stay readable
    lines = ['{"instanceTypes": [']
    items = data["instanceTypes"]
    for i, it in enumerate(items):
        head = {k: v for k, v in it.items() if k != "offerings"}
        body = json.dumps(head)[:-1]
        offers = ",\n    ".join(json.dumps(o) for o in it["offerings"])
        comma = "," if i < len(items) - 1 else ""
        lines.append(f'  {body}, "offerings": [\n    {offers}]}}{comma}')
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the committed files are out of date")
    args = parser.parse_args()
    outputs = {DEFAULT_OUT: render(catalog(default_shapes())), BENCH_OUT: render(catalog(bench_shapes()))}
    stale = []
    for path, text in outputs.items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in outputs:
        count = len(json.loads(outputs[path])["instanceTypes"])
        state = ("out of date" if args.check else "written") if path in stale else "up to date"
        print(f"{path.relative_to(ROOT)}: {count} instance types, {state}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
