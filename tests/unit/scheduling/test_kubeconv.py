"""Kubernetes JSON -> solver inputs."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1 import NodePool
from controller.scheduling import HostPort, NodePoolTemplate, Requirement, Resources, Taint, solve
from controller.scheduling.kubeconv import ConversionError, daemonset_from_dict, gang_of, pod_from_dict
from controller.scheduling.kubeconv_nodes import (
    existing_nodes_from_dicts,
    nodeclaim_from_dict,
    nodepool_from_dict,
    nodepool_template,
    pool_usage,
)
from controller.scheduling.labels import LABEL_INSTANCE_TYPE
from tests.unit.scheduling.builders import itype


def a_pod(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **meta}, "spec": spec}


def test_requests_follow_kube_scheduler_rules() -> None:
    spec = {
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
        ],
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "250m", "nvidia.com/gpu": "1"}}},
        ],
        "overhead": {"cpu": "50m"},
    }
    pod = pod_from_dict(a_pod(spec))
    # cpu: max(0.5 + 0.25 + 0.1 sidecar, init 2) + 0.05 overhead; memory: max(2Gi, 1Gi)
    assert pod.requests == Resources.parse({"cpu": "2050m", "memory": "2Gi", "nvidia.com/gpu": 1})
    assert pod.namespace == "default"
    assert pod.key == "default/p"


def test_pod_level_resources_take_the_place_of_the_containers_for_what_they_set() -> None:
    # PodLevelResources (on by default since Kubernetes 1.34): cpu and memory set for the pod as a whole
    containers = [
        {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
    ]
    pod = pod_from_dict(a_pod({"containers": containers, "resources": {"requests": {"cpu": "4"}}}))
    assert pod.requests == Resources.parse({"cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "1"})
    # a pod-level limit alone: requested as the containers request it, or as the limit where none does
    limits_only = {"containers": [{"name": "a"}], "resources": {"limits": {"cpu": "2", "memory": "8Gi"}}}
    assert pod_from_dict(a_pod(limits_only)).requests == Resources.parse({"cpu": "2", "memory": "8Gi"})
    limits_only["containers"] = [{"name": "a", "resources": {"requests": {"cpu": "250m"}}}]
    assert pod_from_dict(a_pod(limits_only)).requests == Resources.parse({"cpu": "250m", "memory": "8Gi"})
    # not for other resources (a GPU is a container's), and the overhead still adds
    spec = {"containers": containers, "resources": {"requests": {"nvidia.com/gpu": "4"}}, "overhead": {"cpu": "100m"}}
    assert pod_from_dict(a_pod(spec)).requests == Resources.parse(
        {"cpu": "1600m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    )


def test_node_selection_terms_tolerations_and_preferences() -> None:
    spec = {
        "containers": [{"name": "c"}],
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "joiner.sh/gpu-name", "operator": "In", "values": ["H100"]}]},
                        {"matchExpressions": [{"key": "joiner.sh/gpu-count", "operator": "Gt", "values": ["3"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}}
                ],
            }
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    pod = pod_from_dict(a_pod(spec, namespace="ml", labels={"app": "x"}))
    assert pod.namespace == "ml"
    assert len(pod.node_requirements) == 2
    assert all(t.get("kubernetes.io/arch") is not None for t in pod.node_requirements)
    assert pod.preferred[0].weight == 5
    assert pod.tolerations[0].tolerates(Taint("nvidia.com/gpu", "NoSchedule"))


def test_an_empty_node_selector_term_matches_nothing() -> None:
    spec = {
        "containers": [{"name": "c"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}},
    }
    pod = pod_from_dict(a_pod(spec))
    assert not pod.node_requirements[0].is_satisfiable()


def test_topology_spread_and_pod_affinity_terms() -> None:
    spec = {
        "containers": [{"name": "c"}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["pod-template-hash"],
            },
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
        ],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                ]
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {}, "namespaceSelector": {}}
                ]
            },
        },
    }
    pod = pod_from_dict(a_pod(spec, labels={"app": "web", "pod-template-hash": "abc"}))
    [sc] = pod.spread  # ScheduleAnyway is only a preference
    assert sc.selects({"app": "web", "pod-template-hash": "abc"})
    assert not sc.selects({"app": "web", "pod-template-hash": "old"})
    assert pod.anti_affinity[0].selects("default", {"app": "web"})
    assert not pod.anti_affinity[0].selects("other", {"app": "web"})
    assert pod.affinity[0].all_namespaces
    assert pod.node_requirements == ()  # every node joiner buys has a zone and a hostname


def test_a_spread_or_pod_affinity_on_another_key_needs_nodes_with_that_label() -> None:
    """kube-scheduler puts such a pod only on a node that carries the key (PodTopologySpread's
    "missing required label", InterPodAffinity's "all topology labels must exist")."""
    rack = "example.com/rack"
    spread = {"maxSkew": 1, "topologyKey": rack, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    pod = pod_from_dict(a_pod({"containers": [{"name": "c"}], "topologySpreadConstraints": [spread]}))
    assert [str(t) for t in pod.node_requirements] == [f"{rack} Exists"]
    affine = {"topologyKey": "joiner.sh/gpu-name", "labelSelector": {"matchLabels": {"app": "x"}}}
    spec = {
        "containers": [{"name": "c"}],
        "nodeSelector": {"team": "ml"},
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [affine]}},
    }
    [term] = pod_from_dict(a_pod(spec)).node_requirements
    assert term.get("team") is not None
    assert str(term.get("joiner.sh/gpu-name")) == "joiner.sh/gpu-name Exists"
    # a preference, an anti-affinity (a node without the key has no such pod) or a key every node has: nothing
    others: tuple[dict[str, Any], ...] = (
        {"topologySpreadConstraints": [{**spread, "whenUnsatisfiable": "ScheduleAnyway"}]},
        {
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{**affine, "topologyKey": rack}]}
            }
        },
        {"topologySpreadConstraints": [{**spread, "topologyKey": "joiner.sh/capacity-type"}]},
    )
    for other in others:
        assert pod_from_dict(a_pod({"containers": [{"name": "c"}], **other})).node_requirements == ()


def test_pods_spread_over_a_label_only_a_pool_with_it_gives_get_that_pool_or_are_told_why() -> None:
    rack = "example.com/rack"
    spread = {"maxSkew": 1, "topologyKey": rack, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    pods = [
        pod_from_dict(a_pod({"containers": [{"name": "c"}], "topologySpreadConstraints": [spread]}, name=f"p{i}"))
        for i in range(2)
    ]
    types = (itype("c.large", cpu=2, mem_gi=4, price=0.08),)
    plain = NodePoolTemplate(name="plain", instance_types=types)
    racked = NodePoolTemplate(name="racked", instance_types=types, labels={rack: "r1"}, weight=-1)
    plan = solve(pods=pods, node_pools=[plain])
    assert not plan.new_nodes
    assert plan.unschedulable["default/p0"] == (
        f'nodepool "plain": pod requires {rack} Exists but the nodepool\'s nodes have no label {rack} '
        f"(its topology spread on {rack} counts only nodes with that label)"
    )
    plan = solve(pods=pods, node_pools=[plain, racked])
    assert {n.node_pool for n in plan.new_nodes} == {"racked"}
    assert not plan.unschedulable


def test_gang_markers_and_owner() -> None:
    meta: dict[str, Any] = {"labels": {"scheduling.x-k8s.io/pod-group": "job1"}, "namespace": "ml"}
    meta["ownerReferences"] = [{"kind": "Job", "name": "job1", "uid": "u1", "controller": True}]
    pod = pod_from_dict(a_pod({"containers": [{"name": "c"}]}, **meta))
    assert pod.gang == "ml/job1"
    assert pod.owner == "u1"
    assert gang_of({"metadata": {"annotations": {"volcano.sh/group-name": "pg"}}}) == "default/pg"
    assert pod_from_dict(a_pod({"containers": []}), gang="explicit").gang == "explicit"


def test_bad_pod_names_the_field() -> None:
    bad = a_pod({"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]})
    with pytest.raises(ConversionError, match=r"Pod default/p: spec.containers\[0\].resources.requests"):
        pod_from_dict(bad)


def test_host_ports_as_kube_schedulers_node_ports_filter_reads_them() -> None:
    spec = {
        "initContainers": [
            {"name": "init", "ports": [{"containerPort": 1, "hostPort": 7000}]},  # ended before the pod runs
            {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 15001, "hostPort": 15001}]},
        ],
        "containers": [
            {
                "name": "app",
                "ports": [
                    {"containerPort": 8080},  # no hostPort: takes nothing on the node
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"containerPort": 9090, "hostPort": 9090},
                ],
            }
        ],
    }
    assert pod_from_dict(a_pod(spec)).host_ports == (
        HostPort(53, "UDP", "10.0.0.1"),
        HostPort(9090),
        HostPort(15001),
    )
    # a hostNetwork pod takes every container port it declares (the apiserver defaults hostPort so)
    spec["hostNetwork"] = True
    assert [str(p) for p in pod_from_dict(a_pod(spec)).host_ports] == [
        "UDP/53 on 10.0.0.1",
        "TCP/8080",
        "TCP/9090",
        "TCP/15001",
    ]
    assert pod_from_dict(a_pod({"containers": [{"name": "c"}]})).host_ports == ()
    exporter = {
        "metadata": {"name": "node-exporter", "namespace": "monitoring"},
        "spec": {
            "template": {
                "spec": {"hostNetwork": True, "containers": [{"name": "e", "ports": [{"containerPort": 9100}]}]}
            }
        },
    }
    assert daemonset_from_dict(exporter).host_ports == (HostPort(9100),)
    bad = a_pod({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "HTTP"}]}]})
    with pytest.raises(
        ConversionError, match=r"Pod default/p: spec.containers\[0\].ports\[0\].protocol: must be one of"
    ):
        pod_from_dict(bad)
    bad = a_pod({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": "80"}]}]})
    with pytest.raises(ConversionError, match=r"spec.containers\[0\].ports\[0\].hostPort: must be an integer"):
        pod_from_dict(bad)


NODE = {
    "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a", "joiner.sh/nodepool": "gpu"}},
    "spec": {
        "taints": [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        ],
        "unschedulable": True,
    },
    "status": {
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"},
        "allocatable": {"cpu": "7900m", "memory": "30Gi", "pods": "110", "nvidia.com/gpu": "1"},
    },
}


def test_nodes_with_their_pods() -> None:
    bound = a_pod({"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]})
    done = a_pod({"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]})
    done["metadata"]["name"] = "done"
    done["status"] = {"phase": "Succeeded"}
    [node] = existing_nodes_from_dicts([NODE], [bound, done])
    assert node.allocatable.get("cpu") == 7900
    assert [p.name for p in node.pods] == ["p"]
    assert node.taints == (Taint("nvidia.com/gpu", "NoSchedule"),)  # not-ready is ephemeral
    assert node.unschedulable
    assert node.node_pool == "gpu"
    assert pool_usage("gpu", [node]) == Resources.parse(NODE["status"]["capacity"])  # type: ignore[index]


def test_in_flight_nodeclaim_uses_its_instance_type() -> None:
    it = itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0)
    claim = {
        "metadata": {
            "name": "gpu-abc",
            "labels": {"joiner.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "g.1gpu"},
        },
        "spec": {
            "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}],
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"key": "warming", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "warming", "effect": "NoSchedule"}],
        },
    }
    node = nodeclaim_from_dict(claim, instance_types=[it])
    assert node is not None
    assert node.in_flight
    assert node.allocatable == it.allocatable
    assert node.labels["topology.kubernetes.io/zone"] == "zone-b"
    assert node.taints == (Taint("nvidia.com/gpu", "NoSchedule"),)
    assert nodeclaim_from_dict({"metadata": {"name": "x"}}, instance_types=[it]) is None


def test_daemonset_pod_template() -> None:
    ds = {
        "metadata": {"name": "dcgm", "namespace": "gpu-operator"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "dcgm"}},
                "spec": {
                    "nodeSelector": {"joiner.sh/gpu-manufacturer": "nvidia"},
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                },
            }
        },
    }
    daemon = daemonset_from_dict(ds)
    assert daemon.requests == Resources.parse({"cpu": "100m", "memory": "128Mi"})
    assert daemon.node_requirements[0].get("joiner.sh/gpu-manufacturer") == Requirement.in_(
        "joiner.sh/gpu-manufacturer", "nvidia"
    )
    assert any(t.key == "node.kubernetes.io/unschedulable" for t in daemon.tolerations)


def test_nodepool_conversion_and_use() -> None:
    np_obj = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "weight": 10,
            "limits": {"nvidia.com/gpu": "16"},
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 1},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                    "startupTaints": [{"key": "driver", "effect": "NoSchedule"}],
                },
            },
        },
    }
    types = [itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0, spot=0.3)]
    pool = nodepool_from_dict(np_obj, types)
    assert pool.weight == 10
    assert pool.requirements.get("joiner.sh/capacity-type") == Requirement.in_("joiner.sh/capacity-type", "on-demand")
    assert pool.limits == Resources.parse({"nvidia.com/gpu": 16})
    assert pool.labels == {"team": "ml"}
    assert pool.node_class == "default"
    gpu_pod = pod_from_dict(
        a_pod(
            {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                "tolerations": [{"operator": "Exists"}],
            }
        )
    )
    plan = solve(pods=[gpu_pod], node_pools=[pool])
    assert plan.new_nodes[0].choice.capacity_type == "on-demand"
    node_class_ref = {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}
    bad_spec = {"nodeClassRef": node_class_ref, "requirements": [{"key": "x", "operator": "Near"}]}
    bad = {**np_obj, "spec": {"template": {"spec": bad_spec}}}
    with pytest.raises(ConversionError, match=r"NodePool gpu: spec.template.spec.requirements\[0\]"):
        nodepool_from_dict(bad, types)


def test_scheduling_labels_mirror_the_api() -> None:
    from api.v1 import labels as api_labels
    from controller.scheduling import labels as ours

    for name in ("LABEL_NODEPOOL", "LABEL_CAPACITY_TYPE", "LABEL_INSTANCE_TYPE", "LABEL_ZONE", "LABEL_HOSTNAME"):
        assert getattr(ours, name) == getattr(api_labels, name)
    for name in ("LABEL_GPU_NAME", "LABEL_GPU_COUNT", "LABEL_GPU_MEMORY", "LABEL_GPU_MANUFACTURER", "LABEL_GANG"):
        assert getattr(ours, name) == getattr(api_labels, name)
    assert ours.KARPENTER_LABEL_ALIASES == api_labels.KARPENTER_LABEL_ALIASES
    assert ours.TAINT_UNREGISTERED == api_labels.TAINT_UNREGISTERED


def test_nodepool_template_reads_the_validated_model() -> None:
    manifest: dict[str, Any] = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "mixed"},
        "spec": {
            "limits": {"cpu": "1000", "memory": "4Ti"},
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "kwok"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
                        {"key": "joiner.sh/gpu-count", "operator": "Gt", "values": ["1"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                },
            },
        },
    }
    types = [itype("g.8gpu", cpu=96, mem_gi=768, gpu=8, price=30.0)]
    model = NodePool.model_validate(manifest)
    usage = Resources.parse({"cpu": "8"})
    pool = nodepool_template(model, types, usage=usage)
    assert pool == nodepool_from_dict(manifest, types, usage=usage)
    assert pool == nodepool_from_dict(model, types, usage=usage)
    assert pool.name == "mixed"
    assert pool.weight == 0  # unset: lowest
    assert pool.requirements.get("joiner.sh/capacity-type") == Requirement.new(
        "joiner.sh/capacity-type", "NotIn", ["spot"]
    )
    assert pool.requirements.get("joiner.sh/gpu-count") == Requirement.new("joiner.sh/gpu-count", "Gt", ["1"])
    assert pool.requirements.get(LABEL_INSTANCE_TYPE) == Requirement.new(LABEL_INSTANCE_TYPE, "Exists", min_values=2)
    assert pool.taints == (Taint(key="nvidia.com/gpu", effect="NoSchedule", value="true"),)
    assert pool.startup_taints == ()
    assert pool.limits == Resources.parse({"cpu": 1000, "memory": "4Ti"})
    assert pool.usage == usage
    assert pool.node_class == "kwok"
    assert pool.labels == {"team": "ml"}


def test_a_nodepool_the_crd_would_reject_is_not_converted() -> None:
    base: dict[str, Any] = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}}},
    }
    with pytest.raises(ConversionError, match=r"NodePool p: spec.weight"):
        nodepool_from_dict({**base, "spec": {**base["spec"], "weight": 0}}, [])
    with pytest.raises(ConversionError, match=r"NodePool p: spec.limits.cpu"):
        nodepool_from_dict({**base, "spec": {**base["spec"], "limits": {"cpu": "1e1.5"}}}, [])
    with pytest.raises(ConversionError, match=r"metadata\.name is required"):
        nodepool_from_dict({**base, "metadata": {}}, [])


def test_pods_of_one_shape_share_their_selectors_and_tolerations_and_read_each_value_by_its_type() -> None:
    """Selectors of labels alone and toleration lists are read once per distinct value: pods that
    repeat them get the same objects, and values equal in Python but read differently (True and
    1, "1" and 1) are never taken for one another."""
    from controller.scheduling.kubeconv import _SELECTORS, _TOLERATIONS, _labels_only
    from controller.scheduling.requirements import label_selector
    from controller.scheduling.taints import Toleration

    _SELECTORS.clear()
    _TOLERATIONS.clear()

    def spec(selector: dict[str, Any], tolerations: list[dict[str, Any]]) -> dict[str, Any]:
        spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "labelSelector": selector}
        return {"containers": [{"name": "c"}], "topologySpreadConstraints": [spread], "tolerations": tolerations}

    tolerations = [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    one = pod_from_dict(a_pod(spec({"matchLabels": {"app": "web"}}, tolerations), name="one"))
    two = pod_from_dict(a_pod(spec({"matchLabels": {"app": "web"}}, [dict(t) for t in tolerations]), name="two"))
    assert one.spread[0].selector is two.spread[0].selector
    assert one.spread[0].selector == label_selector({"app": "web"})
    assert one.tolerations is two.tolerations
    assert one.tolerations == (Toleration(key="a", operator="Exists", effect="NoExecute"),)
    # values that compare equal but read as different strings
    as_bool = pod_from_dict(a_pod(spec({"matchLabels": {"app": "web"}}, [{"key": "k", "value": True}]), name="b"))
    as_int = pod_from_dict(a_pod(spec({"matchLabels": {"app": "web"}}, [{"key": "k", "value": 1}]), name="i"))
    assert as_bool.tolerations[0].value == "True"
    assert as_int.tolerations[0].value == "1"
    numeric = pod_from_dict(a_pod(spec({"matchLabels": {"tier": 1}}, []), name="n"))
    text = pod_from_dict(a_pod(spec({"matchLabels": {"tier": "1"}}, []), name="t"))
    assert numeric.spread[0].selector == text.spread[0].selector == label_selector({"tier": "1"})
    # only selectors of string labels alone are kept; expressions are read in full every time
    assert _labels_only({"matchLabels": {"tier": 1}}) is None
    assert _labels_only({"matchLabels": {"a": "b"}, "matchExpressions": []}) == (("a", "b"),)
    assert _labels_only({"matchExpressions": [{"key": "a", "operator": "Exists"}]}) is None
    assert _labels_only({}) == ()
    expr = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}
    assert pod_from_dict(a_pod(spec(expr, []), name="e")).spread[0].selector == label_selector({"app": "web"})
    # a list of tolerations that cannot be a key is read as it is
    listed = pod_from_dict(a_pod(spec({}, [{"key": "k", "value": ["x"]}]), name="l"))
    assert listed.tolerations[0].value == "['x']"
