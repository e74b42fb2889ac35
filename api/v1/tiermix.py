"""NodePool ``spec.capacity.tierMix``: target shares of spot / on-demand / reserved capacity."""

from __future__ import annotations

from typing import Self

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from api.v1.common import cel_rule
from api.v1.meta import SpecModel


class TierMix(SpecModel):
    """Target shares, in percent, of the pool's capacity by capacity type, e.g. 60 / 35 / 5. They add
    up to 100. Counted over the pool's nodes (GPUs for GPU nodes, vCPUs for others), not per node.
    Reserved capacity (a reservation with room) is always used first; new machines go to whichever
    of spot and on-demand is furthest below its share."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "(has(self.spot) ? self.spot : 0) + (has(self.onDemand) ? self.onDemand : 0) + "
                    "(has(self.reserved) ? self.reserved : 0) == 100",
                    "tierMix: spot + onDemand + reserved must be 100",
                )
            ]
        }
    )

    spot: int = Field(default=0, ge=0, le=100)
    """Percent of the pool's capacity bought as spot."""
    on_demand: int = Field(default=0, ge=0, le=100)
    """Percent bought on demand."""
    reserved: int = Field(default=0, ge=0, le=100)
    """Percent from capacity reservations (used first whenever one has room)."""

    @model_validator(mode="after")
    def _adds_up(self) -> Self:
        total = self.spot + self.on_demand + self.reserved
        if total != 100:
            raise PydanticCustomError(
                "tier_mix_total", "tierMix: spot + onDemand + reserved must be 100, got {total}", {"total": total}
            )
        return self
