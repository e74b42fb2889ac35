"""The dashboard picture of a real run: about eight minutes on the local KWOK cluster, scraped by
the real Prometheus, drawn by hack/render-dashboard.py.

    .venv/bin/python -m hack.dashboard_run [--out docs/dashboard.png]     # make dashboard

It starts (or reuses) the cluster of ``$JOINER_CLUSTER_DIR`` (hack/cluster.sh), installs the CRDs,
three NodePools and a KWOKNodeClass, runs ``joiner run --provider kwok`` with its metrics port and a
Prometheus (built by hack/build-tools.sh) that scrapes it every second, and plays this timeline,
each phase held long enough to show on the panels:

1. a burst: 24 CPU web pods (500m) and 6 one-GPU L4 inference pods, on the ``cpu`` and ``l4`` pools
   (``l4`` keeps a warm buffer of one free GPU);
2. a gang: two 1-GPU H100 training pods behind joiner's ``joiner.sh/gang`` gate, admitted together
   on the ``h100`` pool;
3. a spot interruption: an L4 spot node that runs an inference pod is annotated
   ``joiner.sh/interruption=spot`` (the kwok provider's interruption notice); its NodeClaim goes
   and its pod runs again on a node bought behind it;
4. a budget reached: inference scales to 14 while the ``l4`` pool's budget is $4.00/h, so the pool
   stops under its budget, its buffer gives way, and the pods left over get ``BudgetExceeded``;
5. a scale-down: web to 4, inference to 2, the gang finishes;
6. consolidation: the pools' ``consolidateAfter`` is 20 s, so the empty and underused nodes go back.

Each phase is checked the way a user would check it (kubectl and /metrics) and the run fails
loudly, with the logs' whereabouts, when one did not happen. The phases' times go to the picture as
numbered vertical lines. What it made is removed at the end; the cluster is stopped when this run
started it (``--keep-cluster`` keeps it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack.dashboard_figure import Mark, dump_marks
from tests.e2e.harness import CLUSTER_DIR, JOINER_KINDS, ROOT, Cluster, clean_cluster, eventually
from tests.e2e.joiner import Joiner
from tests.e2e.manifests import deployment, nodeclaims, nodeclass, nodepool, pod, req
from tests.e2e.prometheus import Prometheus, tool

Obj = dict[str, Any]
GPU_NAME = "joiner.sh/gpu-name"
CAPACITY_TYPE = "joiner.sh/capacity-type"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NODEPOOL = "joiner.sh/nodepool"
GANG = "joiner.sh/gang"
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
L4_BUDGET = 4.00  # $/h: the burst fits under it, inference at 14 does not
WEB, INFERENCE, GANG_SIZE = 24, 6, 2
INFERENCE_PEAK = 14
WEB_AFTER, INFERENCE_AFTER = 4, 2
JOINER_FLAGS = {
    "disruption_poll_interval": "2",
    "disruption_validation_delay": "2",
    "gang_member_wait": "5",
}


def pools() -> list[Obj]:
    """The KWOKNodeClass and the three NodePools of the run."""
    consolidate = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "20s"}
    cpu = nodepool(
        "cpu",
        requirements=[
            req(GPU_NAME, "DoesNotExist"),
            req(CAPACITY_TYPE, "In", "spot", "on-demand"),
            req(INSTANCE_TYPE, "In", "c7i.large", "c7i.xlarge", "m7i.large", "m7i.xlarge"),
        ],
        limits={"cpu": "64"},
    )
    # no `buffer: {nodes: 1}` here: with one, consolidation and the buffer took turns on this run
    # (the warm node's pods moved to the fresh warm node, which was bought again, every ~11 s)
    cpu["spec"]["disruption"] = {**consolidate, "budgets": [{"nodes": "30%"}]}
    l4 = nodepool(
        "l4",
        requirements=[
            req(GPU_NAME, "In", "L4"),
            req(CAPACITY_TYPE, "In", "spot", "on-demand"),
            req(INSTANCE_TYPE, "In", "g6.xlarge", "g6.2xlarge", "g6.4xlarge"),
        ],
        taints=[GPU_TAINT],
        limits={"nvidia.com/gpu": "16"},
    )
    l4["spec"]["disruption"] = {**consolidate, "budgets": [{"nodes": "50%"}]}
    l4["spec"]["capacity"] = {"buffer": {"gpus": 1}, "budget": {"maxPricePerHour": f"{L4_BUDGET:.2f}"}}
    h100 = nodepool(
        "h100",
        requirements=[
            req(GPU_NAME, "In", "H100"),
            req(CAPACITY_TYPE, "In", "on-demand", "reserved"),
            req(INSTANCE_TYPE, "In", "p5.4xlarge"),
        ],
        taints=[GPU_TAINT],
        limits={"nvidia.com/gpu": "4"},
    )
    h100["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "20s"}
    return [nodeclass(registrationDelay="4s"), cpu, l4, h100]


def inference(ns: str, replicas: int) -> Obj:
    """The L4 Deployment: one GPU and 3 CPUs a pod, so one pod a g6 machine."""
    return deployment("inference", ns, replicas=replicas, cpu="3", memory="8Gi", gpus=1, node_selector={GPU_NAME: "L4"})


def trainer(name: str, ns: str) -> Obj:
    obj = pod(name, ns, cpu="12", memory="64Gi", gpus=1, node_selector={GPU_NAME: "H100"})
    obj["metadata"]["labels"] = {GANG: "train", "app": "train"}
    obj["metadata"]["annotations"] = {"joiner.sh/gang-size": str(GANG_SIZE)}
    obj["spec"]["schedulingGates"] = [{"name": GANG}]
    return obj


@dataclass
class Run:
    cluster: Cluster
    joiner: Joiner
    ns: str
    started: float = field(default_factory=time.time)
    marks: list[Mark] = field(default_factory=list)

    # --- what a user sees ---------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"[{time.time() - self.started:5.0f}s] {text}", flush=True)

    def mark(self, label: str) -> float:
        now = time.time()
        self.marks.append(Mark(at=now, label=label))
        self.say(f"== {len(self.marks)}. {label}")
        return now

    def hold(self, since: float, seconds: float) -> None:
        """Let the phase show on the panels: wait until ``seconds`` after ``since``."""
        left = since + seconds - time.time()
        if left > 0:
            time.sleep(left)

    def pods(self, app: str) -> list[Obj]:
        return self.cluster.items("pods", namespace=self.ns, selector=f"app={app}")

    def running(self, app: str) -> int:
        return sum(1 for p in self.pods(app) if p["status"].get("phase") == "Running")

    def claims(self, pool: str | None = None) -> list[Obj]:
        return [c for c in nodeclaims(self.cluster) if pool is None or c["metadata"]["labels"].get(NODEPOOL) == pool]

    def wait(self, probe: Callable[[], Any], *, timeout: float, what: str) -> Any:
        result = eventually(probe, timeout=timeout, interval=1.0, what=what)
        self.say(f"   {what}")
        return result

    def all_running(self, app: str, count: int) -> bool:
        pods = self.pods(app)
        return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)

    def scale(self, app: str, replicas: int) -> None:
        self.cluster.kubectl("scale", f"deployment/{app}", f"--replicas={replicas}", "-n", self.ns)

    def metric(self, name: str, **labels: str) -> float:
        return self.joiner.metric(name, **labels)

    # --- the timeline -------------------------------------------------------------------------

    def warm_up(self) -> None:
        self.say("waiting for the warm buffer (one free L4 GPU)")
        self.wait(
            lambda: self.metric("joiner_capacity_buffer_ready", nodepool="l4") >= 1, timeout=120, what="buffer ready"
        )
        self.hold(self.started, 40)

    def burst(self) -> None:
        at = self.mark(f"burst: {WEB} CPU pods, {INFERENCE} L4 GPU pods")
        self.cluster.apply(
            [
                deployment("web", self.ns, replicas=WEB, cpu="500m", memory="512Mi"),
                inference(self.ns, INFERENCE),
            ]
        )
        self.wait(lambda: self.all_running("web", WEB), timeout=240, what=f"{WEB} web pods Running")
        self.wait(lambda: self.all_running("inference", INFERENCE), timeout=240, what=f"{INFERENCE} inference Running")
        created = self.metric("joiner_nodeclaims_created_total", reason="provisioning")
        assert created >= 3, f"the burst created {created} NodeClaims for pods; expected several"
        self.say(f"   {len(self.claims('cpu'))} cpu and {len(self.claims('l4'))} l4 NodeClaims")
        self.hold(at, 75)

    def gang(self) -> None:
        at = self.mark(f"gang of {GANG_SIZE} H100 pods admitted")
        self.cluster.apply([trainer(f"train-{i}", self.ns) for i in range(GANG_SIZE)])
        self.wait(lambda: self.metric("joiner_gangs_admitted") == 1, timeout=180, what="the gang admitted")
        self.wait(lambda: self.all_running("train", GANG_SIZE), timeout=120, what=f"{GANG_SIZE} trainers Running")
        h100 = self.claims("h100")
        assert len(h100) == GANG_SIZE, f"the gang holds {len(h100)} h100 NodeClaims, expected {GANG_SIZE}"
        self.hold(at, 60)

    def interruption(self) -> None:
        by_node = {p["spec"].get("nodeName") for p in self.pods("inference")}
        spot = [
            c
            for c in self.claims("l4")
            if c["metadata"]["labels"].get(CAPACITY_TYPE) == "spot"
            and (c.get("status") or {}).get("nodeName") in by_node
        ]
        assert spot, "no L4 spot node runs an inference pod: nothing to interrupt"
        victim = spot[0]["metadata"]["name"]
        before = {c["metadata"]["name"] for c in self.claims("l4")}
        at = self.mark(f"spot interruption of {victim}")
        self.cluster.kubectl("annotate", "nodeclaim", victim, "joiner.sh/interruption=spot")
        self.wait(
            lambda: victim not in {c["metadata"]["name"] for c in self.claims("l4")},
            timeout=120,
            what=f"{victim} gone",
        )
        self.wait(
            lambda: (
                self.all_running("inference", INFERENCE)
                and all(p["spec"].get("nodeName") != victim for p in self.pods("inference"))
            ),
            timeout=180,
            what=f"{INFERENCE} inference pods Running again, none on {victim}",
        )
        # the pod may take the warm L4 GPU at once: then the buffer is bought again behind it
        fresh = self.wait(
            lambda: {c["metadata"]["name"] for c in self.claims("l4")} - before,
            timeout=120,
            what=f"a new l4 NodeClaim in place of {victim}",
        )
        assert self.metric("joiner_interruption_messages_total") >= 1, "no interruption message counted"
        self.wait(
            lambda: self.metric("joiner_interruption_replacement_seconds_count") >= 1,
            timeout=60,
            what="joiner saw the interrupted node's workload Running again",
        )
        self.say(f"   new: {', '.join(sorted(fresh))}")
        self.hold(at, 60)

    def budget(self) -> None:
        at = self.mark(f"L4 budget ${L4_BUDGET:.2f}/h reached: inference to {INFERENCE_PEAK}")
        self.scale("inference", INFERENCE_PEAK)

        def refused() -> bool:
            events = self.cluster.items("events", namespace=self.ns)
            return any(e.get("reason") == "BudgetExceeded" for e in events)

        self.wait(refused, timeout=120, what="a BudgetExceeded Event on an inference pod")
        self.wait(
            lambda: self.metric("joiner_provisioner_unschedulable_pods") >= 1,
            timeout=60,
            what="pods no NodePool can serve",
        )

        def settled() -> int:
            """How many inference pods run, once those and the refused ones make up the Deployment."""
            running = self.running("inference")
            return running if running + self.metric("joiner_provisioner_unschedulable_pods") == INFERENCE_PEAK else 0

        running: int = self.wait(
            settled, timeout=120, what="the inference pods the budget allows Running, the others refused"
        )
        spend = self.metric("joiner_capacity_spend_dollars_per_hour", nodepool="l4")
        assert spend <= L4_BUDGET + 1e-6, f"the l4 pool spends ${spend:.2f}/h, over its ${L4_BUDGET:.2f}/h budget"
        assert running < INFERENCE_PEAK, f"all {INFERENCE_PEAK} inference pods run: the budget did not bind"
        self.say(f"   l4 spends ${spend:.2f}/h of ${L4_BUDGET:.2f}/h; {running}/{INFERENCE_PEAK} inference Running")
        self.hold(at, 75)

    def scale_down(self) -> None:
        before = len(self.claims())
        decided = self.metric("joiner_disruption_decisions_total")
        at = self.mark(f"scale-down: web to {WEB_AFTER}, inference to {INFERENCE_AFTER}, the gang ends")
        self.scale("web", WEB_AFTER)
        self.scale("inference", INFERENCE_AFTER)
        self.cluster.kubectl("delete", "pods", "-n", self.ns, "-l", "app=train", "--wait=false")
        self.wait(
            lambda: self.all_running("web", WEB_AFTER) and self.all_running("inference", INFERENCE_AFTER),
            timeout=120,
            what="the scaled-down pods alone left",
        )
        self.wait(
            lambda: self.metric("joiner_disruption_decisions_total") > decided,
            timeout=120,
            what="consolidation under way",
        )
        self.mark("consolidation gives nodes back")
        self.wait(lambda: not self.claims("h100"), timeout=180, what="the gang's H100 nodes given back")

        def settled() -> bool:
            return self.metric("joiner_disruption_active_commands") == 0 and len(self.claims()) <= before // 2

        self.wait(settled, timeout=240, what=f"NodeClaims down to half of {before} and consolidation done")
        after = len(self.claims())
        decisions = self.metric("joiner_disruption_decisions_total") - decided
        self.say(f"   {before} -> {after} NodeClaims, {decisions:.0f} disruption decisions")
        self.hold(at, 150)


def cluster_running(env: dict[str, str]) -> bool:
    status = subprocess.run(
        ["bash", str(ROOT / "hack" / "cluster.sh"), "status"], cwd=ROOT, env=env, capture_output=True, check=False
    )
    return status.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running at the end")
    args = parser.parse_args()

    env = dict(os.environ)
    was_running = cluster_running(env)
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], cwd=ROOT, env=env, check=True)
    cluster = Cluster(kubeconfig=CLUSTER_DIR / "kubeconfig", bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    for crd in JOINER_KINDS:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    clean_cluster(cluster)
    prometheus_binary = tool("prometheus")

    workdir = Path(tempfile.mkdtemp(prefix="joiner-dashboard-"))
    print(f"logs and Prometheus data in {workdir}", flush=True)
    (workdir / "prometheus").mkdir()
    cluster.apply(pools())
    ns = cluster.create_namespace(f"dashboard-{uuid.uuid4().hex[:6]}")
    joiner = Joiner(
        cluster=cluster,
        log_path=workdir / "joiner.log",
        flags={k.replace("_", "-"): v for k, v in JOINER_FLAGS.items()},
    )
    prom: Prometheus | None = None
    failed = True
    try:
        joiner.start()
        prom = Prometheus(
            binary=prometheus_binary, workdir=workdir / "prometheus", targets=[f"127.0.0.1:{joiner.metrics_port}"]
        ).start()
        run = Run(cluster=cluster, joiner=joiner, ns=ns)
        run.say(f"joiner on :{joiner.metrics_port}, Prometheus on {prom.url}")
        run.warm_up()
        run.burst()
        run.gang()
        run.interruption()
        run.budget()
        run.scale_down()
        end = time.time()

        marks = workdir / "marks.json"
        marks.write_text(dump_marks(run.marks))
        minutes = (end - run.started) / 60
        run.say(f"rendering {minutes:.1f} minutes to {args.out}")
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "hack" / "render-dashboard.py"),
                "--prometheus",
                prom.url,
                "--out",
                str(args.out),
                "--start",
                f"{run.started:.3f}",
                "--end",
                f"{end:.3f}",
                "--rate-interval",
                "1m",
                "--marks",
                str(marks),
                "--title",
                f"joiner dashboard over {minutes:.0f} minutes of a run on the local KWOK cluster (make dashboard)",
            ],
            check=False,
        )
        if out.returncode != 0:
            raise AssertionError(f"hack/render-dashboard.py failed ({out.returncode})")
        failed = False
        run.say(f"done: {args.out}")
        return 0
    except AssertionError as exc:
        print(f"\nFAILED: {exc}\njoiner's log: {joiner.log_path}; Prometheus in {workdir / 'prometheus'}", flush=True)
        return 1
    finally:
        joiner.stop()
        if prom is not None:
            prom.stop()
        clean_cluster(cluster)
        if not was_running and not args.keep_cluster:
            subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down"], cwd=ROOT, env=env, check=False)
        if not failed:
            print(f"(logs kept in {workdir})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
