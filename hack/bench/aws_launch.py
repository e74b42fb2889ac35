"""Launch throughput of the aws provider against a real moto server: NodeClaims per second.

    .venv/bin/python -m hack.bench.aws_launch [--claims 100,500] [--workers 48]

For each size N: a fresh moto server on 127.0.0.1, a VPC with subnets in three zones, a tagged
security group and image, an IAM role, and one EC2NodeClass resolved the way the status controller
resolves it. Then N NodeClaims (GPU and CPU, spot and on-demand, spread over candidate types) are
launched through ``AWSCloudProvider.create`` with ``--workers`` at a time -- the lifecycle
controller's concurrency -- each one CreateFleet (instant) after the provider's own checks (its
tag lookup for an instance already bought, the launch template). Reported: wall time, NodeClaims/s,
the AWS calls made per NodeClaim, and that N distinct instances exist, each tagged with its
NodeClaim (nothing bought twice). Then every instance is terminated through ``delete``.

moto runs in its own process (its CPU is reported apart from the benchmark's, which is joiner's
provider); it answers from one Python process, so the figure measures joiner's provider and moto together;
the real EC2 API adds its own latency (CreateFleet instant typically 1-3 s) and account limits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import aioboto3
import boto3

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import RealClock, format_time
from controller.cloudprovider.aws.api import CALLS, AWSApi
from controller.cloudprovider.aws.instancetypes import on_demand_prices
from controller.cloudprovider.aws.nodeclass import resolve
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.aws.status import desired_status
from controller.cloudprovider.unavailable import UnavailableOfferings

Obj = dict[str, Any]
REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = ("m5.large", "m5.xlarge", "c5.xlarge", "g6.xlarge", "g6.2xlarge", "g5.xlarge", "p5.48xlarge")
MIX: tuple[tuple[list[str], list[str]], ...] = (
    (["m5.large", "m5.xlarge", "c5.xlarge"], ["spot", "on-demand"]),
    (["m5.xlarge"], ["on-demand"]),
    (["g6.xlarge", "g6.2xlarge", "g5.xlarge"], ["spot", "on-demand"]),
    (["p5.48xlarge"], ["on-demand"]),
)


class MotoProcess:
    """``moto_server`` in its own process, so its CPU is told apart from joiner's."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        exe = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def world(url: str, tag: str) -> Obj:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    iam = boto3.client("iam", region_name=REGION, endpoint_url=url)
    tags = [{"Key": "bench", "Value": tag}]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    for i, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i * 64}.0/18", AvailabilityZone=zone)["Subnet"]
        ec2.create_tags(Resources=[subnet["SubnetId"]], Tags=tags)
    group = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"][0]["GroupId"]
    ec2.create_tags(Resources=[group], Tags=tags)
    image = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"][
        0
    ]["ImageId"]
    ec2.create_tags(Resources=[image], Tags=tags)
    iam.create_role(RoleName=f"nodes-{tag}", AssumeRolePolicyDocument="{}")
    selector = [{"tags": {"bench": tag}}]
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1},
        "spec": {
            "role": f"nodes-{tag}",
            "amiSelectorTerms": selector,
            "subnetSelectorTerms": selector,
            "securityGroupSelectorTerms": selector,
        },
    }


def claim(i: int) -> Obj:
    types, capacity = MIX[i % len(MIX)]
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": f"bench-{i}", "uid": f"uid-bench-{i}", "labels": {"joiner.sh/nodepool": "bench"}},
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                {"key": "joiner.sh/capacity-type", "operator": "In", "values": capacity},
            ],
            "resources": {"requests": {"cpu": "1"}},
        },
    }


def calls_total() -> float:
    return sum(s.value for m in CALLS.collect() for s in m.samples if s.name.endswith("_total"))


async def run_size(n: int, workers: int) -> Obj:
    server = MotoProcess()
    url = server.url
    try:
        obj = world(url, f"b{n}")
        clock = RealClock()
        api = AWSApi(region=REGION, endpoint_url=url, session=aioboto3.Session(region_name=REGION))
        resolution = await resolve(api, EC2NodeClass.model_validate(obj), cluster=f"bench-{n}")
        obj = {**obj, "status": desired_status(obj, resolution, now=format_time(clock.now()))}
        prices = {k: v for k, v in on_demand_prices(REGION).items() if k in TYPES}
        provider = AWSCloudProvider(
            api=api,
            cluster_name=f"bench-{n}",
            nodeclasses=lambda: {"default": obj},
            clock=clock,
            unavailable=UnavailableOfferings(clock=clock, ttl_seconds=180),
            prices=prices,
        )
        await provider.instance_types({"spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}}})
        claims = [claim(i) for i in range(n)]
        gate = asyncio.Semaphore(workers)
        latencies: list[float] = []

        async def launch(c: Obj) -> str:
            async with gate:
                t0 = time.perf_counter()
                inst = await provider.create(c)
                latencies.append(time.perf_counter() - t0)
                return inst.provider_id

        calls_before = calls_total()
        moto_cpu0 = server.cpu_seconds()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(launch(c) for c in claims))
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        calls = calls_total() - calls_before
        listed = await provider.list()
        tags = Counter(
            next(t["Value"] for t in i.get("Tags") or [] if t["Key"] == "joiner.sh/nodeclaim")
            for r in boto3.client("ec2", region_name=REGION, endpoint_url=url).describe_instances()["Reservations"]
            for i in r["Instances"]
        )
        await asyncio.gather(
            *(provider.delete({**c, "status": {"providerID": pid}}) for c, pid in zip(claims, ids, strict=True))
        )
        await api.close()
        latencies.sort()
        moto_cpu = server.cpu_seconds() - moto_cpu0
        return {
            "moto_cpu": moto_cpu,
            "claims": n,
            "wall": wall,
            "rate": n / wall,
            "p50": statistics.median(latencies),
            "p95": latencies[int(0.95 * (len(latencies) - 1))],
            "calls_per_claim": calls / n,
            "instances": len(listed),
            "bought_twice": sum(1 for v in tags.values() if v > 1),
            "cpu": cpu,
        }
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.aws_launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", default="100,500", help="comma-separated sizes")
    parser.add_argument("--workers", type=int, default=48, help="launches at once (the lifecycle's workers)")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()}")
    columns = ("NodeClaims", "wall s", "NodeClaims/s", "launch p50 / p95 s", "AWS calls per NodeClaim")
    print("| " + " | ".join((*columns, "instances", "bought twice", "joiner CPU s", "moto CPU s")) + " |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.claims.split(",")):
        r = asyncio.run(run_size(n, args.workers))
        print(
            f"| {r['claims']} | {r['wall']:.2f} | {r['rate']:.1f} | {r['p50']:.2f} / {r['p95']:.2f} | "
            f"{r['calls_per_claim']:.1f} | {r['instances']} | {r['bought_twice']} | {r['cpu']:.1f} | "
            f"{r['moto_cpu']:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
