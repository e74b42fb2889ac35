"""spec.capacity and limits.nodes: what the models accept and the words they refuse with (the CRD
carries the same rules as CEL)."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate


def pool(capacity: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}}
    }
    if capacity is not None:
        spec["capacity"] = capacity
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": "p"}, "spec": spec}


def refusal(obj: dict[str, Any]) -> str:
    with pytest.raises(InvalidObjectError) as err:
        validate(NodePool, obj)
    return str(err.value)


def test_a_full_capacity_spec_reads_with_its_defaults() -> None:
    model = validate(
        NodePool,
        pool(
            {
                "buffer": {
                    "gpus": 16,
                    "shape": {
                        "requests": {"nvidia.com/gpu": 8, "cpu": "90"},
                        "nodeSelector": {"joiner.sh/gpu-name": "h100"},
                    },
                },
                "schedules": [{"schedule": "30 8 * * 1-5", "duration": "10h", "buffer": {"nodes": 2}}],
                "forecast": {"enabled": True},
                "budget": {"maxPricePerHour": "120.50"},
            },
            {"nodes": 10, "cpu": "1000"},
        ),
    )
    capacity = model.spec.capacity
    assert capacity is not None
    assert capacity.forecast is not None
    assert (capacity.forecast.lookback, capacity.forecast.lead_time, capacity.forecast.confidence) == (
        "168h",
        "30m",
        0.7,
    )
    assert capacity.budget is not None
    assert capacity.budget.max_price_per_hour == "120.50"
    assert capacity.schedules[0].buffer.nodes == 2


@pytest.mark.parametrize(
    ("capacity", "limits", "message"),
    [
        (
            {"buffer": {"nodes": 1, "gpus": 8}},
            None,
            "spec.capacity.buffer: buffer: set exactly one of 'nodes' or 'gpus'",
        ),
        ({"buffer": {}}, None, "buffer: set exactly one of 'nodes' or 'gpus'"),
        ({"forecast": {"enabled": True, "lookback": "2h"}}, None, "lookback must be 24h or more"),
        ({"tierMix": {"spot": 60, "onDemand": 30}}, None, "spot + onDemand + reserved must be 100, got 90"),
        (
            {"buffer": {"nodes": 1, "shape": {"requests": {"nvidia.com/gpu": 1}}}},
            None,
            "buffer: 'shape' goes with 'gpus', not 'nodes'",
        ),
        (
            {"buffer": {"gpus": 8, "shape": {"requests": {"cpu": 1}}}},
            None,
            "shape: requests must include nvidia.com/gpu",
        ),
        (
            {"buffer": {"gpus": 8, "shape": {"requests": {"nvidia.com/gpu": "0"}}}},
            None,
            "must be a whole number of at least 1",
        ),
        ({"buffer": {"nodes": -1}}, None, "spec.capacity.buffer.nodes"),
        (
            {"schedules": [{"schedule": "every day", "duration": "1h", "buffer": {"nodes": 1}}]},
            None,
            "spec.capacity.schedules[0].schedule: must be a cron schedule",
        ),
        (
            {"schedules": [{"schedule": "0 9 * * *", "duration": "90s", "buffer": {"nodes": 1}}]},
            None,
            "hours and minutes",
        ),
        ({"forecast": {"confidence": 1.5}}, None, "spec.capacity.forecast.confidence"),
        ({"forecast": {"leadTime": "0s"}}, None, "spec.capacity.forecast.leadTime"),
        (
            {"budget": {"maxPricePerHour": "12 dollars"}},
            None,
            "must be a price in $/hour as a decimal string such as \"120.50\", got '12 dollars'",
        ),
        ({"budget": {}}, None, "spec.capacity.budget.maxPricePerHour"),
        (None, {"nodes": "1.5"}, "limits: 'nodes' is a count of nodes such as 10, got '1.5'"),
        (None, {"nodes": "2k"}, "limits: 'nodes' is a count of nodes such as 10, got '2k'"),
    ],
)
def test_bad_capacity_input_is_refused_with_words_that_say_why(
    capacity: dict[str, Any] | None, limits: dict[str, Any] | None, message: str
) -> None:
    assert message in refusal(pool(capacity, limits))
