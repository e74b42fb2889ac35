"""The shared writes: conditions and JSON patches guarded by a test of what was read."""

from __future__ import annotations

from datetime import UTC, datetime

from controller.state.patches import (
    ConditionUpdate,
    finalizer_patch,
    label_patch,
    matches,
    owner_patch,
    taint_patch,
    toleration_patch,
    with_conditions,
)
from controller.state.views import NodeClaimView, NodeView, TaintRef
from tests.unit.state.test_views import a_claim, a_node

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def test_a_finalizer_is_added_with_a_test_of_the_list_read() -> None:
    node = NodeView.of({**a_node(), "metadata": {"name": "n", "finalizers": ["other"]}})
    assert finalizer_patch(node, add=True) == [
        {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
        {"op": "replace", "path": "/metadata/finalizers", "value": ["other", "joiner.sh/termination"]},
    ]
    claim = NodeClaimView.of(a_claim())
    assert finalizer_patch(claim, add=True) == []
    assert finalizer_patch(claim, add=False)[-1]["value"] == []
    bare = NodeView.of({"metadata": {"name": "n"}})
    assert finalizer_patch(bare, add=True) == [
        {"op": "add", "path": "/metadata/finalizers", "value": ["joiner.sh/termination"]}
    ]


def test_taints_are_added_and_removed_by_key_and_effect() -> None:
    node = NodeView.of(a_node())
    disrupted = TaintRef(key="joiner.sh/disrupted", effect="NoSchedule")
    patch = taint_patch(node, add=[disrupted])
    assert patch[0]["op"] == "test"
    assert patch[1]["value"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "joiner.sh/disrupted", "effect": "NoSchedule"},
    ]
    assert taint_patch(node, remove=[("nvidia.com/gpu", "NoSchedule")])[1]["value"] == []
    assert taint_patch(node, add=[TaintRef(key="nvidia.com/gpu", effect="NoSchedule")]) == []


def test_a_toleration_is_appended_to_a_pods_own_and_matches_the_taint_exactly() -> None:
    taint = TaintRef(key="joiner.sh/planned", effect="NoSchedule", value="gpu-00012")
    want = {"key": "joiner.sh/planned", "operator": "Equal", "value": "gpu-00012", "effect": "NoSchedule"}
    own = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    assert toleration_patch({"spec": {"tolerations": [own]}}, taint) == [
        {"op": "add", "path": "/spec/tolerations/-", "value": want}
    ]
    assert toleration_patch({"spec": {}}, taint) == [{"op": "add", "path": "/spec/tolerations", "value": [want]}]


def test_labels_go_key_by_key_and_owners_by_uid() -> None:
    node = NodeView.of(a_node())
    assert label_patch(node, {"joiner.sh/nodepool": "gpu", "a/b": "c"}) == [
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}
    ]
    claim = NodeClaimView.of(a_claim())
    owner = owner_patch(node, claim)
    assert owner[-1]["value"][0]["uid"] == "claim-uid"
    owned = NodeView.of({**a_node(), "metadata": {"name": "n", "ownerReferences": [{"uid": "claim-uid"}]}})
    assert owner_patch(owned, claim) == []


def test_conditions_keep_their_transition_time_unless_the_status_changes() -> None:
    claim = NodeClaimView.of(a_claim())
    assert matches(claim, ConditionUpdate("Launched", "True", "Launched"))
    assert not matches(claim, ConditionUpdate("Launched", "True", "Other"))
    same = with_conditions(claim.raw, [ConditionUpdate("Launched", "True", "Again")], now=NOW)
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:05Z"
    assert same[0]["reason"] == "Again"
    flipped = with_conditions(claim.raw, [ConditionUpdate("Drained", "False", "Draining")], now=NOW)
    assert flipped[-1] == {
        "type": "Drained",
        "status": "False",
        "reason": "Draining",
        "message": "",
        "lastTransitionTime": "2026-01-02T00:00:00Z",
    }
