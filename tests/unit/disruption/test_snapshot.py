"""Reading the cache for the planner: pool policies, drift by template hash, expiry, prices, pending pods."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1.labels import ANNOTATION_NODEPOOL_HASH as NODEPOOL_HASH
from controller.disruption import snapshot
from controller.disruption.budgets import Budget
from controller.disruption.snapshot import offering_price, pool_policy
from controller.state.nodepools import nodepool_hash
from controller.state.views import NodeClaimView, PodView
from tests.unit.disruption.builders import CATALOG

Obj = dict[str, Any]


# the cache hands these views: make them from the test's dicts
def drift_of(claim: Obj, pool: Obj | None) -> str | None:
    return snapshot.drift_of(NodeClaimView.of(claim), pool)


def expiry_of(claim: Obj) -> datetime | None:
    return snapshot.expiry_of(NodeClaimView.of(claim))


def is_pending(pod: Obj) -> bool:
    return snapshot.is_pending(PodView.of(pod))


def pool(**disruption: Any) -> Obj:
    return {
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}},
            "disruption": disruption,
        },
    }


def test_pool_policy_reads_consolidation_settings_and_budgets() -> None:
    policy = pool_policy(
        pool(consolidationPolicy="WhenEmpty", consolidateAfter="5m", budgets=[{"nodes": "2", "reasons": ["Empty"]}])
    )
    assert policy.consolidation_policy == "WhenEmpty"
    assert policy.consolidate_after == timedelta(minutes=5)
    assert policy.budgets == (Budget(nodes="2", reasons=frozenset({"Empty"})),)
    assert policy.consolidates
    assert not policy.underutilized
    never = pool_policy(pool(consolidateAfter="Never"))
    assert never.consolidate_after is None
    assert not never.consolidates
    defaults = pool_policy(pool())
    assert (defaults.consolidate_after, defaults.budgets) == (timedelta(0), (Budget(nodes="10%"),))
    assert defaults.underutilized


def test_unreadable_disruption_settings_leave_the_pool_alone_with_a_reason() -> None:
    broken = pool_policy(pool(budgets=[{"nodes": "1", "schedule": "61 * * * *", "duration": "1h"}]))
    assert broken.problem is not None
    assert "budgets[0]" in broken.problem
    assert not broken.consolidates


def test_drift_is_a_changed_template_hash() -> None:
    p = pool()
    claim = {"metadata": {"name": "c", "annotations": {NODEPOOL_HASH: nodepool_hash(p)}}}
    assert drift_of(claim, p) is None
    p["spec"]["disruption"] = {"consolidateAfter": "1h"}  # not the template: no drift
    assert drift_of(claim, p) is None
    p["spec"]["template"]["metadata"] = {"labels": {"team": "ml"}}
    drift = drift_of(claim, p)
    assert drift is not None
    assert "spec.template changed" in drift
    assert drift_of({"metadata": {"name": "old"}}, p) is None  # made before hashes: cannot tell


def test_a_rebalance_recommendation_drifts_a_node_only_where_the_pool_opts_in() -> None:
    claim = NodeClaimView.of(
        {"metadata": {"name": "c", "annotations": {"joiner.sh/rebalance-recommended": "2026-01-01T00:00:00Z"}}}
    )
    assert snapshot.rebalance_of(claim, pool()) is None  # default: Ignore
    assert snapshot.rebalance_of(claim, pool(rebalanceRecommendation="Ignore")) is None
    why = snapshot.rebalance_of(claim, pool(rebalanceRecommendation="Replace"))
    assert why is not None
    assert "2026-01-01T00:00:00Z" in why
    assert "rebalanc" in why
    plain = NodeClaimView.of({"metadata": {"name": "d"}})
    assert snapshot.rebalance_of(plain, pool(rebalanceRecommendation="Replace")) is None
    assert snapshot.rebalance_of(claim, None) is None


def test_expiry_is_creation_plus_expire_after() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    claim = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"expireAfter": "720h"}}
    assert expiry_of(claim) == created + timedelta(hours=720)
    assert expiry_of({**claim, "spec": {"expireAfter": "Never"}}) is None
    assert expiry_of({**claim, "spec": {}}) is None


def test_node_price_comes_from_its_offering() -> None:
    labels = {
        "node.kubernetes.io/instance-type": "cpu-4",
        "topology.kubernetes.io/zone": "zone-a",
        "joiner.sh/capacity-type": "on-demand",
    }
    assert offering_price(labels, CATALOG) == 0.20
    assert offering_price({**labels, "topology.kubernetes.io/zone": "zone-z"}, CATALOG) is None


def test_pending_means_unbound_ungated_alive_and_not_a_daemon() -> None:
    base: Obj = {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Pending"}}
    assert is_pending(base)
    assert not is_pending({**base, "spec": {"nodeName": "n"}})
    assert not is_pending({**base, "spec": {"schedulingGates": [{"name": "joiner.sh/gang"}]}})
    assert not is_pending({**base, "status": {"phase": "Failed"}})
    daemon = {**base, "metadata": {"name": "d", "ownerReferences": [{"kind": "DaemonSet", "name": "x"}]}}
    assert not is_pending(daemon)


def _pending(name: str, created: datetime) -> PodView:
    return PodView.of(
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "spec": {"containers": [{"name": "c"}]},
        }
    )


def test_kube_scheduler_has_a_backlog_while_it_binds_and_young_pods_wait() -> None:
    now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    young = _pending("young", now - timedelta(minutes=2))
    old = _pending("old", now - timedelta(minutes=11))
    just_bound = now - timedelta(seconds=3)
    assert snapshot.scheduler_backlog(now, just_bound, [old, young])
    assert not snapshot.scheduler_backlog(now, None, [young])  # it has bound nothing
    assert not snapshot.scheduler_backlog(now, now - timedelta(seconds=16), [young])  # it stopped binding
    assert not snapshot.scheduler_backlog(now, just_bound, [])  # nothing waits
    # a pod it has refused for longer than the backlog's age does not hold consolidation off for ever
    assert not snapshot.scheduler_backlog(now, just_bound, [old])
