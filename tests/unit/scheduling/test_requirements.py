from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling import Requirement, RequirementError, Requirements, label_selector
from controller.scheduling.taints import Taint, Toleration, first_untolerated

KEY = "example.com/k"


def req(op: str, *values: str) -> Requirement:
    return Requirement.new(KEY, op, values)


def test_operators_accept_the_right_labels() -> None:
    assert req("In", "a", "b").allows("a")
    assert not req("In", "a").allows("c")
    assert not req("In", "a").allows(None)
    assert req("NotIn", "a").allows(None)
    assert req("NotIn", "a").allows("b")
    assert not req("NotIn", "a").allows("a")
    assert req("Exists").allows("x")
    assert not req("Exists").allows(None)
    assert req("DoesNotExist").allows(None)
    assert not req("DoesNotExist").allows("x")
    assert req("Gt", "4").allows("5")
    assert not req("Gt", "4").allows("4")
    assert not req("Gt", "4").allows("five")
    assert not req("Gt", "4").allows(None)
    assert req("Lt", "4").allows("3")
    assert not req("Lt", "4").allows("4")


def test_bad_requirements_are_rejected() -> None:
    with pytest.raises(RequirementError):
        req("Gt", "x")
    with pytest.raises(RequirementError):
        req("Gt", "1", "2")
    with pytest.raises(RequirementError):
        req("Near", "1")


def test_intersections() -> None:
    assert str(req("In", "a", "b").intersect(req("In", "b", "c"))) == f"{KEY} In [b]"
    assert req("In", "a").intersect(req("NotIn", "a")).is_empty()
    assert req("In", "a").intersect(req("DoesNotExist")).is_empty()
    both = req("NotIn", "a").intersect(req("NotIn", "b"))
    assert both.allows(None)
    assert not both.allows("a")
    assert not both.allows("b")
    assert both.allows("c")
    window = req("Gt", "2").intersect(req("Lt", "5"))
    assert [window.allows(str(v)) for v in range(1, 7)] == [False, False, True, True, False, False]
    assert req("Gt", "4").intersect(req("Lt", "5")).is_empty()
    assert req("In", "1", "3", "8").intersect(req("Gt", "2")).values == frozenset({"3", "8"})
    assert req("Exists").intersect(req("DoesNotExist")).is_empty()


def test_min_values_survive_intersection() -> None:
    a = Requirement.new(KEY, "Exists", min_values=3)
    assert a.intersect(req("In", "x", "y", "z", "w")).min_values == 3


def test_expressions_round_trip_through_to_expressions() -> None:
    exprs: list[dict[str, Any]] = [
        {"key": "a", "operator": "In", "values": ["1", "2"]},
        {"key": "b", "operator": "NotIn", "values": ["x"]},
        {"key": "c", "operator": "Exists"},
        {"key": "d", "operator": "DoesNotExist"},
        {"key": "e", "operator": "Gt", "values": ["3"]},
    ]
    reqs = Requirements.from_expressions(exprs)
    assert Requirements.from_expressions(reqs.to_expressions()) == reqs


def test_pod_side_and_node_side_readings() -> None:
    pod = Requirements((Requirement.new("team", "In", ["ml"]), Requirement.new("zone", "NotIn", ["z9"])))
    # a node template that says nothing about "team" will not have the label
    assert pod.compatible_with_node(Requirements.from_labels({"zone": "z1"})) is not None
    assert pod.compatible_with_node(Requirements.from_labels({"zone": "z1", "team": "ml"})) is None
    hostname = Requirements((Requirement.new("kubernetes.io/hostname", "NotIn", ["old"]),))
    assert hostname.compatible_with_node(Requirements()) is None  # a new node gets a fresh hostname
    pinned = Requirements((Requirement.new("kubernetes.io/hostname", "In", ["old"]),))
    assert pinned.compatible_with_node(Requirements()) is not None


def test_label_selector_matches() -> None:
    sel = label_selector({"app": "web"}, [{"key": "tier", "operator": "In", "values": ["a", "b"]}])
    assert sel.matches({"app": "web", "tier": "a"})
    assert not sel.matches({"app": "web"})
    assert label_selector().matches({"anything": "x"})


_values = st.sets(st.sampled_from(["1", "2", "3", "4", "a"]), max_size=3)
_reqs = st.one_of(
    st.builds(lambda v: Requirement.new(KEY, "In", v or {"1"}), _values),
    st.builds(lambda v: Requirement.new(KEY, "NotIn", v), _values),
    st.just(Requirement.new(KEY, "Exists")),
    st.just(Requirement.new(KEY, "DoesNotExist")),
    st.builds(lambda n: Requirement.new(KEY, "Gt", [str(n)]), st.integers(0, 4)),
    st.builds(lambda n: Requirement.new(KEY, "Lt", [str(n)]), st.integers(0, 4)),
)


@settings(max_examples=300, deadline=None)
@given(_reqs, _reqs, st.sampled_from([None, "0", "1", "2", "3", "4", "5", "a"]))
def test_intersection_is_conjunction(a: Requirement, b: Requirement, value: str | None) -> None:
    both = a.intersect(b)
    assert both.allows(value) == (a.allows(value) and b.allows(value))
    assert both == b.intersect(a) or both.allows(value) == b.intersect(a).allows(value)


@settings(max_examples=300, deadline=None)
@given(_reqs, _reqs)
def test_empty_means_nothing_allowed(a: Requirement, b: Requirement) -> None:
    both = a.intersect(b)
    probes = [None, "0", "1", "2", "3", "4", "5", "a", "-7", "100"]
    if both.is_empty():
        assert not any(both.allows(v) for v in probes)


def test_taints_and_tolerations() -> None:
    gpu = Taint("nvidia.com/gpu", "NoSchedule")
    assert Toleration("nvidia.com/gpu", "Exists").tolerates(gpu)
    assert Toleration("", "Exists").tolerates(gpu)  # tolerates everything
    assert not Toleration("nvidia.com/gpu", "Equal", "true").tolerates(gpu)
    assert Toleration("nvidia.com/gpu", "Equal", "").tolerates(gpu)
    assert not Toleration("nvidia.com/gpu", "Exists", effect="NoExecute").tolerates(gpu)
    dedicated = Taint("dedicated", "NoExecute", "ml")
    assert Toleration("dedicated", "Equal", "ml", "NoExecute").tolerates(dedicated)
    assert not Toleration("dedicated", "Equal", "web").tolerates(dedicated)
    soft = Taint("soft", "PreferNoSchedule")
    assert first_untolerated((), [soft]) is None  # preferences never block
    assert first_untolerated((), [soft, dedicated]) == dedicated
    assert str(gpu) == "nvidia.com/gpu=:NoSchedule"


def test_expressions_may_rename_keys_and_requirements_may_keep_only_some_keys() -> None:
    exprs = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": "team", "operator": "In", "values": ["ml"]},
    ]
    reqs = Requirements.from_expressions(exprs, aliases={"karpenter.sh/capacity-type": "joiner.sh/capacity-type"})
    assert reqs.keys() == ("joiner.sh/capacity-type", "team")
    machine = reqs.only({"joiner.sh/capacity-type", "topology.kubernetes.io/zone"})
    assert machine.keys() == ("joiner.sh/capacity-type",)
    assert machine.matches({"joiner.sh/capacity-type": "spot"})
    assert not reqs.matches({"joiner.sh/capacity-type": "spot"})
    with pytest.raises(RequirementError):
        Requirements.from_expressions([{"key": "a", "operator": "Near"}])
