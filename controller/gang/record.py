"""The gang's durable record: a small JSON document joiner keeps in the annotation
``joiner.sh/gang-state`` of every member pod. Pure: no I/O.

It is the only state a restarted controller needs (with the NodeClaims labelled with the gang):

* ``phase``: ``Provisioning`` (NodeClaims of attempt ``id`` are coming up), ``RolledBack``
  (attempt ``id`` failed; retry at ``retryAt``) or ``Admitted`` (gates removed).
* ``nodeClaims``: the NodeClaims the attempt waits for (after admission: the gang's nodes);
  ``members``: how many gated pods it was planned for (later extra members wait for a top-up).
* ``deadline``: when a ``Provisioning`` attempt is rolled back if not every NodeClaim is
  Initialized.
* ``rollbacks``, ``level``, ``retryAt``, ``lastFailure``, ``avoid``: how many attempts were rolled back,
  the backoff level (raised only by failures that cost machine time: timeouts, not "no capacity"),
  what failed and why, and the offerings (``type/zone/capacity-type``) later attempts avoid, each
  with the time it is avoided until (its failure plus the unavailable-offering TTL; at most 32), so
  two broken offerings cannot take turns, yet a one-off failure does not exclude an offering for good.
* ``replans``: how many times NodeClaims of this attempt that the cloud refused for capacity were
  planned again alone, the machines that launched kept (at most ``Knobs.max_replans`` per attempt).
* ``seq``: incremented on every write, so the newest record among the members wins when a write
  reached only some of them before a crash.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from controller.clock import format_time, parse_time
from controller.gang.markers import ANNOTATION_GANG_STATE
from controller.scheduling.model import OfferingKey
from controller.state.views import PodView

Phase = Literal["Provisioning", "RolledBack", "Admitted"]
PROVISIONING: Final = "Provisioning"
ROLLED_BACK: Final = "RolledBack"
ADMITTED: Final = "Admitted"
_PHASES: Final = (PROVISIONING, ROLLED_BACK, ADMITTED)


@dataclass(frozen=True, slots=True)
class Avoided:
    """An offering (``type/zone/capacity-type``) a gang's attempts avoid until ``until``."""

    offering: str
    until: datetime | None = None  # None: an entry without expiry (an older joiner wrote it): expired
    attempt: int = 0  # the attempt that failed on it (0: unknown)

    def active(self, now: datetime) -> bool:
        return self.until is not None and now < self.until

    def active_for(self, now: datetime, *, last_attempt: int) -> bool:
        """Avoided by the retry after ``last_attempt``: within its TTL, or failed by that very attempt
        (however long the rollback and the backoff took, the next attempt never repeats it)."""
        return self.active(now) or (self.attempt > 0 and self.attempt == last_attempt)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"offering": self.offering}
        if self.until is not None:
            out["until"] = format_time(self.until)
        if self.attempt:
            out["attempt"] = self.attempt
        return out

    @staticmethod
    def from_json(value: Any) -> Avoided:
        if isinstance(value, str):
            return Avoided(value)
        if not isinstance(value, dict):
            raise ValueError(f"an avoided offering must be a string or an object, not {type(value).__name__}")
        return Avoided(str(value["offering"]), parse_time(value.get("until")), int(value.get("attempt") or 0))


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    attempt: int
    id: str
    phase: Phase
    nodeclaims: tuple[str, ...] = ()
    started: datetime | None = None
    deadline: datetime | None = None
    rollbacks: int = 0
    retry_at: datetime | None = None
    last_failure: str = ""
    avoid: tuple[Avoided, ...] = field(default_factory=tuple)
    admitted_at: datetime | None = None
    members: int = 0  # how many gated members the attempt was planned for (0: unknown)
    level: int = 0  # the backoff level: rollbacks that cost machine time (timeouts), not capacity refusals
    replans: int = 0  # refused NodeClaims of this attempt planned again alone (the launched ones kept)

    def avoiding(self, now: datetime) -> tuple[str, ...]:
        """The offerings still avoided at ``now``."""
        return tuple(a.offering for a in self.avoid if a.active(now))

    def next(self, **changes: Any) -> Record:
        """A copy with ``changes`` and the next ``seq``."""
        return replace(self, seq=self.seq + 1, **changes)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "seq": self.seq,
            "attempt": self.attempt,
            "id": self.id,
            "phase": self.phase,
            "nodeClaims": list(self.nodeclaims),
            "rollbacks": self.rollbacks,
        }
        if self.members:
            data["members"] = self.members
        data["level"] = self.level
        if self.replans:
            data["replans"] = self.replans
        for key, value in (
            ("started", self.started),
            ("deadline", self.deadline),
            ("retryAt", self.retry_at),
            ("admittedAt", self.admitted_at),
        ):
            if value is not None:
                data[key] = format_time(value)
        if self.last_failure:
            data["lastFailure"] = self.last_failure
        if self.avoid:
            data["avoid"] = [a.to_json() for a in self.avoid]
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Record | None:
        """The record, or None when the text is not one (a user edited it, another version wrote it)."""
        try:
            data = json.loads(text)
            phase = data["phase"]
            if phase not in _PHASES:
                return None
            return Record(
                seq=int(data["seq"]),
                attempt=int(data.get("attempt", 0)),
                id=str(data.get("id", "")),
                phase=phase,
                nodeclaims=tuple(str(n) for n in data.get("nodeClaims") or ()),
                started=parse_time(data.get("started")),
                deadline=parse_time(data.get("deadline")),
                rollbacks=int(data.get("rollbacks", 0)),
                retry_at=parse_time(data.get("retryAt")),
                last_failure=str(data.get("lastFailure") or ""),
                avoid=tuple(Avoided.from_json(a) for a in data.get("avoid") or ()),
                admitted_at=parse_time(data.get("admittedAt")),
                members=int(data.get("members", 0)),
                # a record from before the level existed: every rollback raised the backoff
                level=int(data.get("level", data.get("rollbacks", 0))),
                replans=int(data.get("replans", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def backoff_seconds(level: int, *, base: float, maximum: float) -> float:
    """Exponential backoff at backoff level n: base, 2*base, 4*base, ... at most ``maximum`` (level 0: base)."""
    return float(min(maximum, base * 2.0 ** min(max(level, 1) - 1, 62)))


def record_of(pod: PodView) -> Record | None:
    text = pod.annotations.get(ANNOTATION_GANG_STATE)
    return Record.from_json(str(text)) if text else None


def newest(records: Iterable[Record | None]) -> Record | None:
    """The record with the highest ``seq`` (the last one joiner wrote)."""
    best: Record | None = None
    for rec in records:
        if rec is not None and (best is None or rec.seq > best.seq):
            best = rec
    return best


# --- what a gang's attempts avoid ----------------------------------------------------------------

MAX_AVOIDED: Final = 32


# how long a gang avoids an offering whose machine launched but never registered, never became
# Initialized or was deleted under it (not a mere refusal of capacity)
BROKEN_OFFERING_AVOID_SECONDS: Final = 6 * 3600.0


def refreshed(avoid: Iterable[Avoided], *, now: datetime, last_attempt: int, ttl_seconds: float) -> list[Avoided]:
    """The entries the attempt after ``last_attempt`` avoids: those within their TTL, and those that
    attempt failed on even when the rollback and the backoff outlasted their TTL (then for a new TTL
    from now, so the launch avoids them too)."""
    until = now + timedelta(seconds=ttl_seconds)
    out = []
    for a in avoid:
        if not a.active_for(now, last_attempt=last_attempt):
            continue
        if not a.active(now):
            a = Avoided(a.offering, until, a.attempt)
        out.append(a)
    return out


def accumulate(
    before: Iterable[Avoided], failed: Iterable[str], *, now: datetime, ttl_seconds: float, attempt: int = 0
) -> tuple[Avoided, ...]:
    """The offerings a gang avoids: every one an attempt failed on within the unavailable-offering TTL
    (so two broken offerings cannot take turns, and a one-off failure does not exclude an offering
    for good), each until its last failure plus the TTL; the newest first when there are too many."""
    until = now + timedelta(seconds=ttl_seconds)
    fresh = {o: Avoided(o, until, attempt) for o in failed}
    kept = [a for a in before if a.active(now) and a.offering not in fresh]
    merged = sorted([*fresh.values(), *kept], key=lambda a: a.until or now, reverse=True)[:MAX_AVOIDED]
    return tuple(sorted(merged, key=lambda a: a.offering))


def offering_keys(values: Iterable[str]) -> frozenset[OfferingKey]:
    out: set[OfferingKey] = set()
    for value in values:
        parts = value.split("/")
        if len(parts) == 3:
            out.add((parts[0], parts[1], parts[2]))
    return frozenset(out)


# --- the record's transitions: every record joiner writes is built here ---------------------------


def next_attempt(pending: Record | None, admitted: Record | None) -> int:
    """The number of the gang's next attempt: one more than any attempt recorded."""
    return max((r.attempt for r in (pending, admitted) if r is not None), default=0) + 1


def started(
    pending: Record | None,
    *,
    seq: int,
    attempt: int,
    id: str,
    nodeclaims: tuple[str, ...],
    now: datetime,
    timeout_seconds: float,
    ttl_seconds: float,
    members: int,
) -> Record:
    """Attempt ``attempt`` starts: its NodeClaims, its deadline, and what the rolled back attempts
    carry over (rollbacks, backoff level, last failure, and the offerings still avoided)."""
    return Record(
        seq=seq,
        attempt=attempt,
        id=id,
        phase=PROVISIONING,
        nodeclaims=nodeclaims,
        started=now,
        deadline=now + timedelta(seconds=timeout_seconds),
        rollbacks=pending.rollbacks if pending is not None else 0,
        last_failure=pending.last_failure if pending is not None else "",
        # what earlier attempts failed on stays avoided for the unavailable-offering TTL
        avoid=tuple(refreshed(pending.avoid, now=now, last_attempt=pending.attempt, ttl_seconds=ttl_seconds))
        if pending is not None
        else (),
        level=pending.level if pending is not None else 0,
        members=members,
    )


def rolled_back(
    pending: Record,
    *,
    seq: int,
    now: datetime,
    message: str,
    failed_offerings: Iterable[str],
    backoff: bool,
    capacity_only: bool,
    backoff_base_seconds: float,
    backoff_max_seconds: float,
    ttl_seconds: float,
) -> tuple[Record, float]:
    """The attempt failed: the record saying so, and the seconds until the retry.

    A refusal of capacity cost no machine time, and every decider (the next attempt included) skips
    the refused offerings for the unavailable-offering TTL: the retry goes elsewhere at once, and
    waits for capacity when nothing else fits. Timeouts and deleted machines raise the backoff level
    and wait. A refusal blinks; a machine that launched and never registered or got ready is a
    broken offering, avoided much longer (else slow failures alternate forever)."""
    rollbacks = pending.rollbacks + (1 if backoff else 0)
    raises = backoff and not capacity_only
    level = pending.level + (1 if raises else 0)
    delay = backoff_seconds(level, base=backoff_base_seconds, maximum=backoff_max_seconds) if raises else 0.0
    record = Record(
        seq=seq,
        attempt=pending.attempt,
        id=pending.id,
        phase=ROLLED_BACK,
        nodeclaims=pending.nodeclaims,
        started=pending.started,
        deadline=pending.deadline,
        rollbacks=rollbacks,
        retry_at=now + timedelta(seconds=delay),
        last_failure=message,
        avoid=accumulate(
            pending.avoid,
            failed_offerings,
            now=now,
            ttl_seconds=ttl_seconds if capacity_only else max(ttl_seconds, BROKEN_OFFERING_AVOID_SECONDS),
            attempt=pending.attempt,
        ),
        level=level,
    )
    return record, delay


def replanned(
    pending: Record, *, seq: int, nodeclaims: tuple[str, ...], last_failure: str, avoid: tuple[Avoided, ...]
) -> Record:
    """NodeClaims the cloud refused were bought again alone: the same attempt, its new NodeClaims."""
    return replace(
        pending,
        seq=seq,
        nodeclaims=nodeclaims,
        last_failure=last_failure,
        avoid=avoid,
        replans=pending.replans + 1,
    )


def admitted_record(
    pending: Record, admitted: Record | None, *, seq: int, now: datetime, live: Container[str]
) -> Record:
    """The gates go: the attempt's NodeClaims, plus those of a running gang it tops up (while they exist)."""
    union = list(pending.nodeclaims)
    if admitted is not None:
        union += [n for n in admitted.nodeclaims if n not in union and n in live]
    return Record(
        seq=seq,
        attempt=pending.attempt,
        id=pending.id,
        phase=ADMITTED,
        nodeclaims=tuple(union),
        started=pending.started,
        rollbacks=pending.rollbacks,
        last_failure=pending.last_failure,
        admitted_at=now,
        replans=pending.replans,
    )


def without(admitted: Record, lost: Container[str], *, seq: int) -> Record:
    """A running gang goes on without the NodeClaims it lost (replace-member)."""
    return replace(admitted, seq=seq, nodeclaims=tuple(n for n in admitted.nodeclaims if n not in lost))
