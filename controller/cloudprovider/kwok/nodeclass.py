"""A KWOKNodeClass as the kwok provider reads it: the registration delay and the injected failures.

Failure injection (``spec.failures``), for tests and demos:

* ``insufficientCapacity``: offerings that answer "no capacity". Each entry is an instance type
  name, or a mapping with any of ``instanceType``/``instanceTypes``, ``zone``/``zones``,
  ``capacityType``/``capacityTypes`` (a missing field matches everything).
* ``neverRegister``: instance types whose Node is never created (registration times out).
* ``neverReady``: instance types whose Node lacks the kwok annotation, so it never becomes Ready.
* ``hideGPUs``: instance types whose Node never shows ``nvidia.com/gpu`` in allocatable.
* Rates (0..1), drawn deterministically from ``seed``: ``insufficientCapacityRate`` per offering
  and minute (an offering out of capacity refuses every NodeClaim launched in that minute, as a
  cloud's capacity pool stays dry for a while: a gang's members in one offering are all refused or
  all launched), ``throttleRate`` per launch call, ``neverRegisterRate`` and ``neverReadyRate`` per
  NodeClaim (its uid); ``launchLatency`` (each launch waits up to it).

The three instance-type lists accept names, ``"*"`` for every type, or ``true``.
Pure parsing: no I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from api.v1.types import parse_duration
from controller.cloudprovider.types import OfferingId
from controller.state.views import Obj, condition_of

CAPACITY_PERIOD_SECONDS: Final = 60  # how long an offering drawn out of capacity stays out


def capacity_period(at: datetime) -> int:
    """The period of ``insufficientCapacityRate`` draws that ``at`` falls in."""
    return int(at.timestamp() // CAPACITY_PERIOD_SECONDS)


@dataclass(frozen=True, slots=True)
class OfferingMatcher:
    """Matches offerings; an empty set in a field matches every value."""

    instance_types: frozenset[str] = frozenset()
    zones: frozenset[str] = frozenset()
    capacity_types: frozenset[str] = frozenset()

    def matches(self, offering: OfferingId) -> bool:
        return (
            (not self.instance_types or offering.instance_type in self.instance_types)
            and (not self.zones or offering.zone in self.zones)
            and (not self.capacity_types or offering.capacity_type in self.capacity_types)
        )


@dataclass(frozen=True, slots=True)
class InstanceTypeSet:
    names: frozenset[str] = frozenset()
    everything: bool = False

    def __contains__(self, name: object) -> bool:
        return self.everything or name in self.names


@dataclass(frozen=True, slots=True)
class Failures:
    insufficient_capacity: tuple[OfferingMatcher, ...] = ()
    never_register: InstanceTypeSet = InstanceTypeSet()
    never_ready: InstanceTypeSet = InstanceTypeSet()
    hide_gpus: InstanceTypeSet = InstanceTypeSet()
    insufficient_capacity_rate: float = 0.0
    throttle_rate: float = 0.0
    launch_latency_seconds: float = 0.0
    never_register_rate: float = 0.0
    never_ready_rate: float = 0.0
    seed: int = 0

    def insufficient(self, offering: OfferingId) -> bool:
        return any(m.matches(offering) for m in self.insufficient_capacity)

    def draw(self, *parts: object) -> float:
        """A number in [0, 1) fixed by the seed and ``parts`` (a NodeClaim uid, what is drawn, ...)."""
        text = "/".join(str(p) for p in (self.seed, *parts))
        return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / float(16**12)

    def unlucky(self, offering: OfferingId, period: int) -> bool:
        """This offering has no capacity in this period (``insufficientCapacityRate``): every launch
        in it is refused until the next period draws again (see ``capacity_period``)."""
        key = (offering.instance_type, offering.zone, offering.capacity_type)
        return self.insufficient_capacity_rate > 0 and self.draw("ice", *key, period) < self.insufficient_capacity_rate

    def throttled(self, uid: str, attempt: int) -> bool:
        return self.throttle_rate > 0 and self.draw(uid, "throttle", attempt) < self.throttle_rate

    def latency(self, uid: str) -> float:
        return self.launch_latency_seconds * self.draw(uid, "latency") if self.launch_latency_seconds > 0 else 0.0

    def withheld(self, uid: str) -> bool:
        return self.never_register_rate > 0 and self.draw(uid, "register") < self.never_register_rate

    def stuck(self, uid: str) -> bool:
        return self.never_ready_rate > 0 and self.draw(uid, "ready") < self.never_ready_rate


@dataclass(frozen=True, slots=True)
class KWOKNodeClassSpec:
    name: str
    registration_delay_seconds: float = 0.0
    image_id: str = "kwok-default"
    failures: Failures = Failures()
    catalog_ref: str | None = None  # "namespace/name" of a ConfigMap with the catalog; None: built-in
    ready: bool = True
    not_ready_message: str = ""


def _names(value: Any, *, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list):
        return frozenset(str(v) for v in value)
    raise ValueError(f"{where}: expected a name or a list of names")


def _instance_type_set(value: Any, *, where: str) -> InstanceTypeSet:
    if value is None or value is False:
        return InstanceTypeSet()
    if value is True:
        return InstanceTypeSet(everything=True)
    names = _names(value, where=where)
    return InstanceTypeSet(names=names - {"*"}, everything="*" in names)


def _matcher(entry: Any, *, where: str) -> OfferingMatcher:
    if isinstance(entry, str):
        return OfferingMatcher(instance_types=frozenset() if entry == "*" else frozenset({entry}))
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected an instance type name or a mapping")

    def pick(one: str, many: str) -> frozenset[str]:
        return _names(entry.get(one), where=f"{where}.{one}") | _names(entry.get(many), where=f"{where}.{many}")

    return OfferingMatcher(
        instance_types=pick("instanceType", "instanceTypes"),
        zones=pick("zone", "zones"),
        capacity_types=pick("capacityType", "capacityTypes"),
    )


def _delay_seconds(value: Any, *, where: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return max(0.0, float(value))
    if isinstance(value, str):
        try:
            parsed = parse_duration(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        return 0.0 if parsed is None else parsed.total_seconds()
    raise ValueError(f"{where}: expected a duration such as 10s")


def _rate(value: Any, *, where: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{where}: expected a share between 0 and 1, got {value!r}")
    return float(value)


def parse_nodeclass(obj: Obj) -> KWOKNodeClassSpec:
    """Read a KWOKNodeClass object; ValueError (naming the field) when the spec is malformed."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    raw = spec.get("failures") or {}
    if not isinstance(raw, Mapping):
        raise ValueError("spec.failures: expected a mapping")
    ice = raw.get("insufficientCapacity") or []
    if not isinstance(ice, list):
        ice = [ice]
    failures = Failures(
        insufficient_capacity=tuple(
            _matcher(e, where=f"spec.failures.insufficientCapacity[{i}]") for i, e in enumerate(ice)
        ),
        never_register=_instance_type_set(raw.get("neverRegister"), where="spec.failures.neverRegister"),
        never_ready=_instance_type_set(raw.get("neverReady"), where="spec.failures.neverReady"),
        hide_gpus=_instance_type_set(raw.get("hideGPUs"), where="spec.failures.hideGPUs"),
        insufficient_capacity_rate=_rate(
            raw.get("insufficientCapacityRate"), where="spec.failures.insufficientCapacityRate"
        ),
        throttle_rate=_rate(raw.get("throttleRate"), where="spec.failures.throttleRate"),
        launch_latency_seconds=_delay_seconds(raw.get("launchLatency"), where="spec.failures.launchLatency"),
        never_register_rate=_rate(raw.get("neverRegisterRate"), where="spec.failures.neverRegisterRate"),
        never_ready_rate=_rate(raw.get("neverReadyRate"), where="spec.failures.neverReadyRate"),
        seed=int(raw.get("seed") or 0),
    )
    cond = condition_of(obj, "Ready")
    ready = cond is None or cond.status != "False"
    message = "" if cond is None or ready else cond.message or cond.reason
    return KWOKNodeClassSpec(
        name=name,
        registration_delay_seconds=_delay_seconds(spec.get("registrationDelay"), where="spec.registrationDelay"),
        image_id=str(spec.get("imageID") or spec.get("image") or "kwok-default"),
        failures=failures,
        catalog_ref=str(spec["catalog"]) if spec.get("catalog") else None,
        ready=ready,
        not_ready_message=message,
    )
