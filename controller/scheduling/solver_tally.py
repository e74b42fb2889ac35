"""The zone tally of one placement phase (:class:`ZoneTally`): matching pods per zone of each set
of groups a spread counts, and the zones each zonal rule's owners take, kept up to date while
``TopologyRules`` makes the phase's parts. A helper object, not a layer of the solver's chain."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from controller.scheduling.solver_model import Group, Term, ZoneRule

if TYPE_CHECKING:
    from controller.scheduling.solver_topology import TopologyRules


class ZoneTally:
    """For one phase of placement: matching pods per zone of each counted set of groups, and the
    zones where each zonal rule's owners will be, both kept up to date as parts are made."""

    def __init__(self) -> None:
        self._counts: dict[int, tuple[frozenset[int], dict[str, int]]] = {}
        self._present: dict[int, tuple[ZoneRule, set[str]]] = {}

    def counts(self, term: Term, planned: Mapping[tuple[int, str], int], rules: TopologyRules) -> dict[str, int]:
        """``rules._zone_counts(term, planned)``, kept up to date by `add` (terms that select alike
        share one dict): nothing is placed while a phase's parts are made, so only ``planned``
        changes. The caller must not change the dict."""
        key = id(term.matched)
        got = self._counts.get(key)
        if got is None:
            got = self._counts[key] = (term.matched, rules._zone_counts(term, planned))
        return got[1]

    def present(self, rule: ZoneRule, planned: Mapping[tuple[int, str], int], rules: TopologyRules) -> set[str]:
        got = self._present.get(id(rule))
        if got is None:
            zones: set[str] = set()
            for source in (rules.state.placed_zone, planned):
                zones.update(z for (h, z), c in source.items() if c > 0 and h in rule.owners)
            got = self._present[id(rule)] = (rule, zones)
        return got[1]

    def add(self, g: Group, zone: str, pods: int, owned: Sequence[ZoneRule]) -> None:
        """The group's pods planned in ``zone``: they count wherever a rule's selector matches them."""
        for matched, counts in self._counts.values():
            if g.idx in matched:
                counts[zone] = counts.get(zone, 0) + pods
        for rule in owned:
            got = self._present.get(id(rule))
            if got is not None:
                got[1].add(zone)
