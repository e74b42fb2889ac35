"""Gang placement: all pods of a gang or none, optionally all in the cheapest zone that hosts them."""

from __future__ import annotations

from controller.scheduling.model import (
    Gang,
)
from controller.scheduling.solver_choice import NodeChoice
from controller.scheduling.solver_model import Group
from controller.scheduling.solver_numeric import EPS


class GangPlacer(NodeChoice):
    """Places each gang as a unit before the other pods."""

    def _place_gang(self, gang_id: str, groups: list[Group]) -> None:
        opts = self.gang_opts.get(gang_id, Gang(gang_id))
        zones: list[str | None] = [None]
        if opts.same_zone:
            zones = [*sorted(self._all_zones())]
        best: tuple[float, str | None] | None = None
        failure: tuple[int, str] | None = None
        for zone in zones:
            snapshot = self.state.copy()
            parts = self._place_groups(groups, zone=zone)
            if all(p.remaining <= 0 for p in parts):
                cost = sum(self._node_price(n) * n.mult for n in self.state.new if n.gang == gang_id)
                if best is None or cost < best[0] - EPS:
                    best = (cost, zone)
            elif failure is None:
                # explain while the gang's own placements still count (e.g. towards limits)
                stuck = next(p for p in parts if p.remaining > 0)
                reason = stuck.reason or self._explain(stuck.group, stuck.zone)
                failure = (sum(p.remaining for p in parts), reason)
            self.state = snapshot
        if best is not None:
            parts = self._place_groups(groups, zone=best[1])
            return
        # nothing placed: every member is unschedulable, with the first member's reason
        members = sorted((p for g in groups for p in g.pods), key=lambda p: (p.namespace, p.name))
        missing, first_reason = failure if failure is not None else (len(members), "no zone can host the gang")
        text = f"gang {gang_id!r}: {missing} of {len(members)} pods cannot be placed, so none is: {first_reason}"
        for pod in members:
            self.unschedulable[pod.key] = text
        for g in groups:
            self._taken[g.idx] = len(g.pods)
