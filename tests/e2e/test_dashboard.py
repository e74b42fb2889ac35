"""The Grafana dashboard against a real Prometheus: after a small run that provisions pods, admits
a gang after one rollback, keeps a warm node under a $/h budget, handles a spot interruption and
gives back empty nodes, every query of
every panel in deploy/dashboards/joiner.json returns data. The main panels are rendered to a PNG
by hack/render-dashboard.py (into docs/ when JOINER_DASHBOARD_PNG names the file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.harness import ROOT, Cluster, eventually
from tests.e2e.manifests import deployment, expect_pods_running, nodeclaims, nodeclass, nodepool, pod, req
from tests.e2e.prometheus import Prometheus, tool

DASHBOARD = ROOT / "deploy" / "dashboards" / "joiner.json"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GANG = "joiner.sh/gang"
CHEAP, DEARER = "m7a.medium", "m6i.large"  # the cheapest never registers: the gang rolls back once
WEB = "c6i.large"
Obj = dict[str, Any]


def _gang_member(name: str, ns: str) -> Obj:
    obj = pod(name, ns, cpu="250m", memory="256Mi", node_selector={"joiner.sh/nodepool": "batch"})
    obj["metadata"]["labels"] = {GANG: "train", "app": "train"}
    obj["metadata"]["annotations"] = {"joiner.sh/gang-size": "2"}
    obj["spec"]["schedulingGates"] = [{"name": GANG}]
    return obj


def _queries() -> list[tuple[str, str]]:
    """(panel title, query) for every query of every panel, variables filled in as Grafana would."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [
        (p["title"], t["expr"].replace("$__rate_interval", "5m").replace("$nodepool", ".*"))
        for p in panels
        if p["type"] != "row"
        for t in p["targets"]
    ]


def test_every_dashboard_query_returns_data_after_a_small_run(
    cluster: Cluster, start_joiner: Any, tmp_path: Path
) -> None:
    started = time.time()
    ns = cluster.create_namespace(f"dash-{uuid.uuid4().hex[:6]}")
    disruption = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "3s", "budgets": [{"nodes": "100%"}]}
    web = nodepool("web", requirements=[req(INSTANCE_TYPE, "In", WEB)], limits={"cpu": "64"})
    web["spec"]["disruption"] = disruption
    web["spec"]["capacity"] = {"buffer": {"nodes": 1}, "budget": {"maxPricePerHour": "10.00"}}
    batch = nodepool("batch", requirements=[req(INSTANCE_TYPE, "In", CHEAP, DEARER)], limits={"cpu": "32"})
    cluster.apply([nodeclass(registrationDelay="1s", failures={"neverRegister": [CHEAP]}), web, batch])
    joiner = start_joiner(
        registration_timeout="5",
        gang_member_wait="3",
        gang_backoff="2",
        gang_backoff_max="8",
        gang_timeout="90",
        unavailable_offering_ttl="3",
        disruption_poll_interval="1",
        disruption_validation_delay="1",
    )
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    prom = Prometheus(binary=tool("prometheus"), workdir=workdir, targets=[f"127.0.0.1:{joiner.metrics_port}"]).start()
    try:
        # provisioning: a deployment on the web pool; a gang of two on the batch pool (rolled back once)
        cluster.apply(
            deployment("web", ns, replicas=4, cpu="500m", memory="256Mi", node_selector={"joiner.sh/nodepool": "web"})
        )
        cluster.apply([_gang_member("train-0", ns), _gang_member("train-1", ns)])
        expect_pods_running(cluster, ns, 6, timeout=180)
        eventually(lambda: joiner.metric("joiner_gangs_admitted") == 1, timeout=60, what="the gang admitted")
        assert joiner.metric("joiner_gang_rollbacks_total") >= 1

        # interruption: a spot warning on one of the web nodes
        web_claim = next(c for c in nodeclaims(cluster) if c["metadata"]["labels"]["joiner.sh/nodepool"] == "web")
        cluster.kubectl("annotate", "nodeclaim", web_claim["metadata"]["name"], "joiner.sh/interruption=spot")
        eventually(
            lambda: joiner.metric("joiner_interruption_messages_total") >= 1, timeout=60, what="the interruption read"
        )
        expect_pods_running(cluster, ns, 6, timeout=120)

        # disruption: the web pods go, their nodes are empty and given back
        cluster.kubectl("delete", "deployment", "web", "-n", ns, "--wait=false")
        eventually(
            lambda: joiner.metric("joiner_disruption_decisions_total", reason="Empty") >= 1,
            timeout=120,
            what="an empty node given back",
        )

        # every query of every panel returns data from the Prometheus that scraped this run
        time.sleep(3)  # two scrapes after the last event
        empty = [(title, q) for title, q in _queries() if not prom.query(q)]
        assert not empty, "panels whose query returned nothing:\n" + "\n".join(f"{t}: {q}" for t, q in empty)

        png = tmp_path / "dashboard.png"
        minutes = (time.time() - started) / 60 + 0.5
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "hack" / "render-dashboard.py"),
                "--prometheus",
                prom.url,
                "--out",
                str(png),
                "--minutes",
                f"{minutes:.2f}",
                "--rate-interval",
                "30s",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        target = os.environ.get("JOINER_DASHBOARD_PNG")
        if target:
            shutil.copy(png, ROOT / target)
    finally:
        prom.stop()
