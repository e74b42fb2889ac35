"""What a new machine from a NodePool is made of: the template hash (drift) and DaemonSet overhead."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.scheduling.resources import Resources
from controller.state.cluster import ClusterState
from controller.state.inputs import daemon_templates
from controller.state.nodepools import nodepool_hash

Obj = dict[str, Any]


def _pool(template: Obj, **extra: Any) -> Obj:
    return {"metadata": {"name": "gpu", "resourceVersion": "1"}, "spec": {"template": template, **extra}}


def test_the_hash_follows_the_template_only() -> None:
    template = {"metadata": {"labels": {"team": "ml"}}, "spec": {"nodeClassRef": {"name": "default"}}}
    same = {"spec": {"nodeClassRef": {"name": "default"}}, "metadata": {"labels": {"team": "ml"}}}  # other key order
    assert nodepool_hash(_pool(template)) == nodepool_hash(_pool(same))
    assert nodepool_hash(_pool(template)) == nodepool_hash(_pool(template, limits={"cpu": "100"}))
    changed = {"metadata": {"labels": {"team": "infra"}}, "spec": {"nodeClassRef": {"name": "default"}}}
    assert nodepool_hash(_pool(template)) != nodepool_hash(_pool(changed))
    assert len(nodepool_hash(_pool(template))) == 16
    assert nodepool_hash({"metadata": {"name": "bare"}}) == nodepool_hash(_pool({}))


def _daemonset(name: str, cpu: str) -> Obj:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}
    return {
        "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": "1"},
        "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}},
    }


def test_every_readable_daemonset_is_overhead_and_an_unreadable_one_is_skipped() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    cluster.informers["DaemonSet"]._apply("ADDED", _daemonset("dcgm", "100m"))
    cluster.informers["DaemonSet"]._apply("ADDED", _daemonset("broken", "lots"))
    daemons = daemon_templates(cluster, component="test")
    assert [(d.name, d.owner) for d in daemons] == [("dcgm", "DaemonSet/dcgm")]
    assert daemons[0].requests == Resources.parse({"cpu": "100m", "memory": "128Mi"})
