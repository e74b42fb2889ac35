"""A spot interruption on the KWOK + moto setup: how long from the message to the work running again.

    JOINER_CLUSTER_DIR=/tmp/kwok-aws .venv/bin/python -m hack.bench.aws_interruption \\
        [--replicas 6] [--rounds 3] [--boot-delay 0]

The local KWOK cluster, a moto server, ``joiner run --provider aws`` with an SQS interruption queue,
and :mod:`hack.aws_kubelet` registering a Node for each instance ``--boot-delay`` seconds after it
was launched (real EC2 machines take about a minute to boot and join). A Deployment of
``--replicas`` pods (1 CPU each) runs on spot CPU machines; then, ``--rounds`` times, a spot
interruption warning for the instance of one of them goes into the queue and the benchmark times:

* **handled**: message sent -> the NodeClaim is being deleted (joiner read and acted on it);
* **replacement Initialized**: -> a new NodeClaim (bought for the evicted pods) is Initialized;
* **work Running**: -> every replica is Running again, none on the interrupted node -- also what
  joiner itself reports as ``joiner_interruption_replacement_seconds`` (printed beside it).

Results go into docs/performance.md ("aws provider"), with the command that produced them.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from hack.aws_kubelet import StandIn
from hack.bench.aws_launch import REGION, world
from hack.bench.gang import cluster_up
from tests.e2e.harness import Cluster, clean_cluster, eventually
from tests.e2e.joiner import Joiner
from tests.e2e.manifests import spot_warning

Obj = dict[str, Any]
USER_DATA = "#!/bin/bash\n# kubelet --register-with-taints=joiner.sh/unregistered=true:NoSchedule\n"


def manifests(nodeclass: Obj, ns: str, replicas: int) -> list[Obj]:
    nodeclass = {**nodeclass, "metadata": {"name": "default"}, "spec": {**nodeclass["spec"], "userData": USER_DATA}}
    pool = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "cpu"},
        "spec": {
            "disruption": {"consolidateAfter": "Never"},
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "joiner.sh", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                        {"key": "joiner.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    ],
                }
            },
        },
    }
    container = {"name": "main", "image": "example.com/app:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
            },
        },
    }
    return [nodeclass, pool, deployment]


def claims(cluster: Cluster) -> dict[str, Obj]:
    return {c["metadata"]["name"]: c for c in cluster.items("nodeclaims")}


def initialized(claim: Obj) -> bool:
    return any(
        c["type"] == "Initialized" and c["status"] == "True" for c in claim.get("status", {}).get("conditions") or []
    )


def one_round(cluster: Cluster, sqs: Any, queue: str, ns: str, replicas: int) -> tuple[float, float, float]:
    """Interrupt the first NodeClaim's instance: seconds to handled, replacement Initialized, work Running."""
    before = claims(cluster)
    victim = sorted(before)[0]
    node = before[victim]["status"]["nodeName"]
    iid = before[victim]["status"]["providerID"].rsplit("/", 1)[-1]
    sent = time.monotonic()
    sqs.send_message(QueueUrl=queue, MessageBody=spot_warning(iid, region=REGION))

    def deleted() -> bool:
        now = claims(cluster)
        return victim not in now or bool(now[victim]["metadata"].get("deletionTimestamp"))

    eventually(deleted, timeout=60, interval=0.1, what="the NodeClaim deleted")
    handled = time.monotonic() - sent

    def fresh_initialized() -> bool:
        return any(initialized(c) for n, c in claims(cluster).items() if n not in before)

    eventually(fresh_initialized, timeout=300, interval=0.2, what="a replacement Initialized")
    ready = time.monotonic() - sent

    def work_running() -> bool:
        pods = cluster.items("pods", namespace=ns)
        return len(pods) == replicas and all(
            p["status"].get("phase") == "Running" and p["spec"].get("nodeName") != node for p in pods
        )

    eventually(work_running, timeout=300, interval=0.2, what="every replica Running again")
    return handled, ready, time.monotonic() - sent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.aws_interruption", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--boot-delay", type=float, default=0.0, help="seconds from launch to the Node joining")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()}")
    cluster = cluster_up()
    clean_cluster(cluster)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    tag = uuid.uuid4().hex[:6]
    name = f"bench-{tag}"
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=url)
    queue = sqs.create_queue(QueueName=f"joiner-{tag}")["QueueUrl"]
    ns = cluster.create_namespace(f"interrupt-{tag}")
    standin = StandIn(
        endpoint_url=url,
        cluster_name=name,
        kubeconfig=cluster.kubeconfig,
        kubectl=str(cluster.bin_dir / "kubectl"),
        region=REGION,
        registration_delay=args.boot_delay,
    )
    log_path = Path(tempfile.mkdtemp(prefix="joiner-aws-bench-")) / "joiner.log"
    joiner = Joiner(
        cluster=cluster,
        log_path=log_path,
        flags={
            "provider": "aws",
            "cluster-name": name,
            "aws-endpoint-url": url,
            "region": REGION,
            "interruption-queue": queue,
            "registration-timeout": str(int(args.boot_delay + 120)),
            "aws-pricing-refresh": "0",  # moto has no Price List API
        },
    )
    try:
        with standin.running():
            joiner.start()
            cluster.apply(manifests(world(url, tag), ns, args.replicas))
            t0 = time.monotonic()

            def all_running() -> bool:
                pods = cluster.items("pods", namespace=ns)
                return len(pods) == args.replicas and all(p["status"].get("phase") == "Running" for p in pods)

            eventually(all_running, timeout=300, interval=1, what=f"{args.replicas} web pods Running")
            took = time.monotonic() - t0
            print(f"# {args.replicas} pods Running {took:.1f} s after apply; {len(claims(cluster))} NodeClaims")
            head = ("round", "handled s", "replacement Initialized s", "work Running s")
            print("| " + " | ".join((*head, "joiner_interruption_replacement_seconds (sum so far)")) + " |")
            print("|---:|---:|---:|---:|---:|")
            for rnd in range(1, args.rounds + 1):
                handled, ready, running = one_round(cluster, sqs, queue, ns, args.replicas)
                time.sleep(1.5)  # the controller checks once a second
                reported = joiner.metric("joiner_interruption_replacement_seconds_sum")
                print(f"| {rnd} | {handled:.1f} | {ready:.1f} | {running:.1f} | {reported:.1f} |", flush=True)
    finally:
        joiner.stop()
        clean_cluster(cluster)
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
