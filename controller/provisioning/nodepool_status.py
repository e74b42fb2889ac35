"""NodePool status: what the pool holds (resources, nodes) and whether it can launch (conditions).

Conditions: `ValidationSucceeded` (the spec passes the same rules as the CRD), `NodeClassReady`
(the referenced NodeClass exists and does not say Ready=False), `LimitsReached` (a resource in
spec.limits, or `limits.nodes`, is used up: the pool launches nothing more), `PodsRefused` (pending
pods no pool could take that this pool refused in the provisioner's last batch, with the first one's
reason), `BufferLimited` (only for pools with a warm buffer: the buffer stopped short of what it
wants, and why), `QuotaExceeded` (only while a launch of the pool hit an account quota, for as long
as the refused offerings are avoided), `TierMix` (only with spec.capacity.tierMix: whether the
pool's capacity by capacity type is within 10 points of its target shares; ``SpotShort`` when spot
could not be had), and `Ready` (validation and NodeClass are fine).
`status.buffer` (wanted / ready) comes from the capacity controller's report. For
``kubectl get nodepools``: `status.reason` (Ready or why not), `status.pricePerHour` and
`status.mostUsedLimit` (the limit, ``limits.nodes`` or budget closest to used up, in percent).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import structlog

from api.v1 import labels as wk
from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller import metrics
from controller.clock import format_time
from controller.context import Context
from controller.kube.client import ApiError, NotFoundError
from controller.kube.resources import NODEPOOLS
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.quantity import QuantityError, format_human, parse_quantity
from controller.scheduling.resources import Resources, sum_resources
from controller.scheduling.tiermix import TIERS, TierMix, shares, weight
from controller.state.buffers import BufferReport
from controller.state.nodepools import tier_mix
from controller.state.patches import transition_time
from controller.state.queue import WorkQueue
from controller.state.refusals import Refusal
from controller.state.spend import claim_prices

log = structlog.get_logger()
Obj = dict[str, Any]
CLAIM_COALESCE_SECONDS = 1.0


def _condition(ctype: str, ok: bool, reason: str, message: str) -> Obj:
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}


def _has_buffer(pool: Obj) -> bool:
    capacity = (pool.get("spec") or {}).get("capacity") or {}
    return bool(capacity.get("buffer") or capacity.get("schedules") or (capacity.get("forecast") or {}).get("enabled"))


def _buffer_condition(buffer: BufferReport | None, limited: str | None) -> Obj:
    problems = [*(buffer.problems if buffer is not None else ()), *([limited] if limited else [])]
    if problems:
        return _condition("BufferLimited", True, "BufferLimited", "; ".join(problems))
    return _condition("BufferLimited", False, "BufferComplete", "")


def _limits(pool: Obj) -> dict[str, int]:
    """``spec.limits`` in milli-units, zeros kept (a resource list drops them); unreadable ones left out
    (validation reports them)."""
    raw = (pool.get("spec") or {}).get("limits")
    out: dict[str, int] = {}
    if isinstance(raw, dict):
        for res, amount in raw.items():
            try:
                out[str(res)] = parse_quantity(amount)
            except QuantityError:
                continue
    return out


TIER_MIX_TOLERANCE = 0.10
"""How far (in share of the pool) a capacity type may be off its target before TierMix says so."""
TIER_SHARE = metrics.gauge(
    "joiner_nodepool_capacity_share",
    "Share of the NodePool's capacity by capacity type (0..1).",
    ("nodepool", "capacity_type"),
)
TIER_TARGET = metrics.gauge(
    "joiner_nodepool_capacity_share_target",
    "The NodePool's tier mix target share by capacity type (0..1).",
    ("nodepool", "capacity_type"),
)


def _claim_tier(claim: Obj) -> str | None:
    tier = (claim["metadata"].get("labels") or {}).get(wk.LABEL_CAPACITY_TYPE)
    if tier:
        return str(tier)
    for req in (claim.get("spec") or {}).get("requirements") or ():
        if (
            req.get("key") == wk.LABEL_CAPACITY_TYPE
            and req.get("operator") == "In"
            and len(req.get("values") or []) == 1
        ):
            return str(req["values"][0])
    return None


def tier_weights(claims: list[Obj]) -> dict[str, float]:
    """The pool's launched capacity by capacity type (GPUs for GPU nodes, vCPUs for others)."""
    out = dict.fromkeys(TIERS, 0.0)
    for claim in claims:
        tier = _claim_tier(claim)
        capacity = (claim.get("status") or {}).get("capacity")
        if tier in out and capacity:
            try:
                out[tier] += weight(Resources.parse(capacity))
            except (QuantityError, ValueError):
                continue
    return out


def tier_mix_condition(mix: TierMix, weights: dict[str, float]) -> Obj:
    """``TierMix``: whether the pool's capacity is within tolerance of its target shares."""
    actual = shares(weights)
    total = sum(weights.values())
    said = ", ".join(f"{t} {actual[t]:.0%} (target {mix.target(t):.0%})" for t in TIERS)
    if total <= 0:
        return _condition("TierMix", True, "NoCapacity", "the pool has no launched capacity yet")
    off = [t for t in TIERS if abs(actual[t] - mix.target(t)) > TIER_MIX_TOLERANCE]
    if not off:
        return _condition("TierMix", True, "WithinTargets", said)
    reserved_over = actual["reserved"] > mix.reserved + TIER_MIX_TOLERANCE
    if actual["spot"] < mix.spot - TIER_MIX_TOLERANCE and not reserved_over:
        reason = "SpotShort"
    elif reserved_over:
        reason = "ReservedFirst"
    else:
        reason = "OffTarget"
    return _condition("TierMix", False, reason, said)


def _pods(n: int) -> str:
    return "1 pod" if n == 1 else f"{n} pods"


def _budget(pool: Obj) -> float | None:
    raw = ((((pool.get("spec") or {}).get("capacity") or {}).get("budget")) or {}).get("maxPricePerHour")
    try:
        return None if raw is None else float(raw)
    except (TypeError, ValueError):
        return None  # validation reports it


def most_used_limit(pool: Obj, used: Resources, *, nodes: int, price: float) -> str | None:
    """The limit closest to used up, as ``"75% nvidia.com/gpu"`` (a limit of 0 is 100% used);
    ``nodes`` for ``limits.nodes`` and ``budget`` for the $/hour budget. None without limits."""
    shares: list[tuple[float, str]] = []
    for res, limit in _limits(pool).items():
        have = nodes * 1000 if res == "nodes" else used.get(res)
        shares.append((1.0 if limit <= 0 else have / limit, res))
    budget = _budget(pool)
    if budget is not None:
        shares.append((1.0 if budget <= 0 else price / budget, "budget"))
    if not shares:
        return None
    share, name = max(shares, key=lambda s: (s[0], s[1]))
    return f"{math.floor(share * 100 + 1e-9)}% {name}"


def desired_status(
    *,
    pool: Obj,
    claims: list[Obj],
    registered: set[str],
    nodeclass_exists: bool,
    buffer: BufferReport | None = None,
    buffer_limited: str | None = None,
    quota: tuple[str, str] | None = None,
    nodeclass_problem: str | None = None,
    prices: dict[str, float] | None = None,
    refused: Refusal | None = None,
) -> tuple[Obj, str | None]:
    """The status a NodePool should have, and the validation error if its spec is invalid. Pure.

    ``buffer``/``buffer_limited``: the pool's warm buffer as last reported, and why it stopped short.
    ``prices``: NodeClaim name -> $/hour (`controller.state.spend`); the pool's sum is
    ``status.pricePerHour`` and counts against its budget. ``refused``: the pending pods no pool
    could take that this pool refused in the provisioner's last batch, and why (``PodsRefused``)."""
    name = pool["metadata"]["name"]
    mine = [
        c
        for c in claims
        if (c["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL) == name
        and not c["metadata"].get("deletionTimestamp")
    ]
    used = sum_resources(Resources.parse((c.get("status") or {}).get("capacity")) for c in mine)
    error: str | None = None
    try:
        validate(NodePool, pool)
    except InvalidObjectError as err:
        error = str(err)
    ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    reached = [
        f"{res}: {format_human(res, used.get(res))} of {format_human(res, limit)} in use"
        for res, limit in _limits(pool).items()
        if res != "nodes" and used.get(res) >= limit  # a limit of 0 is reached from the start
    ]
    max_nodes = _limits(pool).get("nodes")
    if max_nodes is not None and len(mine) * 1000 >= max_nodes:
        reached.append(f"nodes: {len(mine)} of {max_nodes // 1000}")
    price = sum((prices or {}).get(c["metadata"]["name"], 0.0) for c in mine)
    budget = _budget(pool)
    if budget is not None and price >= budget - 1e-9:
        reached.append(f"budget: ${price:.2f}/h of ${budget:.2f}/h")
    conditions = [
        _condition(
            "ValidationSucceeded",
            error is None,
            "Valid" if error is None else "Invalid",
            "" if error is None else error,
        ),
        _condition(
            "NodeClassReady",
            nodeclass_exists and not nodeclass_problem,
            "Found"
            if nodeclass_exists and not nodeclass_problem
            else ("NodeClassNotReady" if nodeclass_exists else "NodeClassNotFound"),
            ""
            if nodeclass_exists and not nodeclass_problem
            else (
                f"{ref.get('kind', 'NodeClass')} {ref.get('name', '')!r} is not Ready: {nodeclass_problem}"
                if nodeclass_exists
                else f"{ref.get('kind', 'NodeClass')} {ref.get('name', '')!r} does not exist"
            ),
        ),
        _condition(
            "LimitsReached",
            bool(reached),
            "LimitsReached" if reached else "WithinLimits",
            "; ".join(reached) if reached else "",
        ),
    ]
    conditions.append(
        _condition("PodsRefused", True, "PodsRefused", f"{_pods(refused.pods)} pending: {refused.reason}")
        if refused is not None
        else _condition("PodsRefused", False, "NoneRefused", "")
    )
    mix = tier_mix(pool)
    if mix is not None:
        conditions.append(tier_mix_condition(mix, tier_weights(mine)))
    if _has_buffer(pool):
        conditions.append(_buffer_condition(buffer, buffer_limited))
    if quota is not None:  # only while the refused offerings are avoided
        conditions.append(_condition("QuotaExceeded", True, quota[0], quota[1]))
    ready = error is None and nodeclass_exists and not nodeclass_problem
    conditions.append(
        _condition(
            "Ready",
            ready,
            "Ready" if ready else "NotReady",
            "" if ready else "; ".join(c["message"] for c in conditions[:2] if c["status"] == "False"),
        )
    )
    if error is not None:
        reason = "Invalid"
    elif not nodeclass_exists:
        reason = "NodeClassNotFound"
    elif reached:
        reason = "LimitsReached"
    else:
        reason = "Ready"
    status = {
        "resources": used.to_quantities(),
        "nodes": sum(1 for c in mine if c["metadata"]["name"] in registered),
        "conditions": conditions,
        "reason": reason,
        "pricePerHour": f"{price:.2f}",
        "mostUsedLimit": most_used_limit(pool, used, nodes=len(mine), price=price),
    }
    if _has_buffer(pool):
        shown: Obj = {
            "wanted": buffer.wanted if buffer is not None else 0,
            "ready": buffer.ready if buffer is not None else 0,
        }
        if buffer is not None and buffer.forecast is not None:
            shown["forecast"] = buffer.forecast
            shown["forecastConfidence"] = f"{buffer.forecast_confidence or 0:.2f}"
        status["buffer"] = shown
    return status, error


def _same_conditions(old: list[Obj], new: list[Obj]) -> bool:
    def strip(conds: list[Obj]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message") or "") for c in conds)

    return strip(old) == strip(new)


class NodePoolStatusController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="nodepool-status", clock=ctx.clock)
        self._reported: dict[str, str] = {}  # pool -> the validation error already reported as an Event

    def _enqueue_all(self, *_: Any) -> None:
        for name in self.ctx.cluster.nodepools():
            self.queue.add(name)

    def _on_pool(self, etype: str, obj: Obj, old: Obj | None) -> None:
        if etype != "DELETED":
            self.queue.add(obj["metadata"]["name"])

    def _on_claim(self, etype: str, obj: Obj, old: Obj | None) -> None:
        pool = (obj["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL)
        if pool:
            # a burst of launches changes every claim several times: one update per pool per
            # interval says the same for far less work (validation, a pass over every claim, a write)
            self.queue.add_after(pool, CLAIM_COALESCE_SECONDS)

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe("NodePool", self._on_pool)
        cluster.subscribe("NodeClaim", self._on_claim)
        cluster.subscribe("KWOKNodeClass", self._enqueue_all)
        cluster.subscribe("EC2NodeClass", self._enqueue_all)
        cluster.subscribe("GCENodeClass", self._enqueue_all)
        cluster.subscribe("AKSNodeClass", self._enqueue_all)
        self.ctx.buffers.subscribe(self.queue.add)
        self.ctx.refusals.subscribe(self.queue.add)
        await cluster.wait_synced()
        self._enqueue_all()
        await self.queue.run(self.reconcile, workers=2)

    def _tier_metrics(self, pool: Obj, claims: list[Obj]) -> None:
        name = pool["metadata"]["name"]
        mix = tier_mix(pool)
        mine = [
            c
            for c in claims
            if (c["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL) == name
            and not c["metadata"].get("deletionTimestamp")
        ]
        actual = shares(tier_weights(mine))
        for t in TIERS:
            if mix is None:
                with contextlib.suppress(KeyError):
                    TIER_TARGET.remove(name, t)
            else:
                TIER_TARGET.labels(name, t).set(mix.target(t))
            TIER_SHARE.labels(name, t).set(actual[t])

    async def _prices(self, pool: Obj, name: str, *, nodeclass_exists: bool) -> dict[str, float]:
        """The $/hour of each of the pool's NodeClaims: the launched offering's price from the
        cloud's instance types, else the price planned when it was created."""
        types: dict[str, InstanceType] = {}
        if nodeclass_exists:
            try:
                types = {it.name: it for it in await self.ctx.cloud.instance_types(pool)}
            except Exception as err:  # the planned prices stand in; the NodeClass status says why
                log.debug("nodepool.instance_types_unavailable", nodepool=name, error=str(err))
        claims = [c for c in self.ctx.cluster.claim_views().values() if c.nodepool == name]
        return {c.name: c.price for c in claim_prices(claims, types)}

    async def reconcile(self, name: str) -> float | None:
        cluster = self.ctx.cluster
        pool = cluster.nodepools().get(name)
        if pool is None:
            self._reported.pop(name, None)
            return None
        ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        kind = ref.get("kind")
        # EC2NodeClass, GCENodeClass, AKSNodeClass: their provider only
        classes = ("KWOKNodeClass", "EC2NodeClass", "GCENodeClass", "AKSNodeClass")
        watched = kind in classes and kind in cluster.informers
        nodeclass_exists = watched and ref.get("name") in cluster.store(str(kind))
        nodeclass_problem = None
        if nodeclass_exists:  # a NodeClass that says it is not Ready (an EC2NodeClass the preflight refused)
            conds = ((cluster.store(str(kind))[ref["name"]].get("status") or {}).get("conditions")) or []
            said = next((c for c in conds if c.get("type") == "Ready"), None)
            if said is not None and said.get("status") == "False":
                nodeclass_problem = str(said.get("message") or said.get("reason") or "Ready=False")
        claims = [c.raw for c in cluster.claim_views().values()]
        registered = {c.name for c in cluster.claim_views().values() if cluster.node_view_for_claim(c) is not None}
        quota = self.ctx.unavailable.quota(name)
        status, error = desired_status(
            pool=pool,
            claims=claims,
            registered=registered,
            nodeclass_exists=nodeclass_exists,
            buffer=self.ctx.buffers.report(name),
            buffer_limited=self.ctx.buffers.limited(name),
            quota=quota[:2] if quota is not None else None,
            nodeclass_problem=nodeclass_problem,
            prices=await self._prices(pool, name, nodeclass_exists=nodeclass_exists),
            refused=self.ctx.refusals.of(name),
        )
        again = quota[2] + 0.5 if quota is not None else None  # to take the condition off when it ends
        current = pool.get("status") or {}
        self._tier_metrics(pool, claims)
        if error and self._reported.get(name) != error:
            self._reported[name] = error
            log.warning("nodepool.invalid", nodepool=name, error=error)
            await self.ctx.events.emit(pool, reason="InvalidNodePool", message=error, type="Warning")
        elif not error:
            self._reported.pop(name, None)
        if (
            current.get("resources") == status["resources"]
            and current.get("nodes") == status["nodes"]
            and current.get("buffer") == status.get("buffer")
            and all(current.get(k) == status[k] for k in ("reason", "pricePerHour", "mostUsedLimit"))
            and _same_conditions(current.get("conditions") or [], status["conditions"])
        ):
            return again
        now = format_time(self.ctx.clock.now())
        old_by_type = {c.get("type"): c for c in current.get("conditions") or []}
        for cond in status["conditions"]:
            cond["lastTransitionTime"] = transition_time(old_by_type.get(cond["type"]), cond["status"], now)
            cond["observedGeneration"] = pool["metadata"].get("generation", 1)
        # a merge patch merges maps: resources the pool no longer holds must be nulled out
        resources: dict[str, str | None] = dict.fromkeys(current.get("resources") or {})
        resources.update(status["resources"])
        try:
            await self.ctx.client.patch(
                NODEPOOLS, name, {"status": {**status, "resources": resources}}, subresource="status"
            )
        except NotFoundError:
            return None
        except ApiError as err:
            log.warning("nodepool.status_update_failed", nodepool=name, error=str(err))
            return 5.0
        return again
