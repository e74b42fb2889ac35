"""The NodePool's TierMix condition: the pool's capacity by capacity type against its targets."""

from __future__ import annotations

from typing import Any

from controller.provisioning.nodepool_status import desired_status, tier_weights

Obj = dict[str, Any]


def pool(**mix: int) -> Obj:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}},
            **({"capacity": {"tierMix": mix}} if mix else {}),
        },
    }


def claim(name: str, tier: str, *, gpus: int = 1, labelled: bool = True, deleting: bool = False) -> Obj:
    labels = {"joiner.sh/nodepool": "gpu"}
    if labelled:
        labels["joiner.sh/capacity-type"] = tier
    meta: Obj = {"name": name, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"requirements": [{"key": "joiner.sh/capacity-type", "operator": "In", "values": [tier]}]},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}},
    }


def tier_condition(p: Obj, claims: list[Obj]) -> Obj | None:
    status, error = desired_status(pool=p, claims=claims, registered=set(), nodeclass_exists=True)
    assert error is None
    return next((c for c in status["conditions"] if c["type"] == "TierMix"), None)


def test_no_mix_no_condition() -> None:
    assert tier_condition(pool(), [claim("a", "spot")]) is None


def test_within_ten_points_of_the_targets_is_held() -> None:
    claims = [claim(f"s{i}", "spot") for i in range(6)] + [
        claim(f"o{i}", "on-demand", labelled=False) for i in range(4)
    ]
    cond = tier_condition(pool(spot=60, onDemand=40), claims)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "WithinTargets")
    assert cond["message"] == "spot 60% (target 60%), on-demand 40% (target 40%), reserved 0% (target 0%)"


def test_spot_short_says_so() -> None:
    claims = [claim("s", "spot")] + [claim(f"o{i}", "on-demand") for i in range(4)]
    cond = tier_condition(pool(spot=60, onDemand=40), claims)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "SpotShort")
    assert "spot 20% (target 60%)" in cond["message"]


def test_reservations_beyond_their_share_are_reported_as_used_first() -> None:
    claims = [claim("r", "reserved", gpus=8), claim("s", "spot", gpus=2)]
    cond = tier_condition(pool(spot=60, onDemand=35, reserved=5), claims)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "ReservedFirst")


def test_an_empty_pool_has_nothing_to_measure() -> None:
    cond = tier_condition(pool(spot=50, onDemand=50), [])
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "NoCapacity")


def test_shares_count_gpus_and_skip_deleting_claims_in_status() -> None:
    weights = tier_weights([claim("a", "spot", gpus=8), claim("b", "on-demand", gpus=2)])
    assert weights == {"spot": 8.0, "on-demand": 2.0, "reserved": 0.0}
    cond = tier_condition(pool(spot=50, onDemand=50), [claim("a", "spot"), claim("b", "on-demand", deleting=True)])
    assert cond is not None
    assert "spot 100%" in cond["message"]
