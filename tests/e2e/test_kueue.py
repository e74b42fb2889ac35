"""Kueue's ProvisioningRequest admission check served by joiner, with the real Kueue controller
(built from its Go module by hack/build-kueue.sh) running against the local KWOK cluster: a queued
GPU Job is admitted only once every node it needs exists, and its pods land on those nodes.

Run against your own cluster: JOINER_CLUSTER_DIR=/tmp/kwok-kueue pytest tests/e2e/test_kueue.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hack.ports import free_port
from tests.e2e.harness import ROOT, Cluster, eventually
from tests.e2e.joiner import wait_seconds
from tests.e2e.manifests import GPU, GPU_TOLERATION, nodeclaims, nodeclass, nodepool, req

Obj = dict[str, Any]
PR = "provisioningrequests.autoscaling.x-k8s.io"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
GPU_NAME = "joiner.sh/gpu-name"
LABEL_UID = "joiner.sh/provisioning-request-uid"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK = "check-capacity.autoscaling.x-k8s.io"
FAST = {"gang_backoff": "2", "gang_backoff_max": "8", "gang_timeout": "90", "unavailable_offering_ttl": "3"}


def _selfsigned(directory: Path) -> None:
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip


def _queues(klass: str, name: str, *, managed: list[str] | None = None) -> list[Obj]:
    """A ClusterQueue whose admission check asks for a ProvisioningRequest of ``klass`` for the pod
    sets that ask for one of ``managed`` (default: GPUs; ``[]``: every pod set)."""
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ProvisioningRequestConfig",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": klass,
                "managedResources": [GPU] if managed is None else managed,
                "retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 5, "backoffMaxSeconds": 10},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": name},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 1024},
                                    {"name": "memory", "nominalQuota": "8Ti"},
                                    {"name": GPU, "nominalQuota": 256},
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": name}]},
            },
        },
    ]


KUEUE_KINDS = ("workloads", "clusterqueues", "admissionchecks", "provisioningrequestconfigs", "resourceflavors")


def _remove_kueue_objects(cluster: Cluster) -> None:
    """Kueue's objects of an earlier run, finalizers and all: with Kueue stopped nobody releases them,
    and one left Terminating (a ResourceFlavor) would keep the new ClusterQueues inactive."""
    for kind in KUEUE_KINDS:
        listed = cluster.kubectl("get", f"{kind}.kueue.x-k8s.io", "-A", "-o", "json", check=False)
        if listed.returncode != 0:
            continue
        for obj in json.loads(listed.stdout)["items"]:
            meta = obj["metadata"]
            where = ["-n", meta["namespace"]] if meta.get("namespace") else []
            if meta.get("finalizers"):
                cluster.kubectl(
                    "patch", f"{kind}.kueue.x-k8s.io", meta["name"], *where, "--type=merge",
                    "-p", '{"metadata":{"finalizers":null}}', check=False,
                )  # fmt: skip
            cluster.kubectl("delete", f"{kind}.kueue.x-k8s.io", meta["name"], *where, "--wait=true", check=False)


@pytest.fixture(scope="module")
def kueue(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Kueue's manager as a local process, with the queues of each provisioning class."""
    built = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-kueue.sh")], check=True, capture_output=True, text=True, cwd=ROOT
    )
    home = Path(built.stdout.strip().splitlines()[-1])
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(home / "crds" / "kueue"))
    for crd in ("workloads", "clusterqueues", "localqueues", "admissionchecks", "provisioningrequestconfigs"):
        # right after the apply a CRD may have no conditions yet, which `kubectl wait` takes as an error
        eventually(
            lambda crd=crd: (
                cluster.kubectl(  # type: ignore[misc]
                    "wait", "--for=condition=Established", f"crd/{crd}.kueue.x-k8s.io", "--timeout=30s", check=False
                ).returncode
                == 0
            ),
            timeout=90,
            what=f"the {crd} CRD established",
        )
    state = tmp_path_factory.mktemp("kueue")
    _selfsigned(state / "webhook-certs")
    # with its own certificate management off, Kueue reads the metrics certificate from this fixed path
    _selfsigned(Path("/etc/kueue/metrics/certs"))
    health = free_port()
    config = state / "config.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n"
        "leaderElection: {leaderElect: false}\ninternalCertManagement: {enable: false}\n"
        f"health: {{healthProbeBindAddress: '127.0.0.1:{health}'}}\n"
        f"metrics: {{bindAddress: '127.0.0.1:{free_port()}'}}\n"
        f"webhook: {{host: 127.0.0.1, port: {free_port()}, certDir: '{state / 'webhook-certs'}'}}\n"
        "featureGates: {VisibilityOnDemand: false}\nintegrations: {frameworks: ['batch/job', 'pod']}\n"
    )
    log = (state / "kueue.log").open("ab")
    proc = subprocess.Popen(
        [str(home / "kueue"), f"--config={config}", f"--kubeconfig={cluster.kubeconfig}", "--zap-log-level=2"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
    )
    log.close()

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kueue exited: {(state / 'kueue.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    eventually(ready, timeout=120, interval=0.3, what="kueue /readyz")
    _remove_kueue_objects(cluster)
    cluster.apply(
        [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
            *_queues(ATOMIC, "atomic"),
            *_queues(CHECK, "check"),
            *_queues(ATOMIC, "whole", managed=[]),
        ]
    )
    try:
        yield cluster
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        _remove_kueue_objects(cluster)


def _namespace(cluster: Cluster, queue: str) -> str:
    ns = cluster.create_namespace(f"kueue-{uuid.uuid4().hex[:6]}")
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "gpu", "namespace": ns},
            "spec": {"clusterQueue": queue},
        }
    )
    return ns


def job(name: str, namespace: str, *, pods: int, gpus: int = 1, cpu: str = "1") -> Obj:
    """A Job queued the way Kueue's docs show without its webhook: suspended, with the queue label."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.com/trainer:1",
                            "resources": {
                                "requests": {"cpu": cpu, "memory": "1Gi", GPU: str(gpus)},
                                "limits": {GPU: str(gpus)},
                            },
                        }
                    ],
                }
            },
        },
    }


def requests(cluster: Cluster, namespace: str) -> list[Obj]:
    return cluster.items(PR, namespace=namespace)


def condition(obj: Obj, ctype: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def true(obj: Obj, ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c["status"] == "True"


def reason(obj: Obj, ctype: str) -> str:
    c = condition(obj, ctype)
    return "" if c is None else str(c.get("reason"))


def first_request(cluster: Cluster, namespace: str, ctype: str | None = None) -> Obj | None:
    """The namespace's ProvisioningRequest (Kueue makes one per workload), once it has ``ctype``."""
    found = requests(cluster, namespace)
    if not found or (ctype is not None and condition(found[0], ctype) is None):
        return None
    return found[0]


ZONE = "topology.kubernetes.io/zone"


def claims_when(cluster: Cluster, count: int) -> list[Obj] | None:
    """Exactly ``count`` NodeClaims, each launched (its zone label is written at launch)."""
    claims = nodeclaims(cluster)
    launched = all(ZONE in c["metadata"].get("labels", {}) for c in claims)
    return claims if len(claims) == count and launched else None


def started_pods(cluster: Cluster, namespace: str, count: int) -> list[Obj] | None:
    pods = cluster.items("pods", namespace=namespace)
    started = [p for p in pods if p["status"].get("phase") in ("Running", "Succeeded")]
    return started if len(started) == count else None


def stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def gpu_pool() -> list[Obj]:
    return [nodeclass(registrationDelay="2s"), nodepool("l4", requirements=[req(GPU_NAME, "In", "L4")])]


def test_a_queued_gpu_job_is_admitted_only_when_every_node_exists(kueue: Cluster, start_joiner: Any) -> None:
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    cluster.apply(gpu_pool())
    joiner = start_joiner(**FAST)
    cluster.apply(job("train", ns, pods=4))

    request = eventually(lambda: first_request(cluster, ns), what="Kueue creates a ProvisioningRequest")
    assert request["spec"]["provisioningClassName"] == ATOMIC
    claims = eventually(lambda: claims_when(cluster, 4), what="4 NodeClaims for the request")
    uid = request["metadata"]["uid"]
    assert all(c["metadata"]["labels"]["joiner.sh/provisioning-request-uid"] == uid for c in claims)
    assert len({c["metadata"]["labels"]["topology.kubernetes.io/zone"] for c in claims}) == 1

    def provisioned() -> Obj | None:
        found = first_request(cluster, ns)
        return found if found is not None and true(found, "Provisioned") else None

    admitted = eventually(provisioned, timeout=120, what="Provisioned=True")
    assert reason(admitted, "Provisioned") == "CapacityIsProvisioned"
    running = eventually(
        lambda: started_pods(cluster, ns, 4), timeout=120, what="Kueue unsuspends the Job and its 4 pods run"
    )
    claims = nodeclaims(cluster)
    assert len(claims) == 4, "nothing bought beyond the request"
    booked = {c["status"]["nodeName"] for c in claims}
    # (kwok completes a Job's pods right after they run, so a node may take two in turn)
    assert {p["spec"]["nodeName"] for p in running} <= booked, "every pod on a node booked for it"
    assert all(p["metadata"]["annotations"].get(CONSUME) == request["metadata"]["name"] for p in running)
    initialized = [condition(c, "Initialized") for c in claims]
    last_initialized = max(stamp(str(c["lastTransitionTime"])) for c in initialized if c is not None)
    created = min(stamp(p["metadata"]["creationTimestamp"]) for p in running)
    assert created >= last_initialized, "no pod of the Job existed before every node was Initialized"
    job_created = stamp(cluster.get("job", "train", namespace=ns)["metadata"]["creationTimestamp"])
    provisioned_at = stamp(str((condition(admitted, "Provisioned") or {})["lastTransitionTime"]))
    first_claim = min(stamp(c["metadata"]["creationTimestamp"]) for c in claims)
    # the timeline docs/performance.md reports (seconds from the Job's creation; -s shows it)
    print(
        "kueue timeline:",
        f"request {(stamp(request['metadata']['creationTimestamp']) - job_created).total_seconds():.0f}s",
        f"first NodeClaim {(first_claim - job_created).total_seconds():.0f}s",
        f"last Initialized {(last_initialized - job_created).total_seconds():.0f}s",
        f"Provisioned {(provisioned_at - job_created).total_seconds():.0f}s",
        f"pods created {(created - job_created).total_seconds():.0f}s",
        f"last pod Running {(datetime.now(UTC) - job_created).total_seconds():.0f}s (at most)",
    )
    assert joiner.metric("joiner_provisioningrequests_total", outcome="Provisioned") == 1
    assert joiner.metric("joiner_nodeclaims_created_total", reason="provisioningrequest") == 4
    told = {
        e["reason"]
        for e in cluster.items("events", namespace=ns)
        if e["involvedObject"]["kind"] == "ProvisioningRequest"
    }
    assert {"Provisioning", "Provisioned"} <= told

    # the Job is deleted: Kueue deletes its request, the booking goes
    cluster.kubectl("delete", "job", "train", "-n", ns, "--wait=false")
    eventually(lambda: not requests(cluster, ns), timeout=60, what="the request deleted with its workload")
    eventually(
        lambda: joiner.metric("joiner_provisioningrequest_booked_nodes") == 0, timeout=30, what="booking released"
    )


def finished_pods(cluster: Cluster, namespace: str, count: int) -> list[Obj] | None:
    pods = cluster.items("pods", namespace=namespace)
    done = [p for p in pods if p["status"].get("phase") == "Succeeded"]
    return done if len(done) == count else None


def test_a_job_that_fits_on_free_nodes_is_admitted_without_buying(kueue: Cluster, start_joiner: Any) -> None:
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    pool = nodepool("l4", requirements=[req(GPU_NAME, "In", "L4")])
    pool["spec"]["disruption"] = {"consolidateAfter": "Never"}  # the first Job's nodes stay, empty
    cluster.apply([nodeclass(registrationDelay="2s"), pool])
    joiner = start_joiner(**FAST)
    cluster.apply(job("first", ns, pods=2))
    eventually(lambda: finished_pods(cluster, ns, 2), timeout=120, what="the first Job runs and completes")
    claims = nodeclaims(cluster)
    assert len(claims) == 2
    nodes = {c["status"]["nodeName"] for c in claims}

    # a second Job of the same shape: its pods fit on the two free nodes; nothing is bought
    cluster.apply(job("second", ns, pods=2))

    def second() -> Obj | None:
        found = [r for r in requests(cluster, ns) if r["metadata"]["name"].startswith("job-second-")]
        return found[0] if found and true(found[0], "Provisioned") else None

    answered = eventually(second, timeout=60, what="the second request Provisioned=True")
    assert reason(answered, "Provisioned") == "CapacityIsFound", "cluster-autoscaler's answer: no scale-up needed"

    def second_pods() -> list[Obj] | None:
        pods = [
            p
            for p in cluster.items("pods", namespace=ns)
            if p["metadata"]["annotations"].get(CONSUME) == answered["metadata"]["name"]
            and p["status"].get("phase") in ("Running", "Succeeded")
        ]
        return pods if len(pods) == 2 else None

    ran = eventually(second_pods, timeout=60, what="Kueue admits the second Job and its pods run")
    assert {p["spec"]["nodeName"] for p in ran} <= nodes, "on the free nodes it was answered with"
    assert len(nodeclaims(cluster)) == 2, "nothing bought for the second Job"
    assert joiner.metric("joiner_nodeclaims_created_total", reason="provisioningrequest") == 2


def test_a_job_that_can_never_fit_fails_its_request_and_stays_suspended(kueue: Cluster, start_joiner: Any) -> None:
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    cluster.apply(gpu_pool())
    start_joiner(**FAST)
    cluster.apply(job("huge", ns, pods=2, gpus=16))
    failed = eventually(lambda: first_request(cluster, ns, "Failed"), timeout=60, what="Failed=True")
    assert true(failed, "Failed")
    assert reason(failed, "Failed") == "CapacityCannotFit"
    assert GPU in str((condition(failed, "Failed") or {}).get("message"))
    assert nodeclaims(cluster) == []
    assert cluster.get("job", "huge", namespace=ns)["spec"]["suspend"] is True
    assert not cluster.items("pods", namespace=ns)


def test_check_capacity_answers_without_buying(kueue: Cluster, start_joiner: Any) -> None:
    cluster = kueue
    ns = _namespace(cluster, "check")
    cluster.apply(gpu_pool())
    start_joiner(**FAST)
    cluster.apply(job("probe", ns, pods=2))
    answered = eventually(lambda: first_request(cluster, ns, "Provisioned"), timeout=60, what="an answer")
    assert reason(answered, "Provisioned") == "CapacityIsNotFound"
    wait_seconds(3)
    assert nodeclaims(cluster) == [], "check-capacity buys nothing"
    assert cluster.get("job", "probe", namespace=ns)["spec"]["suspend"] is True


def group_pod(name: str, namespace: str, *, group: str, total: int, gpus: int) -> Obj:
    """A plain pod of a Kueue pod group as Kueue's pod webhook leaves it (the webhook is not
    registered here): the managed label, Kueue's finalizer and its admission scheduling gate, beside
    what the user writes (queue name, group name and total count)."""
    requests = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests[GPU] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kueue.x-k8s.io/queue-name": "gpu",
                "kueue.x-k8s.io/pod-group-name": group,
                "kueue.x-k8s.io/managed": "true",  # the webhook's
            },
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total)},
            "finalizers": ["kueue.x-k8s.io/managed"],  # the webhook's
        },
        "spec": {
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],  # the webhook's
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "main",
                    "image": "example.com/mpi:1",
                    "resources": {"requests": requests, "limits": {GPU: str(gpus)} if gpus else {}},
                }
            ],
        },
    }


def _release_group(cluster: Cluster, namespace: str) -> None:
    for pod in cluster.items("pods", namespace=namespace):
        name = pod["metadata"]["name"]
        cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false", check=False)
        cluster.kubectl(
            "patch", "pod", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False
        )  # fmt: skip


def test_a_pod_group_of_two_shapes_is_admitted_only_when_every_node_exists(kueue: Cluster, start_joiner: Any) -> None:
    """A Kueue pod group (1 launcher without GPU + 4 one-GPU workers): one ProvisioningRequest with
    two pod sets, every pod on a node booked for it, none scheduled before all nodes are Initialized."""
    cluster = kueue
    ns = _namespace(cluster, "whole")
    cluster.apply(gpu_pool())
    joiner = start_joiner(**FAST)
    try:
        cluster.apply(
            [
                group_pod("launcher", ns, group="mpi", total=5, gpus=0),
                *(group_pod(f"worker-{i}", ns, group="mpi", total=5, gpus=1) for i in range(4)),
            ]
        )
        request = eventually(lambda: first_request(cluster, ns), what="Kueue creates one ProvisioningRequest")
        sets = sorted(int(s["count"]) for s in request["spec"]["podSets"])
        assert sets == [1, 4], f"two pod sets, the launcher and the workers: {request['spec']['podSets']}"

        def admitted() -> Obj | None:
            found = first_request(cluster, ns)
            return found if found is not None and true(found, "Provisioned") else None

        provisioned = eventually(admitted, timeout=120, what="Provisioned=True")
        assert len(requests(cluster, ns)) == 1
        assert reason(provisioned, "Provisioned") == "CapacityIsProvisioned"

        def running() -> list[Obj] | None:
            pods = cluster.items("pods", namespace=ns)
            up = [p for p in pods if p["status"].get("phase") == "Running"]
            return up if len(up) == 5 else None

        pods = eventually(running, timeout=120, what="Kueue ungates the group and its 5 pods run")
        uid = provisioned["metadata"]["uid"]
        claims = [c for c in nodeclaims(cluster) if c["metadata"]["labels"].get(LABEL_UID) == uid]
        assert claims, "joiner bought the request's nodes"
        assert len(nodeclaims(cluster)) == len(claims), "nothing bought beside the request"
        booked = {c["status"]["nodeName"] for c in claims}
        assert {p["spec"]["nodeName"] for p in pods} <= booked, "every pod on a node booked for it"
        assert all(p["metadata"]["annotations"].get(CONSUME) == provisioned["metadata"]["name"] for p in pods)
        last_initialized = max(stamp(str((condition(c, "Initialized") or {})["lastTransitionTime"])) for c in claims)
        for p in pods:
            scheduled = condition(p, "PodScheduled")
            assert scheduled is not None
            assert scheduled["status"] == "True"
            at = stamp(str(scheduled["lastTransitionTime"]))
            assert at >= last_initialized, f"{p['metadata']['name']} scheduled before every node was Initialized"
        assert joiner.metric("joiner_nodeclaims_created_total", reason="provisioningrequest") == len(claims)
    finally:
        _release_group(cluster, ns)


def test_a_refusal_is_replanned_while_the_job_waits_and_deleting_the_job_gives_the_nodes_back(
    kueue: Cluster, start_joiner: Any
) -> None:
    """The cloud refuses the first plan's machines: the attempt is rolled back and planned again
    elsewhere while Kueue keeps the Job suspended; admitted once the new machines are Initialized.
    Deleting the Job deletes its request (Kueue), the booking goes, and consolidation removes the nodes."""
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    # one instance type, so the NodeClaim has no other to fall back on; refused in the zone of its
    # cheapest offering, where the first plan buys
    refused = "us-east-1c"
    pool = nodepool("l4", requirements=[req("node.kubernetes.io/instance-type", "In", "g6.2xlarge")])
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "2s"}
    failing = {"insufficientCapacity": [{"instanceType": "g6.2xlarge", "zone": refused}]}
    # the re-plan's machines register 8 s after launch, so the request is still waiting when the
    # checks below read it just after the rollback (with 2 s, a fresh-clone CI run once found it
    # Provisioned already)
    cluster.apply([nodeclass(registrationDelay="8s", failures=failing), pool])
    joiner = start_joiner(**FAST, disruption_poll_interval="1", disruption_validation_delay="1")
    cluster.apply(job("train", ns, pods=2))

    def rolled_back() -> Obj | None:
        return next(
            (
                e
                for e in cluster.items("events", namespace=ns)
                if e["involvedObject"]["kind"] == "ProvisioningRequest" and e["reason"] == "ProvisioningRolledBack"
            ),
            None,
        )

    event = eventually(rolled_back, timeout=60, what="the refused attempt rolled back")
    assert "InsufficientCapacity" in event["message"]
    assert cluster.get("job", "train", namespace=ns)["spec"]["suspend"] is True, "the Job waits, suspended"
    assert not cluster.items("pods", namespace=ns), "no pod exists while the request is re-planned"
    waiting = first_request(cluster, ns)
    assert waiting is not None
    assert not true(waiting, "Provisioned")
    assert not true(waiting, "Failed")

    def provisioned() -> Obj | None:
        found = first_request(cluster, ns)
        return found if found is not None and true(found, "Provisioned") else None

    admitted = eventually(provisioned, timeout=120, what="Provisioned=True after the re-plan")
    assert admitted["metadata"]["uid"] == waiting["metadata"]["uid"], "the same request: Kueue never retried"
    eventually(lambda: finished_pods(cluster, ns, 2), timeout=120, what="Kueue admits the Job and its pods run")
    claims = nodeclaims(cluster)
    assert claims, "the re-plan's machines"
    assert all(c["metadata"]["labels"]["topology.kubernetes.io/zone"] != refused for c in claims)
    assert joiner.metric("joiner_provisioningrequest_rollbacks_total") >= 1
    assert cluster.get("job", "train", namespace=ns)["spec"]["suspend"] is False

    cluster.kubectl("delete", "job", "train", "-n", ns, "--wait=false")
    eventually(lambda: not requests(cluster, ns), timeout=60, what="Kueue deletes the request with the workload")
    eventually(lambda: joiner.metric("joiner_provisioningrequest_booked_nodes") == 0, timeout=30, what="no node booked")
    eventually(lambda: nodeclaims(cluster) == [], timeout=90, what="consolidation removes the empty nodes")
    assert joiner.metric("joiner_disruption_decisions_total", reason="Empty") >= 1


def _log_time(joiner: Any, event: str) -> float:
    """The wall-clock time (epoch seconds, microsecond resolution) of joiner's first log line ``event``."""
    for line in joiner.logs().splitlines():
        if f'"event": "{event}"' in line:
            return stamp(json.loads(line)["timestamp"]).timestamp()
    raise AssertionError(f"joiner never logged {event}")


def test_a_16_by_8_gpu_job_runs_soon_after_its_nodes_are_initialized(kueue: Cluster, start_joiner: Any) -> None:
    """16 pods of 8 H100 each through Kueue: 16 machines in one zone, the Job admitted when all are
    Initialized. Prints the timeline docs/performance.md reports, split into Kueue's and joiner's shares."""
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    delay = 2.0
    h100 = nodepool("h100", requirements=[req(GPU_NAME, "In", "H100")])
    cluster.apply([nodeclass(registrationDelay=f"{delay:.0f}s"), h100])
    joiner = start_joiner(**FAST)
    t_job = time.time()
    cluster.apply(job("big", ns, pods=16, gpus=8, cpu="8"))
    seen = eventually(lambda: first_request(cluster, ns), timeout=60, interval=0.1, what="the request")
    t_seen = time.time()

    def provisioned() -> Obj | None:
        found = first_request(cluster, ns)
        return found if found is not None and true(found, "Provisioned") else None

    admitted = eventually(provisioned, timeout=120, interval=0.1, what="Provisioned=True")
    running = eventually(lambda: started_pods(cluster, ns, 16), timeout=120, interval=0.1, what="16 pods running")
    t_running = time.time()

    claims = nodeclaims(cluster)
    assert len(claims) == 16, "one 8-GPU machine per pod"
    assert all(c["metadata"]["labels"].get(LABEL_UID) == admitted["metadata"]["uid"] for c in claims)
    assert len({c["metadata"]["labels"]["topology.kubernetes.io/zone"] for c in claims}) == 1
    assert {p["spec"]["nodeName"] for p in running} <= {c["status"]["nodeName"] for c in claims}
    last_initialized = max(stamp(str((condition(c, "Initialized") or {})["lastTransitionTime"])) for c in claims)
    created = min(stamp(p["metadata"]["creationTimestamp"]) for p in running)
    assert created >= last_initialized, "no pod of the Job existed before every node was Initialized"

    t_request = stamp(seen["metadata"]["creationTimestamp"]).timestamp()  # whole seconds, rounded down
    t_planned = _log_time(joiner, "provisioningrequest.planned")
    t_provisioned = _log_time(joiner, "provisioningrequest.provisioned")
    joiner_share = t_provisioned - t_request
    # the request exists by the time joiner plans it or the test sees it: joiner took at least this
    joiner_least = t_provisioned - min(t_planned, t_seen)
    kueue_before = t_request - t_job
    after = t_running - t_provisioned
    print(
        "kueue 16x8 timeline (s from the Job's creation):",
        f"request created {kueue_before:.1f} (seen {t_seen - t_job:.1f})",
        f"planned {t_planned - t_job:.2f}",
        f"last Initialized {last_initialized.timestamp() - t_job:.1f}",
        f"Provisioned {t_provisioned - t_job:.2f}",
        f"pods created {created.timestamp() - t_job:.1f}",
        f"all 16 Running {t_running - t_job:.1f};",
        f"joiner's share {joiner_least:.2f}-{joiner_share:.2f} (D={delay:.0f}), Kueue before {kueue_before:.1f},",
        f"Provisioned to Running {after:.1f} (Kueue, the Job controller, kube-scheduler, kwok)",
    )
    # the target (docs/performance.md) is D + 2 s; this guards against a regression (one solve, no
    # retry, no wait on a timer) with room for a loaded CI machine: measured 2.7 to 6.8 s at load 4-6
    assert joiner_least <= delay + 10, f"joiner's share {joiner_least:.2f}s: D + {joiner_least - delay:.1f} s"


def test_a_booked_node_lost_before_the_pods_bind_revokes_the_capacity_and_kueue_deactivates(
    kueue: Cluster, start_joiner: Any
) -> None:
    """The Job's pods carry a scheduling gate of their own, so after admission they wait unbound on
    the booked nodes; one NodeClaim is deleted: CapacityRevoked=True, and Kueue deactivates the
    workload and suspends the Job again. Nothing is bought in the lost node's place."""
    cluster = kueue
    ns = _namespace(cluster, "atomic")
    cluster.apply(gpu_pool())
    joiner = start_joiner(**FAST)
    held = job("held", ns, pods=2)
    held["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    cluster.apply(held)

    def provisioned() -> Obj | None:
        found = first_request(cluster, ns)
        return found if found is not None and true(found, "Provisioned") else None

    request = eventually(provisioned, timeout=120, what="Provisioned=True")

    def gated_pods() -> list[Obj] | None:
        pods = [p for p in cluster.items("pods", namespace=ns) if p["metadata"]["annotations"].get(CONSUME)]
        return pods if len(pods) == 2 else None

    pods = eventually(gated_pods, timeout=60, what="Kueue admits the Job; its 2 pods wait at their own gate")
    assert not any(p["spec"].get("nodeName") for p in pods)
    claims = nodeclaims(cluster)
    assert len(claims) == 2
    lost = claims[0]["metadata"]["name"]
    cluster.kubectl("delete", "nodeclaims.joiner.sh", lost, "--wait=false")

    def revoked() -> Obj | None:
        found = first_request(cluster, ns)
        return found if found is not None and true(found, "CapacityRevoked") else None

    answer = eventually(revoked, timeout=60, what="CapacityRevoked=True")
    assert answer["metadata"]["uid"] == request["metadata"]["uid"]
    assert reason(answer, "CapacityRevoked") == "CapacityIsRevoked"
    assert lost in str((condition(answer, "CapacityRevoked") or {}).get("message"))

    def deactivated() -> bool:
        workloads = cluster.items("workloads.kueue.x-k8s.io", namespace=ns)
        return bool(workloads) and workloads[0]["spec"].get("active") is False

    eventually(deactivated, timeout=60, what="Kueue deactivates the workload")
    eventually(
        lambda: cluster.get("job", "held", namespace=ns)["spec"]["suspend"] is True,
        timeout=60,
        what="the Job suspended again",
    )
    assert joiner.metric("joiner_provisioningrequests_total", outcome="Revoked") == 1
    wait_seconds(3)
    assert [c["metadata"]["name"] for c in nodeclaims(cluster)] == [claims[1]["metadata"]["name"]], (
        "nothing bought in the lost node's place; the other machine stays"
    )
