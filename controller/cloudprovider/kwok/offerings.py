"""Which offering the kwok provider launches for a NodeClaim. Pure: no I/O, no clock.

The NodeClaim's requirements name the candidate instance types (``node.kubernetes.io/instance-type
In [...]``, cheapest first as the solver wrote them) and may narrow zones and capacity types. Of
the compatible offerings, the cheapest one that is available is chosen: offered by the catalog,
not in the unavailable-offerings cache, not failed by the NodeClass's injected insufficient capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.v1.labels import (
    ANNOTATION_PLANNED_ZONE,
    KARPENTER_LABEL_ALIASES,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_ZONE,
    normalize_label_key,
)
from controller.cloudprovider.kwok.nodeclass import Failures
from controller.cloudprovider.types import OfferingId
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.instancetypes import Offering as CatalogOffering
from controller.scheduling.quantity import QuantityError
from controller.scheduling.requirements import RequirementError, Requirements
from controller.scheduling.resources import Resources

Obj = dict[str, Any]
DEFAULT_ARCH = "amd64"
DEFAULT_OS = "linux"


@dataclass(frozen=True, slots=True)
class Candidate:
    instance_type: InstanceType
    offering: CatalogOffering
    rank: int  # position of the instance type in the NodeClaim's list (tie-break after price)

    @property
    def key(self) -> OfferingId:
        return OfferingId(
            instance_type=self.instance_type.name,
            zone=self.offering.zone,
            capacity_type=self.offering.capacity_type,
        )


@dataclass(frozen=True, slots=True)
class Choice:
    """The chosen candidate, or None with every compatible offering that had no capacity."""

    chosen: Candidate | None
    exhausted: tuple[OfferingId, ...]
    reasons: tuple[str, ...] = ()
    # the offerings that answered "no capacity" on this call (not those skipped as already unavailable
    # or not offered): like CreateFleet's errors beside a launched instance, they are marked unavailable
    refused: tuple[OfferingId, ...] = ()


def _expressions(nodeclaim: Obj) -> list[Obj]:
    return [raw for raw in (nodeclaim.get("spec") or {}).get("requirements") or [] if raw.get("key")]


def requirements_of(nodeclaim: Obj) -> Requirements:
    """The NodeClaim's requirements, Karpenter label keys read as joiner's.

    Raises :class:`RequirementError` for a malformed one (which the CRD does not admit).
    """
    return Requirements.from_expressions(_expressions(nodeclaim), aliases=KARPENTER_LABEL_ALIASES)


def candidate_order(nodeclaim: Obj) -> list[str] | None:
    """The instance types the NodeClaim names (its first ``In`` on the instance type), in its order."""
    for raw in _expressions(nodeclaim):
        if normalize_label_key(str(raw["key"])) == LABEL_INSTANCE_TYPE and raw.get("operator") == "In":
            return [str(v) for v in raw.get("values") or ()]
    return None


def offering_labels(instance_type: InstanceType, offering: CatalogOffering) -> dict[str, str]:
    """The labels a Node of this offering carries, from the catalog plus the well-known ones."""
    labels = {LABEL_ARCH: DEFAULT_ARCH, LABEL_OS: DEFAULT_OS}
    labels.update(instance_type.labels)
    labels[LABEL_INSTANCE_TYPE] = instance_type.name
    labels[LABEL_ZONE] = offering.zone
    labels[LABEL_CAPACITY_TYPE] = offering.capacity_type
    return labels


def requests_of(nodeclaim: Obj) -> Resources:
    requests = ((nodeclaim.get("spec") or {}).get("resources") or {}).get("requests") or {}
    try:
        return Resources.parse(requests)
    except QuantityError:
        return Resources()


def planned_zone(nodeclaim: Obj) -> str | None:
    """The zone the plan gave the NodeClaim among equally good ones (``joiner.sh/planned-zone``):
    the solver spreads ties over the zones, so a provider that launches the cheapest offering should
    take this zone when it is as cheap as any, or every tie lands in the first zone by name."""
    value = ((nodeclaim.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLANNED_ZONE)
    return str(value) if value else None


def launch_order(
    candidates: Iterable[Candidate], *, nodeclaim: Obj, tiers: Mapping[str, int] | None = None
) -> list[Candidate]:
    """The order a cloud provider tries candidates in: by capacity type's tier when ``tiers`` is
    given (unlisted types last), then price, then the NodeClaim's own candidate order, then the
    planned zone before the others. Stable: what ties on all of these keeps its catalog order."""
    zone = planned_zone(nodeclaim)
    ranks = tiers or {}
    return sorted(
        candidates,
        key=lambda c: (
            ranks.get(c.offering.capacity_type, len(ranks)) if tiers is not None else 0,
            c.offering.price,
            c.rank,
            zone is not None and c.offering.zone != zone,
        ),
    )


def compatible(*, nodeclaim: Obj, catalog: Sequence[InstanceType]) -> list[Candidate]:
    """Every catalog offering the NodeClaim's requirements and requests admit, in candidate order.

    Requirements on keys the catalog does not describe (a team label, say) are the NodeClaim's own
    labels, not properties of the machine, and do not filter offerings.
    """
    try:
        reqs = requirements_of(nodeclaim)
    except RequirementError:
        return []
    known_keys = {LABEL_INSTANCE_TYPE, LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_ARCH, LABEL_OS}
    for it in catalog:
        known_keys.update(it.labels)
    reqs = reqs.only(known_keys)
    requests = requests_of(nodeclaim)

    by_name = {it.name: it for it in catalog}
    named = candidate_order(nodeclaim)
    order = [it.name for it in catalog] if named is None else [n for n in named if n in by_name]

    out: list[Candidate] = []
    for rank, name in enumerate(dict.fromkeys(order)):
        it = by_name[name]
        if not requests.fits_in(it.allocatable):
            continue
        for offering in it.offerings:
            if reqs.matches(offering_labels(it, offering)):
                out.append(Candidate(instance_type=it, offering=offering, rank=rank))
    return out


def choose(
    *,
    candidates: Iterable[Candidate],
    unavailable: frozenset[OfferingId],
    failures: Failures,
    period: int = 0,
    planned_zone: str | None = None,
) -> Choice:
    """The cheapest available candidate (ties: the NodeClaim's order, then the zone its plan chose,
    then zone, then capacity type); ``period`` is the launch's ``capacity_period``, for the
    ``insufficientCapacityRate`` draws."""
    ordered = sorted(
        candidates,
        key=lambda c: (
            Decimal(str(c.offering.price)),
            c.rank,
            c.offering.zone != planned_zone,
            c.offering.zone,
            c.offering.capacity_type,
        ),
    )
    exhausted: list[OfferingId] = []
    reasons: list[str] = []
    refused: list[OfferingId] = []
    for cand in ordered:
        key = cand.key
        if not cand.offering.available:
            why = "not offered by the catalog"
        elif key in unavailable:
            why = "recently out of capacity"
        elif failures.insufficient(key):
            why = "insufficient capacity (injected by the KWOKNodeClass)"
            refused.append(key)
        elif failures.unlucky(key, period):
            why = "insufficient capacity (injected at the KWOKNodeClass's insufficientCapacityRate)"
            refused.append(key)
        else:
            return Choice(chosen=cand, exhausted=tuple(exhausted), reasons=tuple(reasons), refused=tuple(refused))
        exhausted.append(key)
        reasons.append(f"{key.instance_type}/{key.zone}/{key.capacity_type}: {why}")
    return Choice(chosen=None, exhausted=tuple(exhausted), reasons=tuple(reasons), refused=tuple(refused))
