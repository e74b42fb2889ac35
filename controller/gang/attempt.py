"""What one step of a gang writes, worked out from what the controller read. Pure: no I/O, no clock.

``decide.py`` says which step comes next; for the steps that write a record or buy machines this
module works out everything they write, from the gang's view and the :class:`GangInputs` the
controller read under the writer's lock:

* plan an attempt: the members in one solve (``planner.py``), the zone of a running gang it tops
  up, the NodePools' budgets and node limits (:class:`Solved`, or why not:
  :class:`~controller.gang.planner.NoFit`); then the attempt's record and NodeClaims
  (:class:`Provision`), started once the solve is done;
* roll back: the backoff level and delay, which offerings are avoided and for how long, which
  NodeClaims go (:class:`RollBackAttempt`);
* re-plan what the cloud refused: the refused members bought again beside the machines that
  launched, in their zone (:class:`Rebuy`), or the rollback and why they cannot be
  (:class:`CannotRebuy`);
* admit (:class:`Release`), and a member lost (:class:`RestartGang`, :class:`ReplaceMember`).

The records themselves are built by ``record.py``; the controller applies each step as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from api.v1.labels import ANNOTATION_GANG_CLAIMS, LABEL_GANG
from controller.clock import format_seconds
from controller.gang import claims as cl
from controller.gang.decide import (
    RECHECK_SECONDS,
    GangView,
    Knobs,
    MemberLost,
    Replan,
    Rollback,
    WaitForMembers,
    completed_at,
)
from controller.gang.markers import ANNOTATION_GANG_OFFERING, POLICY_RESTART_GANG, gang_options
from controller.gang.patches import attempt_id, claim_name, gang_claim_manifest
from controller.gang.planner import (
    GangPlan,
    Narrow,
    NoFit,
    PlanRequest,
    convert_pods,
    describe_plan,
    plan_gang,
    pool_gang_defaults,
    refused_by_bounds,
)
from controller.gang.record import (
    ROLLED_BACK,
    Avoided,
    Record,
    accumulate,
    admitted_record,
    next_attempt,
    offering_keys,
    refreshed,
    replanned,
    rolled_back,
    started,
    without,
)
from controller.scheduling.bounds import PoolBounds
from controller.scheduling.model import ExistingNode, NewNodeClaim, NodePoolTemplate, OfferingKey, Pod
from controller.state.views import Obj, PodView

Planned = tuple[NewNodeClaim, Obj]  # a machine of the plan and the NodeClaim manifest that records it


@dataclass(frozen=True, slots=True)
class GangInputs:
    """What the cluster offers a gang's plan, read under the writer's lock."""

    pools: Mapping[str, Obj]  # the valid NodePools by name, as written (manifests, spec.gang)
    templates: tuple[NodePoolTemplate, ...]  # the same as the solver sees them, usage counted
    existing: tuple[ExistingNode, ...] = ()  # the machines the members may use (see each step)
    daemons: tuple[Pod, ...] = ()
    unavailable: frozenset[OfferingKey] = frozenset()  # offerings every decider skips now
    bounds: Mapping[str, PoolBounds] = field(default_factory=dict)  # budgets and limits.nodes
    claim_of_node: Mapping[str, str] = field(default_factory=dict)  # a machine's name -> its NodeClaim
    volumes: Narrow | None = None  # a member narrowed to the nodes its volumes allow


# --- the steps ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Solved:
    """Every member placed in one solve, within the NodePools' budgets: an attempt can start."""

    result: GangPlan
    mark: tuple[Avoided, ...]  # offerings the launch skips too, as the plan did (for as long as the plan)
    timeout_seconds: float | None  # the pods' joiner.sh/gang-timeout, if they set one


@dataclass(frozen=True, slots=True)
class Provision:
    """Start an attempt: the record and the pin on every gated member, and its NodeClaims, at once."""

    key: str
    record: Record
    claims: tuple[Planned, ...]
    result: GangPlan
    reused: tuple[str, ...]  # NodeClaims of the running gang the plan puts members on (a top-up)
    timeout_seconds: float
    mark: tuple[Avoided, ...]  # offerings the launch skips too, as the plan did (for as long as the plan)

    @property
    def members(self) -> int:
        return self.record.members

    def text(self) -> str:
        return (
            f"attempt {self.record.attempt}: buying {describe_plan(self.result.plan)} for the {self.members} members "
            f"of gang {self.key}; the pods stay gated until every node is Initialized "
            f"(deadline {format_seconds(self.timeout_seconds)})"
        )


@dataclass(frozen=True, slots=True)
class RollBackAttempt:
    """End the attempt: the record on the members first, then every NodeClaim of it deleted."""

    key: str
    rollback: Rollback
    record: Record
    delay: float  # seconds until the retry (0: at once)
    doomed: tuple[str, ...]  # the attempt's NodeClaims (not those a running part of the gang uses)
    mark: tuple[Avoided, ...]  # the offerings it failed on: every decider (and the launch) skips them

    @property
    def message(self) -> str:
        """Why each NodeClaim is deleted (its Event and termination reason)."""
        return f"gang {self.key}: {self.rollback.message}"

    def text(self, deleted: int) -> str:
        retry = f"retrying in {format_seconds(self.delay)}" if self.delay else "retrying now"
        if self.rollback.avoid:
            retry += " avoiding " + ", ".join(self.rollback.avoid)
        return (
            f"{self.rollback.message}. Deleted {deleted} NodeClaim(s) of the attempt; no member was started, "
            f"all stay gated; {retry}"
        )


@dataclass(frozen=True, slots=True)
class Rebuy:
    """Buy again only the NodeClaims the cloud refused, beside the attempt's machines that launched."""

    replan: Replan
    record: Record
    claims: tuple[Planned, ...]
    result: GangPlan
    recheck: float  # seconds until the attempt's deadline

    def text(self) -> str:
        d = self.replan
        refused = d.rollback.avoid
        return (
            f"attempt {self.record.attempt}: the cloud refused {len(d.rollback.failed)} NodeClaim(s) for capacity "
            f"({', '.join(refused) or ', '.join(d.rollback.failed)}); buying {describe_plan(self.result.plan)} in "
            f"their place and keeping the {len(d.kept)} that launched. The members stay gated until every node "
            "is Initialized"
        )


@dataclass(frozen=True, slots=True)
class CannotRebuy:
    """The refused members fit nowhere beside the launched machines: the attempt is rolled back whole."""

    rollback: Rollback
    why: str | None


@dataclass(frozen=True, slots=True)
class Release:
    """Remove the gate from these members, all at once, writing the admitted record."""

    key: str
    attempt: int  # the attempt admitted
    rollbacks: int  # how many attempts before it were rolled back
    record: Record
    pods: tuple[PodView, ...]
    since_complete: float  # seconds since the gang became complete (its last needed member created)
    since_started: float  # seconds since the attempt started

    def text(self, released: int) -> str:
        return (
            f"all {len(self.record.nodeclaims)} node(s) of gang {self.key} are Initialized; removed the scheduling "
            f"gate from {released} member(s) together (attempt {self.attempt}, "
            f"{format_seconds(self.since_started)} after it started)"
        )


@dataclass(frozen=True, slots=True)
class RestartGang:
    """Policy restart-gang: delete every remaining member (their controller recreates them)."""

    lost: MemberLost
    pods: tuple[PodView, ...]
    remaining: tuple[str, ...]  # the running gang's NodeClaims still there: GangAdmitted=False
    text: str


@dataclass(frozen=True, slots=True)
class ReplaceMember:
    """Policy replace-member: the others keep running, the record forgets the lost NodeClaims."""

    lost: MemberLost
    record: Record
    text: str


# --- the decisions ------------------------------------------------------------------------------


def next_seq(v: GangView) -> int:
    """The seq of the next record written: above every record seen or written."""
    return max([r.seq for r in (v.pending, v.admitted) if r is not None] + [v.written_seq], default=0) + 1


def running_zone(v: GangView) -> str | None:
    """The zone of the running gang's first NodeClaim that says one (where a top-up goes)."""
    if v.admitted is None:
        return None
    return next((z for n in v.admitted.nodeclaims if n in v.claims and (z := cl.zone_of(v.claims[n]))), None)


def running_nodes(v: GangView, existing: Iterable[ExistingNode]) -> tuple[ExistingNode, ...]:
    """The machines the pinned members may use: the running gang's own (a top-up). Every other
    machine still counts for the NodePools' limits, through their usage."""
    allowed = cl.node_names({n: v.claims[n] for n in (v.admitted.nodeclaims if v.admitted else ()) if n in v.claims})
    return tuple(n for n in existing if n.labels.get(LABEL_GANG) == v.gid and n.name in allowed)


def _request(
    v: GangView,
    capacity: GangInputs,
    *,
    pods: Sequence[Pod],
    existing: Sequence[ExistingNode],
    avoid: Iterable[str],
    same_zone: bool | None,
) -> PlanRequest:
    return PlanRequest(
        key=v.key,
        gid=v.gid,
        pods=tuple(pods),
        pools=capacity.templates,
        defaults={name: pool_gang_defaults(pool) for name, pool in capacity.pools.items()},
        existing=tuple(existing),
        daemons=capacity.daemons,
        unavailable=capacity.unavailable,
        avoid=offering_keys(avoid),
        same_zone=same_zone,
    )


def _manifests(
    v: GangView, result: GangPlan, pools: Mapping[str, Obj], *, tag: str, attempt: str
) -> tuple[Planned, ...]:
    planned = tuple(
        (
            node,
            gang_claim_manifest(
                node,
                pools[node.node_pool],
                name=claim_name(node.node_pool, tag, i),
                gid=v.gid,
                key=v.key,
                attempt=attempt,
                same_zone=result.same_zone,
            ),
        )
        for i, node in enumerate(result.plan.new_nodes)
    )
    # every member names the attempt's new NodeClaims of its NodePool (same NodeClass, labels and
    # taints) and their offerings: a provider that can buy them in one all-or-nothing request
    # (gcp: bulkInsert with minCount) does so
    by_pool: dict[str, list[str]] = {}
    for node, manifest in planned:
        meta = manifest["metadata"]
        by_pool.setdefault(node.node_pool, []).append(f"{meta['name']}={meta['annotations'][ANNOTATION_GANG_OFFERING]}")
    for node, manifest in planned:
        manifest["metadata"]["annotations"][ANNOTATION_GANG_CLAIMS] = ",".join(by_pool[node.node_pool])
    return planned


def _names(claims: Iterable[Planned]) -> list[str]:
    return [str(manifest["metadata"]["name"]) for _, manifest in claims]


def plan_attempt(v: GangView, capacity: GangInputs, *, top_up: bool, now: datetime, knobs: Knobs) -> Solved | NoFit:
    """Every gated member in one solve, within the NodePools' budgets; or why it does not fit.

    ``capacity.existing``: every machine of the cluster (only the running gang's may host members)."""
    options = gang_options([*v.gated, *v.released])
    zone = running_zone(v) if top_up and options.same_zone is not False else None
    waits: list[str] = []
    pods, problems = convert_pods(v.gated, v.gid, zone=zone, volumes=capacity.volumes, waiting=waits)
    if problems:
        return NoFit(permanent=True, reason=f"gang {v.key}: " + "; ".join(problems[:3]))
    if waits:  # kube-scheduler would place those members nowhere yet: nothing to buy for the gang
        return NoFit(permanent=False, reason=f"gang {v.key} waits for its members' volumes: " + "; ".join(waits[:3]))
    pending = v.pending
    avoiding = (
        refreshed(pending.avoid, now=now, last_attempt=pending.attempt, ttl_seconds=knobs.unavailable_ttl_seconds)
        if pending is not None and pending.phase == ROLLED_BACK
        else []
    )
    request = _request(
        v,
        capacity,
        pods=pods,
        existing=running_nodes(v, capacity.existing),
        avoid=[a.offering for a in avoiding],
        same_zone=options.same_zone,
    )
    result = plan_gang(request)
    if isinstance(result, NoFit):
        return result
    why = refused_by_bounds(result.plan, capacity.bounds)
    if why is not None:
        return NoFit(permanent=False, reason=f"gang {v.key}: {why}")
    return Solved(
        result=result,
        mark=tuple(avoiding) if result.avoided else (),
        timeout_seconds=options.timeout_seconds,
    )


def provision(v: GangView, solved: Solved, capacity: GangInputs, *, now: datetime, knobs: Knobs) -> Provision:
    """The attempt that buys the plan: its number and id, its NodeClaims, its record (started ``now``)."""
    pending = v.pending
    result = solved.result
    attempt = next_attempt(pending, v.admitted)
    aid = attempt_id(v.gid, attempt, [p.uid or "" for p in v.gated])
    claims = _manifests(v, result, capacity.pools, tag=aid, attempt=aid)
    reused = tuple(
        claim
        for node, placed in result.plan.existing_placements.items()
        if placed and (claim := capacity.claim_of_node.get(node)) is not None
    )
    seconds = solved.timeout_seconds or result.timeout_seconds or knobs.gang_timeout_seconds
    record = started(
        pending,
        seq=next_seq(v),
        attempt=attempt,
        id=aid,
        nodeclaims=tuple(_names(claims) + sorted(set(reused))),
        now=now,
        timeout_seconds=seconds,
        ttl_seconds=knobs.unavailable_ttl_seconds,
        members=len(v.gated),
    )
    return Provision(
        key=v.key,
        record=record,
        claims=claims,
        result=result,
        reused=reused,
        timeout_seconds=seconds,
        mark=solved.mark,
    )


def roll_back(v: GangView, d: Rollback, *, now: datetime, knobs: Knobs) -> RollBackAttempt:
    """The attempt failed: its record, the retry's delay, and every NodeClaim of it to delete."""
    pending = v.pending
    assert pending is not None
    record, delay = rolled_back(
        pending,
        seq=next_seq(v),
        now=now,
        message=d.message,
        failed_offerings=d.avoid,
        backoff=d.backoff,
        capacity_only=d.capacity_only,
        backoff_base_seconds=knobs.backoff_base_seconds,
        backoff_max_seconds=knobs.backoff_max_seconds,
        ttl_seconds=knobs.unavailable_ttl_seconds,
    )
    running = set(v.admitted.nodeclaims) if v.admitted is not None else set()
    doomed = [n for n in pending.nodeclaims if n not in running]
    doomed += [n for n in v.claims if cl.attempt_of(v.claims[n]) == pending.id and n not in doomed]
    return RollBackAttempt(
        key=v.key,
        rollback=d,
        record=record,
        delay=delay,
        doomed=tuple(doomed),
        mark=tuple(a for a in record.avoid if a.offering in d.avoid),
    )


def refused_avoid(v: GangView, d: Replan, *, now: datetime, knobs: Knobs) -> tuple[Avoided, ...]:
    """What a re-plan avoids: what the attempt avoided, and what the cloud just refused (for the TTL)."""
    pending = v.pending
    assert pending is not None
    return accumulate(
        pending.avoid, d.rollback.avoid, now=now, ttl_seconds=knobs.unavailable_ttl_seconds, attempt=pending.attempt
    )


def replan_zone(v: GangView, kept: Iterable[str]) -> str | None:
    """The one zone the kept NodeClaims are pinned to (None: no single one)."""
    zones = {cl.pinned_zone(v.claims[n]) for n in kept}
    return next(iter(zones)) if len(zones) == 1 else None


def rebuy(
    v: GangView,
    d: Replan,
    capacity: GangInputs,
    *,
    avoid: tuple[Avoided, ...],
    now: datetime,
    unreadable: str | None = None,
) -> Rebuy | CannotRebuy:
    """The gated members in one solve beside the kept machines (``capacity.existing``), in their
    zone, avoiding ``avoid`` (:func:`refused_avoid`); buying only what is missing, or the rollback.

    ``unreadable``: the kept machines could not be read as the solver sees them."""
    pending = v.pending
    assert pending is not None
    zone = replan_zone(v, d.kept)
    why = unreadable
    result: GangPlan | NoFit | None = None
    if why is None:
        try:
            pods, problems = convert_pods(v.gated, v.gid, zone=zone, volumes=capacity.volumes)
            if problems:
                why = "; ".join(problems[:3])
            else:
                request = _request(
                    v,
                    capacity,
                    pods=pods,
                    existing=capacity.existing,
                    avoid=[a.offering for a in avoid if a.active(now)],
                    same_zone=zone is not None,
                )
                result = plan_gang(request)
        except ValueError as err:  # a malformed pod or Node in the cache: no partial plan
            why = str(err)
    if isinstance(result, NoFit):
        why = result.reason
    elif result is not None and not result.avoided:
        why = "only the offerings that refused would fit"
    elif result is not None:
        why = refused_by_bounds(result.plan, capacity.bounds)
    if why is not None or not isinstance(result, GangPlan):
        where = f" in {zone}" if zone else ""
        message = (
            f"{d.rollback.message}; they cannot be bought again beside the {len(d.kept)} that launched{where} ({why})"
        )
        return CannotRebuy(rollback=replace(d.rollback, message=message), why=why)
    tag = f"{pending.id}r{pending.replans + 1}"
    claims = _manifests(v, result, capacity.pools, tag=tag, attempt=pending.id)
    record = replanned(
        pending,
        seq=next_seq(v),
        nodeclaims=(*d.kept, *_names(claims)),
        last_failure=d.rollback.message,
        avoid=avoid,
    )
    left = (pending.deadline - now).total_seconds() if pending.deadline is not None else RECHECK_SECONDS
    return Rebuy(replan=d, record=record, claims=claims, result=result, recheck=max(left, 0.0))


def release(v: GangView, names: Sequence[str], *, now: datetime) -> Release:
    """Every NodeClaim is Initialized: the admitted record, and the members whose gate goes."""
    pending = v.pending
    assert pending is not None
    if v.admitted is not None and v.admitted.id == pending.id:
        record = v.admitted  # finishing an admission a crash interrupted
    else:
        record = admitted_record(pending, v.admitted, seq=next_seq(v), now=now, live=v.claims)
    wanted = set(names)
    complete = completed_at([*v.gated, *v.released], v.size or v.members)
    return Release(
        key=v.key,
        attempt=pending.attempt,
        rollbacks=pending.rollbacks,
        record=record,
        pods=tuple(p for p in v.gated if p.name in wanted),
        since_complete=(now - complete).total_seconds() if complete is not None else 0.0,
        since_started=(now - pending.started).total_seconds() if pending.started is not None else 0.0,
    )


def lose_member(v: GangView, d: MemberLost) -> RestartGang | ReplaceMember:
    """An admitted member's node is gone: the member-loss policy's step."""
    admitted = v.admitted
    assert admitted is not None
    if d.policy == POLICY_RESTART_GANG:
        members = (*v.released, *v.gated)
        return RestartGang(
            lost=d,
            pods=members,
            remaining=tuple(n for n in admitted.nodeclaims if n in v.claims and not v.claims[n].deleting),
            text=f"{d.message}; policy {POLICY_RESTART_GANG}: deleting the {len(members)} remaining member(s) so "
            "their controller recreates them and the gang starts again as a unit",
        )
    return ReplaceMember(
        lost=d,
        record=without(admitted, set(d.lost), seq=next_seq(v)),
        text=f"{d.message}; policy replace-member: the other members keep running, a replacement member is "
        "provisioned on its own when its pod appears (gated)",
    )


def members_missing(v: GangView, d: WaitForMembers, *, knobs: Knobs) -> str:
    """What a gang still incomplete after the member wait is told."""
    return (
        f"gang {v.key} has {d.present} of {d.size} members after more than "
        f"{format_seconds(knobs.member_wait_seconds)}; "
        f"waiting for {d.size - d.present} more before buying any node (create the missing pods, or fix "
        "joiner.sh/gang-size / the PodGroup's minMember)"
    )
