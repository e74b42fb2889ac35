"""Which pods a terminating Node loses, in what order, and when the grace period ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1.labels import ANNOTATION_DO_NOT_DISRUPT
from controller.clock import format_time
from controller.state.views import NodeClaimView, PodView
from controller.termination.drain import grace_deadline, is_drainable, plan_drain
from tests.unit.builders import pod_view as pod

Obj = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def names(pods: tuple[PodView, ...]) -> list[str]:
    return sorted(p.name for p in pods)


def tolerates(pod: PodView, *, key: str, effect: str, value: str = "") -> bool:
    return pod.tolerates(key=key, effect=effect, value=value)


def grace_deadline_of(claim: Obj) -> datetime | None:
    return grace_deadline(NodeClaimView.of(claim))


def test_daemonset_mirror_finished_and_tolerating_pods_are_not_drained() -> None:
    assert is_drainable(pod("web"))
    assert not is_drainable(pod("ds", metadata={"ownerReferences": [{"kind": "DaemonSet", "name": "x"}]}))
    assert not is_drainable(pod("static", metadata={"annotations": {"kubernetes.io/config.mirror": "abc"}}))
    assert not is_drainable(pod("done", status={"phase": "Succeeded"}))
    assert not is_drainable(pod("failed", status={"phase": "Failed"}))
    assert not is_drainable(pod("anything", spec={"tolerations": [{"operator": "Exists"}]}))
    assert not is_drainable(
        pod("t", spec={"tolerations": [{"key": "joiner.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]})
    )
    assert is_drainable(pod("other", spec={"tolerations": [{"key": "gpu", "operator": "Exists"}]}))


def test_toleration_matching() -> None:
    p = pod("p", spec={"tolerations": [{"key": "k", "value": "v", "effect": "NoSchedule"}]})
    assert tolerates(p, key="k", value="v", effect="NoSchedule")
    assert not tolerates(p, key="k", value="w", effect="NoSchedule")
    assert not tolerates(p, key="k", value="v", effect="NoExecute")


def test_regular_pods_are_evicted_before_critical_ones() -> None:
    pods = [pod("web"), pod("dns", spec={"priorityClassName": "system-cluster-critical"})]
    plan = plan_drain(pods=pods, now=T0, deadline=None)
    assert names(plan.evict) == ["web"]
    assert names(plan.waiting) == ["dns"]
    plan = plan_drain(pods=pods[1:], now=T0, deadline=None)
    assert names(plan.evict) == ["dns"]


def test_critical_pods_wait_while_regular_pods_are_still_terminating() -> None:
    leaving = pod("web", metadata={"deletionTimestamp": format_time(T0)})
    dns = pod("dns", spec={"priorityClassName": "system-node-critical"})
    plan = plan_drain(pods=[leaving, dns], now=T0, deadline=None)
    assert plan.evict == ()
    assert names(plan.waiting) == ["dns", "web"]


def test_do_not_disrupt_pods_block_until_the_grace_period_then_everything_is_deleted() -> None:
    keep = pod("train", metadata={"annotations": {ANNOTATION_DO_NOT_DISRUPT: "true"}})
    web = pod("web")
    deadline = T0 + timedelta(hours=1)
    plan = plan_drain(pods=[keep, web], now=T0, deadline=deadline)
    assert names(plan.evict) == ["web"]
    assert names(plan.waiting) == ["train"]
    assert not plan.done
    plan = plan_drain(pods=[keep, web], now=deadline, deadline=deadline)
    assert names(plan.delete) == ["train", "web"]
    assert plan.evict == ()


def test_an_empty_node_is_drained() -> None:
    ds = pod("ds", metadata={"ownerReferences": [{"kind": "DaemonSet", "name": "x"}]})
    assert plan_drain(pods=[ds], now=T0, deadline=None).done


def test_the_grace_deadline_counts_from_deletion() -> None:
    claim = {"metadata": {"deletionTimestamp": format_time(T0)}, "spec": {"terminationGracePeriod": "1h30m"}}
    assert grace_deadline_of(claim) == T0 + timedelta(minutes=90)
    assert grace_deadline_of({"metadata": {"deletionTimestamp": format_time(T0)}, "spec": {}}) is None
    assert grace_deadline_of({"metadata": {}, "spec": {"terminationGracePeriod": "1h"}}) is None


def _prio(name: str, value: str | None, **meta: Any) -> PodView:
    annotations = {} if value is None else {"joiner.sh/eviction-priority": value}
    return pod(name, metadata={"annotations": annotations, **meta})


def test_pods_are_evicted_low_then_medium_then_high() -> None:
    low, plain, medium, high = _prio("batch", "low"), _prio("web", None), _prio("api", "medium"), _prio("db", "high")
    plan = plan_drain(pods=[high, plain, low, medium], now=T0, deadline=None)
    assert names(plan.evict) == ["batch"]
    assert names(plan.waiting) == ["api", "db", "web"]
    # the low pod is terminating: medium waits for it to be gone
    leaving = _prio("batch", "low", deletionTimestamp=format_time(T0))
    plan = plan_drain(pods=[high, plain, leaving, medium], now=T0, deadline=None)
    assert plan.evict == ()
    plan = plan_drain(pods=[high, plain, medium], now=T0, deadline=None)
    assert names(plan.evict) == ["api", "web"]
    plan = plan_drain(pods=[high], now=T0, deadline=None)
    assert names(plan.evict) == ["db"]


def test_an_unknown_priority_counts_as_medium_and_case_does_not_matter() -> None:
    odd, high, low = _prio("odd", "urgent"), _prio("db", "HIGH"), _prio("batch", " Low ")
    assert odd.eviction_priority is None
    plan = plan_drain(pods=[odd, high, low], now=T0, deadline=None)
    assert names(plan.evict) == ["batch"]
    plan = plan_drain(pods=[odd, high], now=T0, deadline=None)
    assert names(plan.evict) == ["odd"]


def test_a_do_not_disrupt_low_pod_holds_back_no_stage_and_critical_pods_still_go_last() -> None:
    annotations = {ANNOTATION_DO_NOT_DISRUPT: "true", "joiner.sh/eviction-priority": "low"}
    keep = pod("train", metadata={"annotations": annotations})
    high = _prio("db", "high")
    dns = pod("dns", spec={"priorityClassName": "system-cluster-critical"})
    plan = plan_drain(pods=[keep, high, dns], now=T0, deadline=None)
    assert names(plan.evict) == ["db"]
    assert names(plan.waiting) == ["dns", "train"]
    plan = plan_drain(pods=[keep, dns], now=T0, deadline=None)
    assert plan.evict == ()
