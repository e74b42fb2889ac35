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

Paced so alone, a zone takes one more crossed pod only once one is bound there, each pod held
meanwhile has failed enough tries that kube-scheduler's back-off (up to 10 s) sets the pace, and at
3,000 pods of the race's workload that took ~21 rounds (all Running at 167-210 s). So each cycle is
broken first: for one spread on it, chosen as the one counting the fewest pods (``breaks``), the pods
it counts are *held* (not told at all) while its own pods are bound. Its counts then stay where they
are, so its own pods bind as soon as their Nodes open and are sure to come like any pod that waits
on nothing, and the spreads that count them pace nothing for long; once its last pod is bound the
held pods are told together, against counts that are now final. Two rounds instead of one a pod per
zone. A spread whose own pods are all held meanwhile paces nothing: none of them can bind before
they are told. A hold is kept only while the counts it freezes let its pods bind in every zone
they wait in (pods bound that no plan placed can make them uneven); otherwise the spread is paced
as above.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller.scheduling.frozen import FrozenLabels, freeze
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
    waits = _waits(rules, owners)  # rule -> the rules whose owners it counts
    crossed = [r for r in rules if _on_cycle(r, waits)]
    return crossed, owners


def _waits(rules: list[Rule], owners: Mapping[Rule, list[Pod]]) -> dict[Rule, set[Rule]]:
    """Each rule -> the other rules some of whose owners it counts. Owners are compared as the label
    sets they carry (a Deployment's pods share one), and a selector requiring a label value is only
    compared with the rules whose owners carry that value: hundreds of Deployments spread over their
    own pods cost one look each, not one per pair."""
    kinds: dict[Rule, set[FrozenLabels]] = {r: {freeze(p.labels) for p in owners[r]} for r in rules}
    by_namespace: dict[str, list[Rule]] = {}
    carrying: dict[tuple[str, str, str], set[Rule]] = {}  # (namespace, key, value) -> rules whose owners carry it
    for r in rules:
        by_namespace.setdefault(r.namespace, []).append(r)
        for labels in kinds[r]:
            for key, value in labels.items():
                carrying.setdefault((r.namespace, key, value), set()).add(r)
    waits: dict[Rule, set[Rule]] = {}
    for r in rules:
        required = next((q for q in r.selector if not q.complement and not q.allow_absent), None)
        if required is None:
            candidates: Iterable[Rule] = by_namespace[r.namespace]
        else:
            candidates = {o for v in required.values for o in carrying.get((r.namespace, required.key, v), ())}
        waits[r] = {o for o in candidates if o != r and any(r.selector.matches(labels) for labels in kinds[o])}
    return waits


def breaks(rules: list[Rule], owners: Mapping[Rule, set[str]], counted: Mapping[Rule, set[str]]) -> list[Rule]:
    """The crossed spreads whose counted pods are held while their own pods are bound (see the
    module): one spread at a time, on a cycle of waits left unbroken, counting none of its own pods
    (their holding would wait on itself) and waiting on no spread chosen before nor waited on by one
    (a pod held by one hold that another waits for), the one counting the fewest pods."""
    waits = {r: {o for o in rules if o != r and counted.get(r, set()) & owners.get(o, set())} for r in rules}
    chosen: list[Rule] = []
    while True:
        left = {r: waits[r] - set(chosen) for r in rules if r not in chosen}
        candidates = [
            r
            for r in left
            if _on_cycle(r, left)
            and not counted.get(r, set()) & owners.get(r, set())
            and not any(c in waits[r] or r in waits[c] for c in chosen)
        ]
        if not candidates:
            return chosen
        chosen.append(min(candidates, key=lambda r: (len(counted.get(r, ())), rules.index(r))))


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
        self.owns: dict[str, list[Rule]] = {}  # pod key -> the crossed rules it carries
        for rule, keys in self.owners.items():
            for k in keys:
                self.owns.setdefault(k, []).append(rule)
        self.breaks: list[Rule] = []  # the spreads whose counted pods are held while their own are bound

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
        counts = {r: {k for k, counting in pacer.counted.items() if r in counting} for r in rules}
        pacer.breaks = breaks(rules, pacer._owner_sets, counts)
        return pacer if pacer.counted else None

    def tally(
        self,
        *,
        bound: Callable[[Rule], Mapping[str, int]],
        waiting: Callable[[str], bool],
        told: Iterable[str],
    ) -> Tally:
        """The counts the turns are judged on: per crossed spread and zone, the pods it counts that are
        ``bound`` (per zone), and ``told`` and still ``waiting``; which of those are sure to come; its
        own pods still waiting; and the holds in force."""
        out = Tally()
        for rule in self.rules:
            counts = bound(rule)
            out.ahead[rule] = Counter(counts)
            out.sure[rule] = Counter(counts)
            out.zones[rule] = self._zones.get(rule, set()) | {z for z, c in counts.items() if c}
            out.owners[rule] = Counter(self.zone_of[o] for o in self.owners[rule] if o in self.zone_of and waiting(o))
        told_waiting = [k for k in told if k in self.counted and waiting(k)]
        for key in told_waiting:
            zone = self.zone_of.get(key)
            if zone is not None:
                for rule in self.counted[key]:
                    out.ahead[rule][zone] += 1
        for rule in self.breaks:
            # held while its own pods wait, if the counts it freezes (bound, and told before) let
            # them bind in every zone they wait in
            low = min((out.sure[rule][z] for z in out.zones[rule]), default=0)
            waits_in = [z for z, n in out.owners[rule].items() if n > 0]
            if waits_in and all(out.ahead[rule][z] <= low + rule.max_skew for z in waits_in):
                out.holding.add(rule)
        if out.holding:
            # a spread whose own pods a hold keeps from being told binds none of them meanwhile: the
            # pods it counts need no pace until they are (else they wait, zone by zone, for the
            # NodeClaims of the zone planned last)
            for rule in self.rules:
                if rule not in out.holding:
                    out.owners[rule] = Counter(
                        self.zone_of[o]
                        for o in self.owners[rule]
                        if o in self.zone_of and waiting(o) and not self._held(out, o)
                    )
        for key in told_waiting:
            self._count_sure(out, key)
        return out

    def _held(self, tally: Tally, key: str) -> bool:
        """Whether a hold keeps pod ``key`` from being told: a spread holding counts it, and it is
        not that spread's own."""
        return any(r in tally.holding and key not in self._owner_sets[r] for r in self.counted.get(key, ()))

    def sure(self, tally: Tally, key: str) -> bool:
        """Whether pod ``key``, told, is sure to come: it carries no crossed spread, or only ones whose
        counts a hold keeps where they are."""
        return all(rule in tally.holding for rule in self.owns.get(key, ()))

    def _count_sure(self, tally: Tally, key: str) -> None:
        zone = self.zone_of.get(key)
        if zone is None or not self.sure(tally, key):
            return
        for rule in self.counted.get(key, ()):
            tally.sure[rule][zone] += 1

    def let(self, tally: Tally, key: str) -> None:
        """Count pod ``key`` as told in ``tally``."""
        zone = self.zone_of.get(key)
        if zone is None:
            return
        for rule in self.counted.get(key, ()):
            tally.ahead[rule][zone] += 1
        self._count_sure(tally, key)

    def turn(self, tally: Tally, key: str) -> bool:
        """Whether pod ``key`` (not told yet) may be told now: for every crossed spread counting it
        whose own pods still wait in its zone, the pods counted there, bound and told, and this one
        stay within ``maxSkew`` of the zone with the fewest sure to come (bound, or told and carrying
        no crossed spread, or only held ones: nothing keeps such a pod from binding); and no spread
        counting it holds its counted pods."""
        rules = self.counted.get(key)
        zone = self.zone_of.get(key)
        if not rules or zone is None:
            return True
        if self._held(tally, key):
            return False  # held until the spread's own pods are bound
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
    sure to come (``sure``), the zones its minimum is taken over, its own pods still waiting and not
    held (``owners``); and the spreads whose counted pods are held (``holding``)."""

    ahead: dict[Rule, Counter[str]] = field(default_factory=dict)
    sure: dict[Rule, Counter[str]] = field(default_factory=dict)
    zones: dict[Rule, set[str]] = field(default_factory=dict)
    owners: dict[Rule, Counter[str]] = field(default_factory=dict)
    holding: set[Rule] = field(default_factory=set)
