"""Recognising gangs from the markers users already write, and the names joiner derives from them."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller.gang.markers import (
    POLICY_REPLACE_MEMBER,
    POLICY_RESTART_GANG,
    GangOptions,
    gang_id,
    gang_marker,
    gang_options,
    has_gate,
    is_active,
)
from controller.scheduling import kubeconv
from controller.state.views import PodView
from tests.unit import builders


def options_of(pods: list[dict[str, Any]]) -> GangOptions:
    return gang_options([PodView.of(p) for p in pods])


LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def pod(
    name: str = "p",
    *,
    namespace: str = "ml",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gates: list[str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    return builders.pod(
        name, namespace=namespace, labels=labels or {}, annotations=annotations or {}, gates=gates or (), phase=phase
    )


def test_joiner_label_names_the_gang() -> None:
    marker = gang_marker(PodView.of(pod(labels={"joiner.sh/gang": "train"})))
    assert marker is not None
    assert (marker.key, marker.source, marker.id) == ("ml/train", "joiner", "ml.train")


def test_coscheduling_label_names_the_gang() -> None:
    marker = gang_marker(PodView.of(pod(labels={"scheduling.x-k8s.io/pod-group": "pg"})))
    assert marker is not None
    assert (marker.key, marker.source) == ("ml/pg", "coscheduling")


def test_volcano_annotations_name_the_gang() -> None:
    for key in ("scheduling.k8s.io/group-name", "volcano.sh/group-name"):
        marker = gang_marker(PodView.of(pod(annotations={key: "vc-job"})))
        assert marker is not None
        assert (marker.key, marker.source) == ("ml/vc-job", "volcano")


def test_joiner_label_wins_over_the_others_like_the_solver() -> None:
    p = pod(
        labels={"joiner.sh/gang": "ours", "scheduling.x-k8s.io/pod-group": "theirs"},
        annotations={"volcano.sh/group-name": "vc"},
    )
    marker = gang_marker(PodView.of(p))
    assert marker is not None
    assert marker.key == "ml/ours" == kubeconv.gang_of(p)


def test_a_pod_without_markers_is_no_gang_member() -> None:
    assert gang_marker(PodView.of(pod(labels={"app": "web"}))) is None


def test_only_our_gate_counts() -> None:
    assert has_gate(PodView.of(pod(gates=["example.com/other", "joiner.sh/gang"])))
    assert not has_gate(PodView.of(pod(gates=["example.com/other"])))
    assert not has_gate(PodView.of(pod()))


def test_finished_and_deleted_pods_are_not_active() -> None:
    assert is_active(PodView.of(pod()))
    assert not is_active(PodView.of(pod(phase="Succeeded")))
    assert not is_active(PodView.of(pod(phase="Failed")))
    deleted = pod()
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not is_active(PodView.of(deleted))


@given(
    namespace=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True),
    name=st.text(min_size=1, max_size=300),
)
def test_gang_id_is_always_a_label_value(namespace: str, name: str) -> None:
    gid = gang_id(namespace, name)
    assert len(gid) <= 63
    assert LABEL_VALUE.match(gid), gid
    assert gid == gang_id(namespace, name)


def test_gang_id_keeps_short_names_readable_and_tells_long_ones_apart() -> None:
    assert gang_id("ml", "train-42") == "ml.train-42"
    long_a, long_b = "x" * 80 + "a", "x" * 80 + "b"
    assert gang_id("ml", long_a) != gang_id("ml", long_b)
    assert gang_id("ml", "a/b") != gang_id("ml", "a-b")


def test_options_come_from_the_annotations() -> None:
    options = options_of(
        [
            pod(
                "a",
                annotations={
                    "joiner.sh/gang-size": "8",
                    "joiner.sh/gang-same-zone": "false",
                    "joiner.sh/gang-timeout": "20m",
                    "joiner.sh/gang-member-loss-policy": POLICY_REPLACE_MEMBER,
                },
            ),
            pod("b"),
        ]
    )
    assert (options.size, options.same_zone, options.timeout_seconds) == (8, False, 1200.0)
    assert options.member_loss_policy == POLICY_REPLACE_MEMBER
    assert options.problems == ()


def test_defaults_when_nothing_is_annotated() -> None:
    options = options_of([pod()])
    assert (options.size, options.same_zone, options.timeout_seconds) == (None, None, None)
    assert options.member_loss_policy == POLICY_RESTART_GANG


def test_malformed_annotations_are_reported_in_words_and_ignored() -> None:
    options = options_of(
        [
            pod(
                "a",
                annotations={
                    "joiner.sh/gang-size": "eight",
                    "joiner.sh/gang-same-zone": "maybe",
                    "joiner.sh/gang-timeout": "soon",
                    "joiner.sh/gang-member-loss-policy": "pray",
                },
            )
        ]
    )
    assert options.size is None
    assert options.same_zone is None
    assert options.timeout_seconds is None
    assert options.member_loss_policy == POLICY_RESTART_GANG
    text = " ".join(options.problems)
    for fragment in ("positive whole number", "true or false", "duration such as 20m", "restart-gang"):
        assert fragment in text
