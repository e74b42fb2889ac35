"""Provisioning, as a user of a GPU cluster sees it: pending pods become NodeClaims, Nodes, Running pods."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import (
    GPU,
    GPU_TOLERATION,
    cheapest_offering,
    deployment,
    expect_event,
    expect_nodeclaims_initialized,
    expect_pods_running,
    is_true,
    node_of,
    nodeclaims,
    nodeclass,
    nodepool,
    pod,
    req,
)
from tests.e2e.manifests import (
    offline_plan as plan_of,
)

GPU_COUNT = "joiner.sh/gpu-count"
GPU_NAME = "joiner.sh/gpu-name"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
PLANNED = "joiner.sh/planned"
ZONE = "topology.kubernetes.io/zone"


def reserved_nodes(cluster: Cluster) -> list[str]:
    """The Nodes still reserved to planned pods (their `joiner.sh/planned` taint on)."""
    return [
        n["metadata"]["name"]
        for n in cluster.items("nodes")
        if any(t.get("key") == PLANNED for t in n["spec"].get("taints") or [])
    ]


def _ns(cluster: Cluster) -> str:
    return cluster.create_namespace(f"prov-{uuid.uuid4().hex[:6]}")


def spread_over(key: str, dep: dict[str, Any], max_skew: int = 1) -> dict[str, Any]:
    """``dep`` with its pods spread over ``key`` (``DoNotSchedule``, counting the Deployment's pods)."""
    dep["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": dict(dep["spec"]["selector"]["matchLabels"])},
        }
    ]
    return dep


def _gpus(it: dict[str, Any]) -> int:
    return int(it["capacity"].get(GPU, 0))


def test_one_gpu_pod_gets_the_cheapest_fitting_gpu_node(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general")])
    joiner = start_joiner()
    cluster.apply(pod("infer", ns, gpus=1))

    [running] = expect_pods_running(cluster, ns, 1)
    [claim] = expect_nodeclaims_initialized(cluster, 1)
    expected_type, expected_price = cheapest_offering(lambda it: _gpus(it) >= 1)
    labels = claim["metadata"]["labels"]
    assert labels[INSTANCE_TYPE] == expected_type, f"bought {labels[INSTANCE_TYPE]}, cheapest is {expected_type}"
    assert labels["joiner.sh/nodepool"] == "general"
    node = node_of(cluster, ns, "infer")
    assert node["metadata"]["name"] == running["spec"]["nodeName"] == claim["status"]["nodeName"]
    assert node["spec"]["providerID"] == claim["status"]["providerID"]
    assert int(node["metadata"]["labels"][GPU_COUNT]) < 8
    assert not any(t["key"] == "joiner.sh/unregistered" for t in node["spec"].get("taints") or [])
    for ctype in ("Launched", "Registered", "Initialized", "Ready"):
        assert is_true(claim, ctype), ctype
    assert joiner.metric("joiner_nodeclaims_created_total", nodepool="general") == 1
    assert float(claim["metadata"]["annotations"]["joiner.sh/planned-price"]) == expected_price


def test_kubectl_get_says_why_not_ready_what_a_pool_spends_and_its_most_used_limit(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general", limits={GPU: "8"}), nodepool("no-gpus", limits={GPU: "0"})])
    start_joiner()
    cluster.apply(pod("infer", ns, gpus=1))
    expect_pods_running(cluster, ns, 1)
    [claim] = expect_nodeclaims_initialized(cluster, 1)
    name = claim["metadata"]["name"]

    def claim_row() -> dict[str, str] | None:
        rows = {r["Name"]: r for r in cluster.table("/apis/joiner.sh/v1/nodeclaims")}
        row = rows.get(name)
        return row if row is not None and row["Status"] == "Ready" else None

    row = eventually(claim_row, what="kubectl get nodeclaims: STATUS Ready")
    assert (row["Ready"], row["Node"]) == ("True", claim["status"]["nodeName"])

    price = f"{float(claim['metadata']['annotations']['joiner.sh/planned-price']):.2f}"
    gpus = int(claim["status"]["capacity"][GPU])

    def pool_rows() -> dict[str, dict[str, str]] | None:
        rows = {r["Name"]: r for r in cluster.table("/apis/joiner.sh/v1/nodepools")}
        done = rows.get("general", {}).get("$/H") == price and rows.get("no-gpus", {}).get("Status") == "LimitsReached"
        return rows if done else None

    rows = eventually(pool_rows, what="kubectl get nodepools: $/H and STATUS")
    general, none = rows["general"], rows["no-gpus"]
    assert (general["Status"], general["GPU"], general["Limit"]) == ("Ready", str(gpus), f"{gpus * 100 // 8}% {GPU}")
    assert (none["$/H"], none["Limit"], none["Ready"]) == ("0.00", f"100% {GPU}", "True")


def test_two_hundred_mixed_pods_all_run_and_no_node_is_bought_twice(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    # the layout a GPU cluster uses: CPU nodes, 1-GPU inference nodes, multi-GPU training nodes that
    # only training pods tolerate (else kube-scheduler would put 1-GPU pods on them first)
    train_taint = {"key": "example.com/training", "effect": "NoSchedule"}
    setup = [
        nodeclass(),
        nodepool("cpu", requirements=[req(GPU_COUNT, "DoesNotExist")]),
        nodepool("infer", requirements=[req(GPU_COUNT, "In", "1")], taints=[{"key": GPU, "effect": "NoSchedule"}]),
        nodepool("train", requirements=[req(GPU_COUNT, "Gt", "3")], taints=[train_taint]),
    ]
    train_tolerations = [GPU_TOLERATION, {"key": "example.com/training", "operator": "Exists"}]
    workloads = [
        deployment("web", ns, replicas=120, cpu="500m", memory="1Gi"),
        deployment("batch", ns, replicas=40, cpu="2", memory="8Gi"),
        deployment("infer", ns, replicas=32, cpu="4", memory="16Gi", gpus=1),
        deployment("train", ns, replicas=8, cpu="16", memory="64Gi", gpus=4, tolerations=train_tolerations),
    ]
    cluster.apply(setup)
    joiner = start_joiner()
    cluster.apply(workloads)
    pods = expect_pods_running(cluster, ns, 200, timeout=240)

    claims = nodeclaims(cluster)
    nodes = {n["metadata"]["name"]: n for n in cluster.items("nodes")}
    assert len(claims) == len(nodes), "every NodeClaim became exactly one Node"
    # Nothing bought twice: what the controller bought, batch after batch while pods arrived, costs
    # about what one offline solve of all 200 pods costs (`joiner plan`); buying twice would double it.
    # The four ReplicaSets say how many pods are coming, so a batch closes a second after the last
    # of them arrived; on a busy apiserver a Deployment's ReplicaSet can come later than that, and
    # its pods are then solved in a second batch (seen once in CI: 120 and 80 pods).
    bought = joiner.metric("joiner_provisioner_price_per_hour_created_total")
    offline = plan_price(setup, workloads)
    assert bought <= offline * 1.02, f"bought ${bought:.2f}/h, a single plan costs ${offline:.2f}/h"
    for p in pods:
        node = nodes[p["spec"]["nodeName"]]
        wants_gpu = any(GPU in (c["resources"].get("requests") or {}) for c in p["spec"]["containers"])
        on_gpu_node = GPU in node["status"]["allocatable"]
        assert wants_gpu == on_gpu_node, f"{p['metadata']['name']} on {node['metadata']['name']}"


def plan_price(setup: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> float:
    """The $/h `joiner plan` gives for the pods of these Deployments on these NodePools."""
    return float(offline_plan(setup, workloads)["totalPrice"])


def offline_plan(setup: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> dict[str, Any]:
    """`joiner plan -o json` for the pods of these Deployments on these NodePools; all must fit."""
    result = plan_of(setup, workloads)
    assert not result["unschedulable"], result["unschedulable"]
    return result


def test_a_mixed_gpu_burst_buys_the_plan_and_kube_scheduler_follows_it(cluster: Cluster, start_joiner: Any) -> None:
    """Two 1-GPU deployments of different sizes land on new L4 nodes that become Ready together.
    kube-scheduler's default scoring would put a large pod on the emptier node planned for a small one
    and strand the small one; with each planned Node reserved to its pods (the `joiner.sh/planned`
    taint, and its toleration on those pods), it follows the plan: exactly the NodeClaims of one
    offline plan, and no node left empty."""
    ns = _ns(cluster)
    l4 = [
        req(GPU_NAME, "In", "L4"),
        req("joiner.sh/capacity-type", "In", "spot", "on-demand"),
        req("topology.kubernetes.io/zone", "In", "us-east-1a", "us-east-1b", "us-east-1c"),
    ]
    setup = [
        nodeclass(),
        nodepool("cpu", requirements=[req(GPU_COUNT, "DoesNotExist")]),
        nodepool("l4", requirements=l4, taints=[{"key": GPU, "effect": "NoSchedule"}]),
    ]
    small = deployment("llm", ns, replicas=6, cpu="3", memory="12Gi", gpus=1)
    small["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "llm"}},
        }
    ]
    large = deployment("embeddings", ns, replicas=2, cpu="6", memory="24Gi", gpus=1)
    for dep in (small, large):
        dep["spec"]["template"]["spec"]["nodeSelector"] = {GPU_NAME: "L4"}
    cluster.apply(setup)
    joiner = start_joiner()
    cluster.apply([small, large])
    pods = expect_pods_running(cluster, ns, 8, timeout=120)

    planned = offline_plan(setup, [small, large])
    claims = nodeclaims(cluster)
    assert len(claims) == len(planned["nodeClaims"]), (
        f"bought {sorted(c['metadata']['labels'][INSTANCE_TYPE] for c in claims)}, one plan buys "
        f"{sorted(n['instanceType'] for n in planned['nodeClaims'])}"
    )
    used = {p["spec"]["nodeName"] for p in pods}
    empty = [c["status"]["nodeName"] for c in claims if c["status"]["nodeName"] not in used]
    assert not empty, f"nodes left empty after the burst: {empty}"
    # each pod was given the toleration of its planned Node's reservation, and bound there
    by_node = {c["status"]["nodeName"]: c["metadata"]["name"] for c in claims}
    for p in pods:
        reservations = [t.get("value") for t in p["spec"].get("tolerations") or [] if t.get("key") == PLANNED]
        assert reservations == [by_node[p["spec"]["nodeName"]]], f"{p['metadata']['name']}: {reservations}"
    assert joiner.metric("joiner_provisioner_reservation_tolerations_total", result="written") >= 8

    # every pod planned there bound: each Node's room is anyone's again
    eventually(lambda: not reserved_nodes(cluster), timeout=30, what=f"reservations ended on {reserved_nodes(cluster)}")


def test_a_daemonset_the_reservation_keeps_off_runs_on_every_new_node_once_the_planned_pods_are_bound(
    cluster: Cluster, start_joiner: Any
) -> None:
    """A log agent DaemonSet without a toleration of `joiner.sh/planned`: the DaemonSet controller does
    not create its pod on a reserved Node. The Nodes register with everything their NodeClaims asked
    for, so nothing the agent brings is needed to take the planned pods: they stay reserved, the pods
    tolerate their Node's reservation and bind there, and the agent starts on every new Node once the
    reservation ends, in the room the plan left for it. The log says which DaemonSet waited."""
    ns = _ns(cluster)
    agents = cluster.create_namespace(f"agents-{uuid.uuid4().hex[:6]}")
    agent = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "log-agent", "namespace": agents},
        "spec": {
            "selector": {"matchLabels": {"app": "log-agent"}},
            "template": {
                "metadata": {"labels": {"app": "log-agent"}},
                "spec": {
                    "containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m"}}}]
                },
            },
        },
    }
    cluster.apply([nodeclass(), nodepool("default"), agent])
    joiner = start_joiner()
    cluster.apply([deployment("web", ns, replicas=6, cpu="1500m", memory="2Gi")])
    pods = expect_pods_running(cluster, ns, 6)
    nodes = {p["spec"]["nodeName"] for p in pods}

    def agents_on_new_nodes() -> bool:
        running = [p for p in cluster.items("pods", namespace=agents) if p["status"].get("phase") == "Running"]
        return nodes <= {p["spec"].get("nodeName") for p in running}

    try:
        eventually(agents_on_new_nodes, timeout=60, what=f"the log agent Running on {sorted(nodes)}")
    finally:
        # gone before the next test's controller starts: its namespace takes a while to go, and its
        # pods would take room on that test's Nodes
        cluster.kubectl("delete", "daemonset", "log-agent", "-n", agents, "--wait=true", "--timeout=60s", check=False)
    by_node = {c["status"]["nodeName"]: c["metadata"]["name"] for c in nodeclaims(cluster)}
    for p in pods:
        reservations = [t.get("value") for t in p["spec"].get("tolerations") or [] if t.get("key") == PLANNED]
        assert reservations == [by_node[p["spec"]["nodeName"]]], p["metadata"]["name"]
    assert joiner.metric("joiner_provisioner_nominations_total", action="set") == 0
    waited = [
        e
        for e in (json.loads(line) for line in joiner.logs().splitlines() if line.startswith("{"))
        if e.get("event") == "nodeclaim.reserved_daemonsets_wait"
    ]
    assert {by_node[n] for n in nodes} <= {e["nodeclaim"] for e in waited}
    assert all(e["daemonsets"] == ["DaemonSet/log-agent"] for e in waited), waited


def test_an_admission_policy_that_refuses_the_toleration_leaves_the_plan_to_nominations(
    cluster: Cluster, start_joiner: Any
) -> None:
    """A ValidatingAdmissionPolicy forbids tolerations of `joiner.sh/planned` in the namespace: each
    pod's patch is refused, the pod is nominated instead, no Node stays reserved waiting for pods that
    cannot enter it, and every pod runs."""
    ns = _ns(cluster)
    name = f"no-reservations-{ns}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.spec.tolerations) || "
                    "object.spec.tolerations.all(t, !has(t.key) || t.key != 'joiner.sh/planned')",
                    "message": "tolerations of joiner.sh/planned are not allowed here",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        },
    }
    cluster.apply([policy, binding])
    try:
        # the policy is in force once a dry run of the same patch is refused (its informer takes a moment)
        cluster.apply(
            pod("probe", ns, cpu="100m") | {"spec": {**pod("probe", ns)["spec"], "schedulingGates": [{"name": "e2e"}]}}
        )
        toleration = json.dumps(
            [{"op": "add", "path": "/spec/tolerations/-", "value": {"key": PLANNED, "operator": "Exists"}}]
        )

        def refused() -> bool:
            out = cluster.kubectl(
                "patch", "pod", "probe", "-n", ns, "--type", "json", "-p", toleration, "--dry-run=server", check=False
            )
            return out.returncode != 0 and "not allowed here" in out.stderr

        eventually(refused, timeout=30, what="the admission policy in force")
        cluster.kubectl("delete", "pod", "probe", "-n", ns, "--wait=false")
        cluster.apply([nodeclass(), nodepool("default")])
        joiner = start_joiner()
        cluster.apply([deployment("web", ns, replicas=4, cpu="1500m", memory="2Gi")])
        pods = expect_pods_running(cluster, ns, 4)
        for p in pods:
            assert not [t for t in p["spec"].get("tolerations") or [] if t.get("key") == PLANNED], p["metadata"]["name"]
        assert joiner.metric("joiner_provisioner_reservation_tolerations_total", result="refused") >= 4
        assert joiner.metric("joiner_provisioner_nominations_total", action="set") >= 1

        eventually(
            lambda: not reserved_nodes(cluster), timeout=30, what=f"no reservation left on {reserved_nodes(cluster)}"
        )
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found")
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")


def test_a_burst_on_large_nodes_buys_the_plan_as_the_nodes_open_one_by_one(cluster: Cluster, start_joiner: Any) -> None:
    """300 pods of three sizes on 96-CPU machines (five or six of them, tightly packed). The machines open
    one after another; kube-scheduler must not hand the first one to whichever pending pods it tries
    first, or the pods planned there no longer fit, a follow-up solve buys more, and a node planned for
    others stays part or all empty. The planned Nodes open once the pods planned on them are nominated."""
    ns = _ns(cluster)
    large = [
        req(INSTANCE_TYPE, "In", "m7i.24xlarge"),
        req("joiner.sh/capacity-type", "In", "on-demand"),
        req("topology.kubernetes.io/zone", "In", "us-east-1a", "us-east-1b", "us-east-1c"),
    ]
    setup = [nodeclass(), nodepool("large", requirements=large)]
    workloads = [
        deployment("web", ns, replicas=150, cpu="500m", memory="1Gi"),
        deployment("batch", ns, replicas=120, cpu="2", memory="4Gi"),
        deployment("big", ns, replicas=30, cpu="4", memory="16Gi"),
    ]
    cluster.apply(setup)
    joiner = start_joiner()
    cluster.apply(workloads)
    pods = expect_pods_running(cluster, ns, 300, timeout=300)

    planned = offline_plan(setup, workloads)
    claims = nodeclaims(cluster)
    assert len(claims) <= len(planned["nodeClaims"]), (
        f"bought {len(claims)} NodeClaims, one plan buys {len(planned['nodeClaims'])}"
    )
    used = {p["spec"]["nodeName"] for p in pods}
    empty = [c["status"]["nodeName"] for c in claims if c["status"]["nodeName"] not in used]
    assert not empty, f"nodes left empty after the burst: {empty}"
    # kube-scheduler clears a nomination whenever it tries a pod whose planned Node is still closed,
    # and the nominator writes it back: a pod tried in that window (more often on a loaded machine)
    # may bind in room planned for another pod. That pod is then released and solved again, and it
    # must find room on the capacity already bought, not buy more.
    events = [json.loads(line) for line in joiner.logs().splitlines() if line.startswith("{")]
    released = [i for i, e in enumerate(events) if e.get("event") == "provisioner.nomination_released"]
    if released:
        later = [e for e in events[released[0] :] if e.get("event") == "provisioner.solved"]
        assert all(e["new_nodeclaims"] == 0 and e["unschedulable"] == 0 for e in later), (
            f"a solve after a released nomination bought more: {later}"
        )


def test_pods_that_take_one_host_port_get_a_node_each_and_all_run(cluster: Cluster, start_joiner: Any) -> None:
    """kube-scheduler puts no two pods that take one host port on a Node (its NodePorts filter): four
    small relays on hostPort 8080 would fit one Node, but get a NodeClaim each, and the web pods
    beside them fill the room left; every pod runs on what the first plan bought."""
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("default")])
    joiner = start_joiner()
    relay = deployment("relay", ns, replicas=4, cpu="250m", memory="256Mi")
    relay["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    cluster.apply([relay, deployment("web", ns, replicas=4, cpu="250m", memory="256Mi")])
    pods = expect_pods_running(cluster, ns, 8)
    relays = [p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"]["app"] == "relay"]
    assert len(set(relays)) == 4, relays
    claims = nodeclaims(cluster)
    assert len(claims) == 4, [c["metadata"]["name"] for c in claims]
    by_node = {c["status"]["nodeName"]: c["metadata"]["name"] for c in claims}
    assert set(by_node) == set(relays)
    for p in pods:  # each bound on the Node planned for it
        reservations = [t.get("value") for t in p["spec"].get("tolerations") or [] if t.get("key") == PLANNED]
        assert reservations == [by_node[p["spec"]["nodeName"]]], p["metadata"]["name"]
    assert '"provisioner.nomination_released"' not in joiner.logs()


def test_a_pod_runs_in_its_volumes_zone_and_one_whose_claim_is_not_bound_waits_with_an_event(
    cluster: Cluster, start_joiner: Any
) -> None:
    """A trainer reads its dataset from a zonal disk: a PersistentVolume pinned to one zone, bound to
    its claim. kube-scheduler runs it only on a Node in that zone, so joiner buys there, though the
    pod alone would be planned in another. A pod whose claim binds at once (Immediate) but is not
    bound is placed by kube-scheduler nowhere until it is: joiner buys nothing for it and says why."""
    ns = _ns(cluster)
    setup = [nodeclass(), nodepool("default")]
    trainer = pod("trainer", ns, cpu="1", memory="2Gi")
    alone = plan_of(setup, [trainer])["nodeClaims"][0]["zone"]
    zone = next(z for z in ("us-east-1a", "us-east-1b", "us-east-1c") if z != alone)
    volume, immediate = f"dataset-{ns}", f"immediate-{ns}"
    objects = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789"},
                "claimRef": {"namespace": ns, "name": "dataset"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}
                                ]
                            }
                        ]
                    }
                },
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": immediate},
            "provisioner": "example.com/none",
        },
    ]
    claims = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, **spec},
        }
        for name, spec, annotations in (
            ("dataset", {"storageClassName": "", "volumeName": volume}, {"pv.kubernetes.io/bind-completed": "yes"}),
            ("scratch", {"storageClassName": immediate}, {}),
        )
    ]
    writer = pod("writer", ns, cpu="1", memory="2Gi")
    for p, claim_name in ((trainer, "dataset"), (writer, "scratch")):
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    cluster.apply([*setup, *objects, *claims])
    try:
        start_joiner()
        cluster.apply([trainer, writer])
        eventually(
            lambda: cluster.get("pod", "trainer", namespace=ns)["status"].get("phase") == "Running",
            timeout=90,
            what="the trainer Running",
        )
        node = node_of(cluster, ns, "trainer")
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == zone
        event = expect_event(cluster, namespace=ns, name="writer", reason="FailedProvisioning")
        assert 'PersistentVolumeClaim "scratch" is not bound' in event["message"], event["message"]
        assert len(nodeclaims(cluster)) == 1
        assert cluster.get("pod", "writer", namespace=ns)["status"]["phase"] == "Pending"
    finally:
        cluster.kubectl("delete", "pod", "--all", "-n", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)
        cluster.kubectl("delete", "storageclass", immediate, "--wait=false", check=False)


def test_pods_spread_over_a_label_only_one_nodepool_gives_run_on_that_pools_nodes(
    cluster: Cluster, start_joiner: Any
) -> None:
    """A spread over a rack label: kube-scheduler places such a pod only on a Node that carries the
    label. The heavier NodePool does not give its Nodes one, so joiner buys from the one that does,
    and every pod runs."""
    ns = _ns(cluster)
    rack = "example.com/rack"
    cluster.apply([nodeclass(), nodepool("plain", weight=50), nodepool("racked", labels={rack: "r1"})])
    start_joiner()
    cluster.apply(spread_over(rack, deployment("web", ns, replicas=4, cpu="500m", memory="512Mi")))
    pods = expect_pods_running(cluster, ns, 4)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert {cluster.get("node", n)["metadata"]["labels"].get(rack) for n in nodes} == {"r1"}
    assert {c["metadata"]["labels"]["joiner.sh/nodepool"] for c in nodeclaims(cluster)} == {"racked"}


def test_a_spread_over_spot_and_on_demand_runs_half_on_each(cluster: Cluster, start_joiner: Any) -> None:
    """An inference fleet a spot reclaim must not take whole: a spread over the capacity type. Spot
    is cheaper, but the pods are dealt over both capacity types the NodePool offers, and
    kube-scheduler follows: half of them run on on-demand Nodes."""
    ns = _ns(cluster)
    capacity = "joiner.sh/capacity-type"
    cluster.apply([nodeclass(), nodepool("default", requirements=[req(capacity, "In", "spot", "on-demand")])])
    start_joiner()
    cluster.apply(spread_over(capacity, deployment("llm", ns, replicas=6, cpu="1", memory="2Gi")))
    pods = expect_pods_running(cluster, ns, 6)
    kinds = [cluster.get("node", p["spec"]["nodeName"])["metadata"]["labels"][capacity] for p in pods]
    assert sorted(kinds) == ["on-demand"] * 3 + ["spot"] * 3


def test_node_selector_on_gpu_name_is_honoured(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general")])
    start_joiner()
    cluster.apply(pod("a100-job", ns, gpus=1, node_selector={GPU_NAME: "A100"}))
    expect_pods_running(cluster, ns, 1)
    node = node_of(cluster, ns, "a100-job")
    assert node["metadata"]["labels"][GPU_NAME] == "A100"
    expected, _ = cheapest_offering(lambda it: it["labels"].get(GPU_NAME) == "A100")
    assert node["metadata"]["labels"][INSTANCE_TYPE] == expected


def test_tainted_nodepool_only_takes_tolerating_pods(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply(
        [
            nodeclass(),
            nodepool(
                "gpu-only",
                requirements=[req(GPU_COUNT, "Exists")],
                taints=[{"key": GPU, "effect": "NoSchedule"}],
            ),
        ]
    )
    start_joiner()
    cluster.apply(
        [
            pod("tolerates", ns, gpus=1, tolerations=[GPU_TOLERATION]),
            pod("intolerant", ns, gpus=1, tolerations=[]),
        ]
    )
    eventually(
        lambda: cluster.get("pod", "tolerates", namespace=ns)["status"].get("phase") == "Running",
        timeout=90,
        what="tolerating pod Running",
    )
    event = expect_event(cluster, namespace=ns, name="intolerant", reason="FailedProvisioning")
    assert "gpu-only" in event["message"], event["message"]
    assert GPU in event["message"], event["message"]
    assert cluster.get("pod", "intolerant", namespace=ns)["status"]["phase"] == "Pending"
    assert len(nodeclaims(cluster)) == 1


def test_nodepool_at_its_gpu_limit_leaves_pods_pending_with_an_event(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("capped", limits={GPU: "2"}, requirements=[req(GPU_COUNT, "In", "1")])])
    start_joiner()
    cluster.apply([pod(f"job-{i}", ns, gpus=1) for i in range(3)])
    eventually(
        lambda: sum(p["status"].get("phase") == "Running" for p in cluster.items("pods", namespace=ns)) == 2,
        timeout=90,
        what="two pods Running",
    )
    pending = [p for p in cluster.items("pods", namespace=ns) if p["status"].get("phase") == "Pending"]
    assert len(pending) == 1
    event = expect_event(cluster, namespace=ns, name=pending[0]["metadata"]["name"], reason="FailedProvisioning")
    assert "limit" in event["message"], event["message"]
    assert GPU in event["message"], event["message"]
    assert len(nodeclaims(cluster)) == 2

    def limited() -> dict[str, Any] | None:
        pool = cluster.get("nodepool.joiner.sh", "capped")
        return pool if is_true(pool, "LimitsReached") else None

    pool = eventually(limited, what="LimitsReached condition")
    assert pool["status"]["resources"][GPU] == "2"
    assert pool["status"]["nodes"] == 2


def test_insufficient_capacity_on_the_cheapest_offering_falls_back_to_the_next(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    cheapest, _ = cheapest_offering(lambda it: _gpus(it) >= 1)
    cluster.apply(
        [
            nodeclass(failures={"insufficientCapacity": [{"instanceType": cheapest}]}),
            nodepool("general"),
        ]
    )
    start_joiner()
    cluster.apply(pod("infer", ns, gpus=1))
    expect_pods_running(cluster, ns, 1)
    node = node_of(cluster, ns, "infer")
    fallback, _ = cheapest_offering(lambda it: _gpus(it) >= 1 and it["name"] != cheapest)
    assert node["metadata"]["labels"][INSTANCE_TYPE] == fallback


def test_a_node_that_never_registers_is_deleted_after_the_timeout(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cheapest, _ = cheapest_offering(lambda it: _gpus(it) >= 1)
    cluster.apply([nodeclass(failures={"neverRegister": [cheapest]}), nodepool("general")])
    joiner = start_joiner(registration_timeout="8")
    cluster.apply(pod("infer", ns, gpus=1))
    first = eventually(lambda: nodeclaims(cluster), what="a NodeClaim")[0]
    name = first["metadata"]["name"]
    # the pod waits, and `kubectl describe pod` says where it is meant to land
    nominated = expect_event(cluster, namespace=ns, name="infer", reason="Nominated")
    assert f"nodeclaim/{name} ({cheapest}," in nominated["message"]
    eventually(
        lambda: all(c["metadata"]["name"] != name for c in nodeclaims(cluster)),
        timeout=60,
        what=f"NodeClaim {name} deleted after the registration timeout",
    )
    event = expect_event(cluster, namespace="default", name=name, reason="RegistrationTimedOut")
    assert "registration timed out" in event["message"].lower()
    assert joiner.metric("joiner_nodeclaims_terminated_total") >= 1


def test_deleting_a_nodeclaim_drains_and_removes_its_node(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general", requirements=[req(GPU_COUNT, "DoesNotExist")])])
    start_joiner()
    cluster.apply(deployment("web", ns, replicas=3, cpu="1", memory="1Gi"))
    expect_pods_running(cluster, ns, 3)
    [claim] = nodeclaims(cluster)
    node_name = claim["status"]["nodeName"]
    cluster.kubectl("delete", "nodeclaim.joiner.sh", claim["metadata"]["name"], "--wait=false")
    eventually(
        lambda: not any(n["metadata"]["name"] == node_name for n in cluster.items("nodes")),
        timeout=90,
        what=f"node {node_name} removed",
    )
    eventually(
        lambda: not any(c["metadata"]["name"] == claim["metadata"]["name"] for c in nodeclaims(cluster)),
        what="NodeClaim gone (finalizer released)",
    )
    # the evicted pods were re-created by their Deployment and provisioned a new node
    expect_pods_running(cluster, ns, 3, timeout=120)
    assert all(p["spec"]["nodeName"] != node_name for p in cluster.items("pods", namespace=ns))


def test_pods_of_crossed_zone_spreads_all_run_where_they_were_planned(cluster: Cluster, start_joiner: Any) -> None:
    """Two teams' services each spread over the zones by the other team's pods (a selector on the
    other's label), beside plain pods of both teams. Every count is even once all run, but
    kube-scheduler checks a spread on each bind, over the pods bound so far; told the plan all at
    once, it binds the plain pods first and can leave spread pods of both teams each waiting for the
    other. joiner tells them at the pace their counts allow: every pod runs on the Node it was planned
    on (one toleration of a planned NodeClaim each, never planned twice) and nothing more is bought."""
    ns = _ns(cluster)
    zones = ("us-east-1a", "us-east-1b", "us-east-1c")
    cluster.apply([nodeclass(), nodepool("default", requirements=[req("topology.kubernetes.io/zone", "In", *zones)])])
    deps = []
    for team, other in (("a", "b"), ("b", "a")):
        plain = deployment(f"plain-{team}", ns, replicas=24, cpu="250m", memory="256Mi")
        spread = deployment(f"spread-{team}", ns, replicas=24, cpu="250m", memory="256Mi")
        for dep in (plain, spread):
            dep["spec"]["template"]["metadata"]["labels"]["team"] = team
        spread["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"team": other}},
            }
        ]
        deps += [plain, spread]
    start_joiner()
    cluster.apply(deps)
    pods = expect_pods_running(cluster, ns, 96, timeout=180)
    claims = {c["metadata"]["name"]: c for c in nodeclaims(cluster)}
    for p in pods:
        planned = [t["value"] for t in p["spec"].get("tolerations") or [] if t.get("key") == PLANNED]
        assert len(planned) == 1, (p["metadata"]["name"], planned)
        assert claims[planned[0]]["status"]["nodeName"] == p["spec"]["nodeName"], p["metadata"]["name"]
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in cluster.items("nodes")}
    for team in ("a", "b"):
        counts = dict.fromkeys(zones, 0)
        for p in pods:
            if p["metadata"]["labels"]["team"] == team:
                counts[zone_of[p["spec"]["nodeName"]]] += 1
        assert max(counts.values()) - min(counts.values()) <= 1, (team, counts)
