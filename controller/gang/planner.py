"""Planning a whole gang in one solve, and telling "not now" from "never". Pure: no I/O, no clock.

The gang's pods are solved as one all-or-nothing :class:`~controller.scheduling.model.Gang`
against NodePools whose nodes carry the gang's label and taint, so the plan's NodeClaims come out
labelled and tainted for the gang and the pods (pinned to that label, tolerating that taint) can
land on nothing else. NodePool limits are counted with every node and in-flight NodeClaim of the
cluster, so two gangs competing for a limit never both get half.

The members are solver pods (:class:`~controller.scheduling.model.Pod`), so they need not be real
pods: :func:`convert_pods` takes a gang's gated members, :func:`template_pods` a list of pod
templates and counts (what a Kueue ``ProvisioningRequest`` asks for); both pin them to the gang the
same way, and :func:`plan_gang` and :func:`refused_by_bounds` serve either.

When the gang does not fit, the same solve is repeated in an empty cluster with every offering
available: if it fits there, the gang waits for capacity (``NoFit(permanent=False)``); if not, it
can never fit as the NodePools stand (``NoFit(permanent=True)``) and the reason says what to change.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from api.v1.labels import LABEL_GANG, LABEL_ZONE
from api.v1.types import parse_duration
from controller.gang.markers import TAINT_GANG
from controller.scheduling import kubeconv, kubeconv_volumes
from controller.scheduling.bounds import PoolBounds, apply_bounds
from controller.scheduling.model import ExistingNode, Gang, NodePoolTemplate, OfferingKey, Plan, Pod
from controller.scheduling.quantity import format_human
from controller.scheduling.resources import EMPTY, Resources, sum_resources
from controller.scheduling.solver import solve
from controller.scheduling.taints import Taint
from controller.state.views import PodView

Obj = Mapping[str, Any]
Narrow = Callable[[Pod, Obj], Pod]
"""A member narrowed to the nodes its volumes allow (``ClusterState.volumes_of``)."""
GANG_TAINT_EFFECT: Final = "NoSchedule"


@dataclass(frozen=True, slots=True)
class PoolGangDefaults:
    """A NodePool's ``spec.gang``."""

    same_zone: bool = True
    timeout_seconds: float | None = None


def pool_gang_defaults(pool: Obj) -> PoolGangDefaults:
    raw = (pool.get("spec") or {}).get("gang") or {}
    timeout: float | None = None
    if raw.get("timeout"):
        try:
            parsed = parse_duration(str(raw["timeout"]))
            timeout = parsed.total_seconds() if parsed is not None else None
        except ValueError:
            timeout = None
    return PoolGangDefaults(same_zone=bool(raw.get("sameZone", True)), timeout_seconds=timeout)


def gang_taint(gid: str) -> Taint:
    return Taint(key=TAINT_GANG, value=gid, effect=GANG_TAINT_EFFECT)


def gang_toleration(gid: str) -> dict[str, str]:
    return {"key": TAINT_GANG, "operator": "Equal", "value": gid, "effect": GANG_TAINT_EFFECT}


def pinned_pod(pod: Obj, gid: str, *, zone: str | None = None) -> dict[str, Any]:
    """A copy of the pod as it is once pinned to the gang: selects the gang's label, tolerates its
    taint (and, for a running gang, selects its zone). Used for solving, never written as is."""
    out: dict[str, Any] = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    selector = dict(spec.get("nodeSelector") or {})
    selector[LABEL_GANG] = gid
    if zone:
        selector[LABEL_ZONE] = zone
    spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    if gang_toleration(gid) not in tolerations:
        tolerations.append(gang_toleration(gid))
    spec["tolerations"] = tolerations
    return out


def gang_pools(pools: Sequence[NodePoolTemplate], gid: str) -> tuple[NodePoolTemplate, ...]:
    """The NodePools as they buy for this gang: their nodes carry the gang's label and taint."""
    return tuple(
        replace(
            p,
            labels={**dict(p.labels), LABEL_GANG: gid},
            taints=(*p.taints, gang_taint(gid)),
        )
        for p in pools
    )


@dataclass(frozen=True, slots=True)
class PlanRequest:
    key: str
    gid: str
    pods: tuple[Pod, ...]  # the gated members, converted from their pinned form with gang=gid
    pools: tuple[NodePoolTemplate, ...]  # valid NodePools, usage = every node and in-flight claim
    defaults: Mapping[str, PoolGangDefaults]
    existing: tuple[ExistingNode, ...] = ()  # nodes and in-flight claims (only the gang's match the pods)
    daemons: tuple[Pod, ...] = ()
    unavailable: frozenset[OfferingKey] = frozenset()
    avoid: frozenset[OfferingKey] = frozenset()
    same_zone: bool | None = None  # the gang's annotation; None: the NodePools decide


@dataclass(frozen=True, slots=True)
class GangPlan:
    plan: Plan
    same_zone: bool
    avoided: bool  # the offerings of the last failure could be avoided
    timeout_seconds: float | None  # the shortest spec.gang.timeout among the NodePools used


@dataclass(frozen=True, slots=True)
class NoFit:
    permanent: bool
    reason: str


def _modes(req: PlanRequest) -> list[tuple[bool, tuple[NodePoolTemplate, ...]]]:
    if req.same_zone is not None:
        return [(req.same_zone, req.pools)]
    modes = [(True, req.pools)]
    spread = tuple(p for p in req.pools if not req.defaults.get(p.name, PoolGangDefaults()).same_zone)
    if spread:
        modes.append((False, spread))
    return modes


def _solve(
    req: PlanRequest,
    pools: Sequence[NodePoolTemplate],
    *,
    same_zone: bool,
    unavailable: frozenset[OfferingKey],
    existing: Sequence[ExistingNode],
) -> Plan:
    return solve(
        pods=req.pods,
        node_pools=gang_pools(pools, req.gid),
        existing_nodes=existing,
        daemon_pods=req.daemons,
        unavailable=unavailable,
        gangs=[Gang(id=req.gid, same_zone=same_zone)],
    )


def _placed(plan: Plan, pods: Sequence[Pod]) -> bool:
    return not plan.unschedulable and all(plan.node_of(p.key) is not None for p in pods)


def _reason(plan: Plan) -> str:
    return next(iter(plan.unschedulable.values()), "the members do not fit")


def plan_gang(req: PlanRequest) -> GangPlan | NoFit:
    """Plan every gated member at once, or say why not (and whether waiting can help)."""
    if not req.pods:
        return NoFit(permanent=False, reason="no member to plan")
    first: Plan | None = None
    for same_zone, pools in _modes(req):
        tries = [(req.unavailable | req.avoid, True)]
        if req.avoid:
            tries.append((req.unavailable, False))
        for unavailable, avoided in tries:
            plan = _solve(req, pools, same_zone=same_zone, unavailable=unavailable, existing=req.existing)
            if _placed(plan, req.pods):
                used = {n.node_pool for n in plan.new_nodes}
                timeouts = [
                    t for name in used if (t := req.defaults.get(name, PoolGangDefaults()).timeout_seconds) is not None
                ]
                return GangPlan(
                    plan=plan,
                    same_zone=same_zone,
                    avoided=avoided or not req.avoid,
                    timeout_seconds=min(timeouts) if timeouts else None,
                )
            if first is None:
                first = plan
    assert first is not None
    return _classify(req, first)


def _fits(req: PlanRequest, *, pools: Sequence[NodePoolTemplate], unavailable: frozenset[OfferingKey]) -> Plan | None:
    for same_zone, usable in _modes(replace(req, pools=tuple(pools))):
        plan = _solve(req, usable, same_zone=same_zone, unavailable=unavailable, existing=req.existing)
        if _placed(plan, req.pods):
            return plan
    return None


def _classify(req: PlanRequest, first: Plan) -> NoFit:
    """Why the gang does not fit, and whether waiting can help."""
    empty = tuple(replace(p, usage=EMPTY) for p in req.pools)
    plan = _fits(req, pools=empty, unavailable=req.unavailable)
    if plan is not None:
        return NoFit(permanent=False, reason=_in_use_message(req, plan))
    if _fits(req, pools=empty, unavailable=frozenset()) is not None:
        return NoFit(
            permanent=False,
            reason=f"gang {req.key} does not fit now, waiting for capacity: the offerings it needs recently "
            f"ran out of capacity and are avoided for a few minutes ({_reason(first)})",
        )
    # never as the NodePools stand: are the limits the reason?
    unlimited = _fits(req, pools=tuple(replace(p, limits=EMPTY) for p in empty), unavailable=frozenset())
    if unlimited is not None:
        return NoFit(permanent=True, reason=_limits_message(req, unlimited))
    modes = _modes(replace(req, pools=empty))
    strict = _solve(req, modes[0][1], same_zone=modes[0][0], unavailable=frozenset(), existing=req.existing)
    return NoFit(permanent=True, reason=f"gang {req.key} can never fit as the NodePools stand: {_reason(strict)}")


def _needs(req: PlanRequest, plan: Plan) -> dict[str, tuple[int, Resources]]:
    """Per NodePool: how many nodes the plan buys there and their total capacity."""
    by_pool: dict[str, list[Resources]] = {}
    for node in plan.new_nodes:
        pool = next((p for p in req.pools if p.name == node.node_pool), None)
        if pool is None:
            continue
        it = next((t for t in pool.instance_types if t.name == node.choice.instance_type), None)
        by_pool.setdefault(node.node_pool, []).append(it.capacity if it is not None else node.requests)
    return {name: (len(caps), sum_resources(caps)) for name, caps in by_pool.items()}


def _in_use_message(req: PlanRequest, plan: Plan) -> str:
    """The gang fits an empty pool but not beside what already runs or is in flight."""
    parts: list[str] = []
    for name, (count, total) in sorted(_needs(req, plan).items()):
        pool = next(p for p in req.pools if p.name == name)
        for r in pool.limits.names():
            used, limit, need = pool.usage.get(r), pool.limits.get(r), total.get(r)
            if need and used + need > limit:
                parts.append(
                    f'NodePool "{name}" has {format_human(r, max(0, limit - used))} of its {format_human(r, limit)} '
                    f"{r} left ({format_human(r, used)} in use by nodes and in-flight NodeClaims), the gang needs "
                    f"{format_human(r, need)} on {count} nodes"
                )
    detail = "; ".join(parts) if parts else _reason(plan)
    return (
        f"gang {req.key} does not fit now, waiting for capacity: {detail}. It waits whole: no NodeClaim is "
        "created until every member fits"
    )


def _limits_message(req: PlanRequest, plan: Plan) -> str:
    """The gang needs more than a NodePool's spec.limits allow, even with the pool empty."""
    parts: list[str] = []
    for name, (count, total) in sorted(_needs(req, plan).items()):
        pool = next(p for p in req.pools if p.name == name)
        over = [r for r in pool.limits.names() if total.get(r) > pool.limits.get(r)]
        if over:
            needs = ", ".join(f"{format_human(r, total.get(r))} {r}" for r in over)
            limits = ", ".join(f"{r}: {format_human(r, pool.limits.get(r))}" for r in over)
            parts.append(
                f'{count} nodes with {needs} in total, more than NodePool "{name}" may ever have (spec.limits {limits})'
            )
    detail = "; ".join(parts) if parts else "more than the NodePools' spec.limits allow"
    return (
        f"gang {req.key} can never fit: its {len(req.pods)} members need {detail}. "
        "Raise the NodePool's limits or make the gang smaller"
    )


def convert_pods(
    pods: Sequence[PodView],
    gid: str,
    *,
    zone: str | None = None,
    volumes: Narrow | None = None,
    waiting: list[str] | None = None,
) -> tuple[list[Pod], list[str]]:
    """The gated members as the solver sees them once pinned, each on the nodes its volumes allow
    (``volumes``: the cluster's `volumes_of`); unreadable pods are reported, and so are members
    whose volumes let kube-scheduler place them nowhere yet (in ``waiting`` when given)."""
    out: list[Pod] = []
    problems: list[str] = []
    for pod in pods:
        try:
            pinned = pinned_pod(pod.raw, gid, zone=zone)
            why = kubeconv.unplannable(pinned.get("spec") or {})
            if why is not None:
                problems.append(f"pod {pod.name}: {why}")
                continue
            member = kubeconv.pod_from_dict(pinned, gang=gid)
            if volumes is not None and kubeconv_volumes.has_claims(pinned.get("spec") or {}):
                member = volumes(member, pinned)
            out.append(member)
        except kubeconv_volumes.VolumeNotReady as err:
            (waiting if waiting is not None else problems).append(f"pod {pod.name}: {err}")
        except ValueError as err:
            problems.append(str(err))
    return out, problems


def template_pods(
    namespace: str,
    name: str,
    templates: Sequence[tuple[Obj, int]],
    gid: str,
    *,
    zone: str | None = None,
) -> tuple[list[Pod], list[str]]:
    """Members that are not pods yet: ``count`` copies of each pod template (``metadata`` and
    ``spec``, as a PodTemplate holds them), named ``<name>-<template>-<copy>`` in ``namespace`` and
    pinned to the gang as :func:`convert_pods` pins real members. An unreadable template is
    reported once, and none of its copies is returned."""
    out: list[Pod] = []
    problems: list[str] = []
    for t, (template, count) in enumerate(templates):
        meta = dict(template.get("metadata") or {})
        copies: list[Pod] = []
        try:
            for i in range(count):
                pod = {
                    "metadata": {**meta, "name": f"{name}-{t}-{i}", "namespace": namespace},
                    "spec": template.get("spec") or {},
                }
                copies.append(kubeconv.pod_from_dict(pinned_pod(pod, gid, zone=zone), gang=gid))
        except ValueError as err:
            problems.append(str(err))
            continue
        out.extend(copies)
    return out, problems


def refused_by_bounds(plan: Plan, bounds: Mapping[str, PoolBounds]) -> str | None:
    """Why the NodePools' budgets and ``limits.nodes`` refuse the plan (whole or not at all), if they do."""
    refused = apply_bounds(plan, bounds).refused
    return next(iter(refused.values()))[1] if refused else None


def describe_plan(plan: Plan) -> str:
    """``8x p5.48xlarge (on-demand, us-east-1a)``: what an attempt buys, for Events and logs."""
    counts: dict[tuple[str, str, str], int] = {}
    for node in plan.new_nodes:
        k = (node.choice.instance_type, node.choice.capacity_type, node.choice.zone)
        counts[k] = counts.get(k, 0) + 1
    parts = [f"{n}x {it} ({ct}, {zone})" for (it, ct, zone), n in sorted(counts.items())]
    return ", ".join(parts) if parts else "no new node"


__all__ = [
    "GangPlan",
    "Narrow",
    "NoFit",
    "PlanRequest",
    "PoolGangDefaults",
    "convert_pods",
    "describe_plan",
    "gang_pools",
    "gang_taint",
    "gang_toleration",
    "pinned_pod",
    "plan_gang",
    "pool_gang_defaults",
    "refused_by_bounds",
    "template_pods",
]
