"""What the STATUS, $/H and LIMIT columns of ``kubectl get nodeclaims`` / ``kubectl get nodepools``
show: the status fields joiner writes for them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1.labels import ANNOTATION_PLANNED_PRICE, LABEL_NODEPOOL
from controller.provisioning.nodepool_status import desired_status, most_used_limit
from controller.scheduling.resources import Resources
from controller.state.patches import ConditionUpdate, claim_status, why_not_ready
from controller.state.refusals import Refusal

Obj = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def conds(*pairs: tuple[str, str, str]) -> list[Obj]:
    return [{"type": t, "status": s, "reason": r} for t, s, r in pairs]


LAUNCHED = ("Launched", "True", "Launched")
REGISTERED = ("Registered", "True", "Registered")
INITIALIZED = ("Initialized", "True", "Initialized")
READY = ("Ready", "True", "Ready")


@pytest.mark.parametrize(
    ("conditions", "deleting", "expected"),
    [
        ([], False, "Launching"),
        (conds(("Launched", "False", "LaunchFailed")), False, "LaunchFailed"),
        (conds(LAUNCHED, ("Registered", "Unknown", "AwaitingNode")), False, "AwaitingNode"),
        (conds(LAUNCHED), False, "Registering"),
        (conds(LAUNCHED, REGISTERED, ("Initialized", "False", "StartupTaintsPresent")), False, "StartupTaintsPresent"),
        (conds(LAUNCHED, REGISTERED, INITIALIZED, ("Ready", "False", "NodeNotReady")), False, "NodeNotReady"),
        (conds(LAUNCHED, REGISTERED, INITIALIZED, READY), False, "Ready"),
        (conds(LAUNCHED, REGISTERED, INITIALIZED, READY, ("Drifted", "True", "Drifted")), False, "Drifted"),
        (conds(LAUNCHED, REGISTERED, INITIALIZED, READY), True, "Deleting"),
    ],
)
def test_a_nodeclaims_status_is_the_first_condition_not_true(
    conditions: list[Obj], deleting: bool, expected: str
) -> None:
    meta: Obj = {"name": "c", **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    assert why_not_ready({"metadata": meta}, conditions) == expected


def test_every_conditions_write_carries_the_reason_it_makes() -> None:
    claim: Obj = {"metadata": {"name": "c"}, "status": {"conditions": conds(LAUNCHED, REGISTERED)}}
    status = claim_status(claim, [ConditionUpdate("Initialized", "False", "NodeNotReady", "kwok")], now=NOW)
    assert status["reason"] == "NodeNotReady"
    assert [c["type"] for c in status["conditions"]] == ["Launched", "Registered", "Initialized"]


def pool(*, limits: Obj | None = None, budget: str | None = None) -> Obj:
    spec: Obj = {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}}}
    if limits is not None:
        spec["limits"] = limits
    if budget is not None:
        spec["capacity"] = {"budget": {"maxPricePerHour": budget}}
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": spec}


def claim(name: str, gpus: int, price: float) -> Obj:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_NODEPOOL: "gpu"},
            "annotations": {ANNOTATION_PLANNED_PRICE: str(price)},
        },
        "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": str(gpus)}},
    }


def status_of(p: Obj, claims: list[Obj], *, nodeclass: bool = True) -> Obj:
    prices = {c["metadata"]["name"]: float(c["metadata"]["annotations"][ANNOTATION_PLANNED_PRICE]) for c in claims}
    status, _ = desired_status(
        pool=p,
        claims=claims,
        registered={c["metadata"]["name"] for c in claims},
        nodeclass_exists=nodeclass,
        prices=prices,
    )
    return status


def test_a_pool_within_its_limits_is_ready_with_its_price_and_most_used_limit() -> None:
    status = status_of(pool(limits={"nvidia.com/gpu": "16", "cpu": "100"}), [claim("a", 4, 1.5), claim("b", 8, 2.25)])
    assert (status["reason"], status["pricePerHour"], status["mostUsedLimit"]) == (
        "Ready",
        "3.75",
        "75% nvidia.com/gpu",
    )


def test_a_limit_of_zero_is_used_up_from_the_start() -> None:
    status = status_of(pool(limits={"nvidia.com/gpu": "0"}), [])
    assert (status["reason"], status["pricePerHour"], status["mostUsedLimit"]) == (
        "LimitsReached",
        "0.00",
        "100% nvidia.com/gpu",
    )


def test_nodes_and_budget_count_as_limits() -> None:
    status = status_of(pool(limits={"nodes": "4"}, budget="3.00"), [claim("a", 1, 1.0), claim("b", 1, 2.0)])
    assert status["reason"] == "LimitsReached"
    assert status["mostUsedLimit"] == "100% budget"
    reached = next(c for c in status["conditions"] if c["type"] == "LimitsReached")
    assert reached["message"] == "budget: $3.00/h of $3.00/h"
    assert most_used_limit(pool(limits={"nodes": "4"}), Resources(), nodes=3, price=0.0) == "75% nodes"


def test_no_limits_no_limit_column_and_why_a_pool_is_not_ready() -> None:
    assert status_of(pool(), [claim("a", 1, 1.0)])["mostUsedLimit"] is None
    assert status_of(pool(), [], nodeclass=False)["reason"] == "NodeClassNotFound"
    bad = pool()
    bad["spec"]["weight"] = -5
    assert status_of(bad, [])["reason"] == "Invalid"


def test_a_pool_that_refused_pending_pods_says_how_many_and_why() -> None:
    status, _ = desired_status(
        pool=pool(),
        claims=[],
        registered=set(),
        nodeclass_exists=True,
        refused=Refusal(pods=3, reason="pod does not tolerate taint nvidia.com/gpu=:NoSchedule"),
    )
    refused = next(c for c in status["conditions"] if c["type"] == "PodsRefused")
    assert (refused["status"], refused["message"]) == (
        "True",
        "3 pods pending: pod does not tolerate taint nvidia.com/gpu=:NoSchedule",
    )
    quiet = next(c for c in status_of(pool(), [])["conditions"] if c["type"] == "PodsRefused")
    assert (quiet["status"], quiet["reason"]) == ("False", "NoneRefused")
