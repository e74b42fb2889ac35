"""Telling the pods of crossed zonal spreads at the pace their counts allow.

kube-scheduler checks a ``DoNotSchedule`` topology spread when it binds the pod that carries it,
counting the pods bound so far. Spreads whose selectors cross -- pods labelled ``a`` spread over the
zones by the pods labelled ``b``, and pods labelled ``b`` by those labelled ``a`` -- can each wait
for the other: the plan keeps every count within ``maxSkew`` once all its pods are bound, but
kube-scheduler binds the pods the spreads only count (no constraint of their own) as soon as their
Nodes open, and the zones where those run ahead refuse the crossed pods planned there, whose binds
are what would let the other kind's zones catch up. In the race with Karpenter's benchmark workload
as Deployments, 36-49 of 1,000 pods were left so, planned again once kube-scheduler stopped binding,
and 3-7 more machines bought.

``Pacer`` keeps the counts of such spreads within ``maxSkew`` all along: a pod one of them counts
is told (its toleration or nomination written) only while the pods counted in its zone, bound and
told, stay within ``maxSkew`` of the zone with the fewest that are sure to come there -- bound, or
told and carrying no crossed spread of their own, so that nothing keeps them from binding --
wherever the spread's own pods still wait to be bound. A crossed pod told may be refused for a
moment, until the sure ones bind, but never waits on another crossed pod; a zone with the fewest
always takes the next pod. Spreads that count only their own pods, or whose counts no crossed
spread's pods wait on, are not paced: kube-scheduler binds those in any order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller.scheduling.labels import LABEL_ZONE
from controller.scheduling.model import Pod
from controller.scheduling.requirements import Requirements


@dataclass(frozen=True, slots=True)
class Rule:
    """A zonal ``DoNotSchedule`` spread: the pods of ``namespace`` that ``selector`` matches, kept
    within ``max_skew`` of each other over the zones."""

    namespace: str
    selector: Requirements
    max_skew: int

    def counts(self, pod: Pod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def _rules_of(pod: Pod) -> Iterable[Rule]:
    for spread in pod.spread:
        if spread.topology_key == LABEL_ZONE and spread.selector is not None:
            yield Rule(pod.namespace, spread.selector, spread.max_skew)


def crossed_rules(pods: Iterable[Pod]) -> tuple[list[Rule], dict[Rule, list[Pod]]]:
    """The zonal spreads of ``pods`` that wait on each other, and each one's pods (owners).

    A spread waits on another when a pod the first counts carries the second: that pod's bind,
    which raises the first one's count in a zone, waits for the second one's counts. Spreads in a
    cycle of such waits (two or more spreads) are crossed; a spread that counts only its own pods
    waits on itself alone and binds in any order."""
    owners: dict[Rule, list[Pod]] = {}
    pod_list = list(pods)
    for pod in pod_list:
        for rule in _rules_of(pod):
            owners.setdefault(rule, []).append(pod)
    if len(owners) < 2:
        return [], owners
    rules = list(owners)
    # rule -> the rules whose owners it counts
    waits: dict[Rule, set[Rule]] = {
        r: {other for other in rules if other != r and any(r.counts(p) for p in owners[other])} for r in rules
    }
    crossed = [r for r in rules if _on_cycle(r, waits)]
    return crossed, owners


def _on_cycle(start: Rule, waits: Mapping[Rule, set[Rule]]) -> bool:
    seen: set[Rule] = set()
    stack = list(waits[start])
    while stack:
        rule = stack.pop()
        if rule == start:
            return True
        if rule in seen:
            continue
        seen.add(rule)
        stack.extend(waits[rule])
    return False


class Pacer:
    """Which pods of a plan wait for their turn, and whether a pod's turn has come (see the module)."""

    def __init__(self, rules: list[Rule], owners: Mapping[Rule, list[str]], zone_of: Mapping[str, str]) -> None:
        self.rules = rules
        self.owners = {r: list(owners.get(r, ())) for r in rules}
        self.zone_of = dict(zone_of)
        self.counted: dict[str, list[Rule]] = {}  # pod key -> the crossed rules that count it
        self._zones: dict[Rule, set[str]] = {}  # rule -> the zones its pods are planned in
        self._owner_sets = {r: set(keys) for r, keys in self.owners.items()}
        self.owning = {k for keys in self.owners.values() for k in keys}  # pods carrying a crossed spread

    @classmethod
    def of(cls, pods: Mapping[str, Pod], zone_of: Mapping[str, str]) -> Pacer | None:
        """The pacer of a plan's pending pods (``pods`` by key, each placed in ``zone_of[key]``), or
        None when no spreads of theirs cross."""
        placed = {k: p for k, p in pods.items() if zone_of.get(k)}
        rules, owners = crossed_rules(placed.values())
        if not rules:
            return None
        pacer = cls(rules, {r: [p.key for p in owners[r]] for r in rules}, zone_of)
        for key, pod in placed.items():
            counting = [r for r in rules if r.counts(pod)]
            if counting:
                pacer.counted[key] = counting
        for rule in rules:
            zones = {zone_of[o] for o in pacer.owners[rule] if o in zone_of}
            zones.update(zone_of[k] for k, counting in pacer.counted.items() if rule in counting)
            pacer._zones[rule] = zones
        return pacer if pacer.counted else None

    def tally(
        self,
        *,
        bound: Callable[[Rule], Mapping[str, int]],
        waiting: Callable[[str], bool],
        told: Iterable[str],
    ) -> Tally:
        """The counts the turns are judged on: per crossed spread and zone, the pods it counts that are
        ``bound`` (per zone), and ``told`` and still ``waiting``; which of those are sure to come; and
        its own pods still waiting."""
        out = Tally()
        for rule in self.rules:
            counts = bound(rule)
            out.ahead[rule] = Counter(counts)
            out.sure[rule] = Counter(counts)
            out.zones[rule] = self._zones.get(rule, set()) | {z for z, c in counts.items() if c}
            out.owners[rule] = Counter(self.zone_of[o] for o in self.owners[rule] if o in self.zone_of and waiting(o))
        for key in told:
            if key in self.counted and waiting(key):
                self.let(out, key)
        return out

    def let(self, tally: Tally, key: str) -> None:
        """Count pod ``key`` as told in ``tally``."""
        zone = self.zone_of.get(key)
        if zone is None:
            return
        for rule in self.counted.get(key, ()):
            tally.ahead[rule][zone] += 1
            if key not in self.owning:
                tally.sure[rule][zone] += 1

    def turn(self, tally: Tally, key: str) -> bool:
        """Whether pod ``key`` (not told yet) may be told now: for every crossed spread counting it
        whose own pods still wait in its zone, the pods counted there, bound and told, and this one
        stay within ``maxSkew`` of the zone with the fewest sure to come (bound, or told and carrying
        no crossed spread: nothing keeps such a pod from binding)."""
        rules = self.counted.get(key)
        zone = self.zone_of.get(key)
        if not rules or zone is None:
            return True
        for rule in rules:
            others = tally.owners[rule][zone] - (1 if key in self._owner_sets[rule] else 0)
            if others <= 0:
                continue  # nothing of this spread waits in that zone
            sure = tally.sure[rule]
            low = min(sure[z] for z in tally.zones[rule])
            if tally.ahead[rule][zone] + 1 > low + rule.max_skew:
                return False
        return True


@dataclass
class Tally:
    """Per crossed spread: the pods it counts per zone, bound and told (``ahead``), of those the ones
    sure to come (``sure``), the zones its minimum is taken over, and its own pods still waiting."""

    ahead: dict[Rule, Counter[str]] = field(default_factory=dict)
    sure: dict[Rule, Counter[str]] = field(default_factory=dict)
    zones: dict[Rule, set[str]] = field(default_factory=dict)
    owners: dict[Rule, Counter[str]] = field(default_factory=dict)
