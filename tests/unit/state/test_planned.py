"""The provisioner's plan as the lifecycle reads it (controller/state/planned.py)."""

from __future__ import annotations

from controller.state.planned import PlannedPods


def test_pods_are_listed_by_the_nodeclaim_they_are_planned_on() -> None:
    book = PlannedPods()
    assert book.on("nc-a") == ()
    book.publish({"ns/p1": "nc-a", "ns/p2": "nc-b", "ns/p3": "nc-a"})
    assert book.on("nc-a") == ("ns/p1", "ns/p3")
    assert book.on("nc-b") == ("ns/p2",)
    book.publish({"ns/p2": "nc-b"})  # the whole plan each time: what left it is gone
    assert book.on("nc-a") == ()


def test_while_a_plan_is_written_the_book_says_so_until_it_is_published() -> None:
    book = PlannedPods()
    assert not book.writing
    book.begin()
    assert book.writing
    book.publish({"ns/p1": "nc-a"})
    assert not book.writing
    assert book.on("nc-a") == ("ns/p1",)


def test_the_version_moves_only_when_pods_are_newly_planned() -> None:
    book = PlannedPods()
    book.publish({"ns/p1": "nc-a", "ns/p2": "nc-a"})
    first = book.version
    book.publish({"ns/p1": "nc-a", "ns/p2": "nc-a"})  # published again after another decision
    book.publish({"ns/p2": "nc-a"})  # p1 bound: it left the plan
    assert book.version == first
    book.publish({"ns/p2": "nc-a", "ns/p3": "nc-b"})  # a new plan's pod
    assert book.version == first + 1


def test_each_pod_s_nodeclaim_is_known_and_a_refused_toleration_is_forgotten_with_its_pod() -> None:
    book = PlannedPods(reserve=True)
    book.publish({"ns/p1": "nc-a", "ns/p2": "nc-b"})
    assert book.claim_of("ns/p1") == "nc-a"
    assert book.claim_of("ns/other") is None
    book.untolerated.update({"ns/p1", "ns/p2"})
    book.publish({"ns/p2": "nc-b"})  # p1 bound: it left the plan
    assert book.untolerated == {"ns/p2"}
    assert book.claim_of("ns/p1") is None


def test_a_nodeclaim_whose_name_does_not_fit_a_taint_value_is_not_reserved() -> None:
    from controller.state.views import NodeClaimView

    book = PlannedPods(reserve=True)
    short = NodeClaimView.of({"metadata": {"name": "gpu-abcde"}, "spec": {}})
    long = NodeClaimView.of({"metadata": {"name": f"{'p' * 58}-abcde"}, "spec": {}})
    assert book.reservable(short, list, None)
    assert not book.reservable(long, list, None)
    book.reserve = False
    assert not book.reservable(short, list, None)
