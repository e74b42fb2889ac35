"""When an interrupted node's work counts as running again."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from controller.interruption.replacement import controller_uid, displaced, replaced
from controller.state.views import PodView
from tests.unit.builders import pod_view

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pod(name: str, node: str | None, owner: str | None, *, phase: str = "Running", kind: str = "ReplicaSet") -> PodView:
    return pod_view(name, namespace="ns", node=node, phase=phase, owner=(kind, owner) if owner else None)


def test_a_deployment_is_replaced_when_it_runs_as_many_pods_as_before_off_the_node() -> None:
    on_node = [pod("web-a", "n1", "rs"), pod("ds-a", "n1", "ds", kind="DaemonSet"), pod("bare", "n1", None)]
    everywhere = [*on_node, pod("web-b", "n2", "rs"), pod("web-c", "n3", "rs")]
    d = displaced(kind="spot_interruption", since=T0, node="n1", on_node=on_node, pods=everywhere)
    assert d is not None
    assert d.wanted == (("rs", 3),)  # the DaemonSet and the bare pod are not counted
    assert not replaced(d, everywhere)  # web-a is still on the interrupted node
    after = [pod("web-b", "n2", "rs"), pod("web-c", "n3", "rs"), pod("web-d", None, "rs", phase="Pending")]
    assert not replaced(d, after)
    after[-1] = pod("web-d", "n4", "rs")
    assert replaced(d, after)


def test_a_restarted_gang_counts_once_every_member_runs_again() -> None:
    members = [pod("train-0", "n1", "sts"), pod("train-1", "n2", "sts")]
    d = displaced(kind="spot_interruption", since=T0, node="n1", on_node=members[:1], pods=members)
    assert d is not None
    assert not replaced(d, [pod("train-1", "n2", "sts")])  # the survivor alone is not the gang
    assert not replaced(d, [pod("train-0", None, "sts", phase="Pending"), pod("train-1", None, "sts", phase="Pending")])
    assert replaced(d, [pod("train-0", "n5", "sts"), pod("train-1", "n6", "sts")])


def test_a_node_with_nothing_a_controller_recreates_displaces_nothing() -> None:
    on_node = [pod("ds", "n1", "ds", kind="DaemonSet"), pod("bare", "n1", None)]
    assert displaced(kind="state_change", since=T0, node="n1", on_node=on_node, pods=on_node) is None
    assert controller_uid(pod("x", "n1", None)) is None


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["n1", "n2", None])), max_size=12))
def test_work_that_runs_again_in_full_off_the_node_is_always_replaced(spec: list[tuple[str, str | None]]) -> None:
    pods = [pod(f"p{i}", node, owner) for i, (owner, node) in enumerate(spec)]
    on_node = [p for p in pods if p.node_name == "n1"]
    d = displaced(kind="spot_interruption", since=T0, node="n1", on_node=on_node, pods=pods)
    if d is None:
        assert not on_node
        return
    rebuilt = [pod(f"new-{owner}-{i}", "n9", owner) for owner, n in d.wanted for i in range(n)]
    assert replaced(d, rebuilt)
    assert not replaced(d, on_node)
