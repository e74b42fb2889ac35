"""A 32-node gang on the local KWOK cluster, end to end with the real controller.

    JOINER_CLUSTER_DIR=/tmp/kwok-bench .venv/bin/python -m hack.bench.gang [--size 32] [--delays 0,5,10]

For each registration delay D (the KWOKNodeClass ``registrationDelay``: launch -> Node object):

* **admit**: submit ``size`` gated 8-GPU pods of one gang; report the time from submission until
  every pod is bound, against the target D + 3 s, and the spread of the bind times across members
  (kube-scheduler's ``Scheduled`` Events, microsecond timestamps; target < 1 s);
* **rollback**: the same gang plus one member whose instance type never registers
  (``failures.neverRegister``, with ``--registration-timeout`` D + 3 s), so the attempt fails after
  the GPU nodes came up; report the time from the failure (the lifecycle deleting the stuck
  NodeClaim) to the clean state (every NodeClaim and Node of the attempt gone), then clear the fault
  and report the time from clearing it to every member bound (the retry, including what is left of
  the backoff: 2 s doubling, at most 4 s here).

Results go into docs/performance.md ("Gangs"), with the command that produced them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.harness import JOINER_KINDS, ROOT, Cluster, clean_cluster, eventually
from tests.e2e.joiner import Joiner

Obj = dict[str, Any]
GANG = "joiner.sh/gang"
NEVER_REGISTERS = "m7a.medium"
BACKOFF = 2.0


def cluster_up() -> Cluster:
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True, cwd=ROOT)
    cluster_dir = Path(os.environ.get("JOINER_CLUSTER_DIR", ROOT / ".kwok"))
    handle = Cluster(kubeconfig=cluster_dir / "kubeconfig", bin_dir=Path((cluster_dir / "bindir").read_text().strip()))
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    for crd in JOINER_KINDS:
        handle.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return handle


def nodeclass(delay: float, failures: Obj | None = None) -> Obj:
    spec: Obj = {"registrationDelay": f"{int(delay)}s"}
    if failures:
        spec["failures"] = failures
    return {"apiVersion": "joiner.sh/v1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}, "spec": spec}


NODEPOOL: Obj = {
    "apiVersion": "joiner.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "training"},
    "spec": {
        "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}}
    },
}


def member(name: str, namespace: str, *, size: int, gpus: int = 8, node_selector: dict[str, str] | None = None) -> Obj:
    requests = {"cpu": "500m", "memory": "1Gi"}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {GANG: "train"},
            "annotations": {"joiner.sh/gang-size": str(size)},
        },
        "spec": {
            "schedulingGates": [{"name": GANG}],
            "nodeSelector": node_selector or {"joiner.sh/gpu-name": "H100"},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "c", "image": "example.com/trainer:1", "resources": {"requests": requests, "limits": limits}}
            ],
        },
    }


def stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def bind_times(cluster: Cluster, namespace: str) -> list[float]:
    events = cluster.items("events", namespace=namespace)
    return sorted(stamp(e.get("eventTime") or e["firstTimestamp"]) for e in events if e.get("reason") == "Scheduled")


def every_bind(cluster: Cluster, namespace: str, size: int) -> list[float]:
    """The bind times once kube-scheduler's Scheduled Event of every member is written (it lags the bind)."""

    def found() -> list[float] | None:
        times = bind_times(cluster, namespace)
        return times if len(times) >= size else None

    return list(eventually(found, timeout=30, what="Scheduled events"))


def all_bound(cluster: Cluster, namespace: str, size: int) -> bool:
    pods = cluster.items("pods", namespace=namespace)
    return len(pods) == size and all(p["spec"].get("nodeName") for p in pods)


def log_entries(joiner: Joiner, event: str) -> list[Obj]:
    """What the controller logged for ``event``, in order."""
    out = []
    for line in joiner.logs().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            out.append(entry)
    return out


def log_times(joiner: Joiner, event: str) -> list[float]:
    return [stamp(e["timestamp"]) for e in log_entries(joiner, event)]


def log_time(joiner: Joiner, event: str) -> float | None:
    found = log_times(joiner, event)
    return found[0] if found else None


def reset(cluster: Cluster) -> None:
    clean_cluster(cluster)
    eventually(lambda: not cluster.items("nodes") and not cluster.items("nodeclaims.joiner.sh"), timeout=60)


def run_admit(cluster: Cluster, joiner: Joiner, *, size: int, delay: float) -> dict[str, float]:
    ns = cluster.create_namespace(f"bench-gang-{int(time.time())}")
    pods = [member(f"train-{i}", ns, size=size) for i in range(size)]
    submitted = time.time()
    cluster.apply(pods)
    eventually(lambda: all_bound(cluster, ns, size), timeout=120 + delay, interval=0.2, what="every member bound")

    binds = every_bind(cluster, ns, size)
    admitted = log_time(joiner, "gang.admitted") or binds[0]
    planned = log_time(joiner, "gang.planned") or submitted
    initialized = [t for t in log_times(joiner, "nodeclaim.initialized") if t <= admitted]
    claims = cluster.items("nodeclaims.joiner.sh")
    zones = {c["metadata"]["labels"].get("topology.kubernetes.io/zone") for c in claims}
    assert len(claims) == size, f"{len(claims)} NodeClaims for {size} members"
    assert len(zones) == 1, f"the gang's nodes are in {len(zones)} zones"
    return {
        "submit_to_bound": binds[-1] - submitted,
        "spread": binds[-1] - binds[0],
        "submit_to_planned": planned - submitted,
        "planned_to_ready": (max(initialized) if initialized else admitted) - planned,
        "ready_to_admitted": admitted - (max(initialized) if initialized else admitted),
        "admitted_to_bound": binds[-1] - admitted,
    }


def run_rollback(cluster: Cluster, joiner: Joiner, *, size: int, delay: float) -> dict[str, float]:
    ns = cluster.create_namespace(f"bench-rollback-{int(time.time())}")
    pods = [member(f"train-{i}", ns, size=size) for i in range(size - 1)]
    pods.append(
        member("launcher", ns, size=size, gpus=0, node_selector={"node.kubernetes.io/instance-type": NEVER_REGISTERS})
    )
    cluster.apply(pods)
    # the failure: the launcher's NodeClaim is deleted when its registration times out
    gang = f"{ns}/train"

    def rolled_back() -> list[Obj]:
        return [e for e in log_entries(joiner, "gang.rolled_back") if e.get("gang") == gang]

    eventually(rolled_back, timeout=120 + delay, interval=0.2, what="a rollback")
    attempt = set(next(e for e in log_entries(joiner, "gang.provisioning") if e.get("gang") == gang)["nodeclaims"])
    timed_out = [
        stamp(e["timestamp"]) for e in log_entries(joiner, "nodeclaim.timed_out") if e.get("nodeclaim") in attempt
    ]
    failed = min(timed_out) if timed_out else stamp(rolled_back()[0]["timestamp"])

    def attempt_gone() -> bool:
        names = {c["metadata"]["name"] for c in cluster.items("nodeclaims.joiner.sh")}
        names |= {n["metadata"]["name"] for n in cluster.items("nodes")}
        return not names & attempt

    eventually(attempt_gone, timeout=120, interval=0.2, what="every NodeClaim and Node of the attempt gone")
    # the moment the last of them went (a NodeClaim's finalizer goes once its Node and instance are gone)
    ends = [stamp(e["timestamp"]) for e in log_entries(joiner, "nodeclaim.terminated") if e.get("nodeclaim") in attempt]
    clean = max(ends) if ends else time.time()
    assert not any(p["spec"].get("nodeName") for p in cluster.items("pods", namespace=ns)), "a member started"
    cleared = time.time()
    cluster.apply(nodeclass(delay))
    eventually(lambda: all_bound(cluster, ns, size), timeout=180 + delay, interval=0.2, what="every member bound")
    binds = every_bind(cluster, ns, size)
    return {
        "failure_to_clean": clean - failed,
        "clear_to_bound": binds[-1] - cleared,
        "retry_spread": binds[-1] - binds[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=32, help="members (= 8-GPU nodes) of the gang")
    parser.add_argument("--delays", default="0,5,10", help="registration delays D to measure, in seconds")
    parser.add_argument("--logs", help="keep the controller's logs in this directory")
    args = parser.parse_args()
    cluster = cluster_up()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; gang of {args.size}")
    print(
        f"{'D':>4} {'submit->bound':>14} {'target':>7} {'spread':>7} {'fail->clean':>12} {'clear->bound':>13}"
        "   (submit->planned, planned->last Initialized, ->admitted, ->last bound)"
    )
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.logs or scratch
        for delay in (float(d) for d in args.delays.split(",") if d):
            reset(cluster)
            cluster.apply([nodeclass(delay), NODEPOOL])
            joiner = Joiner(
                cluster=cluster,
                log_path=Path(tmp) / f"joiner-{delay:g}.log",
                flags={
                    "gang-backoff": str(BACKOFF),
                    "gang-backoff-max": str(2 * BACKOFF),
                    "registration-timeout": str(delay + 3),
                    "unavailable-offering-ttl": "3",
                },
            ).start()
            try:
                admit = run_admit(cluster, joiner, size=args.size, delay=delay)
                reset(cluster)
                cluster.apply([nodeclass(delay, {"neverRegister": [NEVER_REGISTERS]}), NODEPOOL])
                rollback = run_rollback(cluster, joiner, size=args.size, delay=delay)
            finally:
                joiner.stop()
            print(
                f"{delay:>4g} {admit['submit_to_bound']:>13.2f}s {delay + 3:>6g}s {admit['spread']:>6.3f}s "
                f"{rollback['failure_to_clean']:>11.2f}s {rollback['clear_to_bound']:>12.2f}s   "
                f"({admit['submit_to_planned']:.2f}, {admit['planned_to_ready']:.2f}, "
                f"{admit['ready_to_admitted']:.2f}, {admit['admitted_to_bound']:.2f})",
                flush=True,
            )
    reset(cluster)
    print(f"measured {datetime.now(UTC):%Y-%m-%d}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
