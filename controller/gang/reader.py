"""What the gang controller reads, and nothing else: which pods belong to which gang (kept from
watch events), the one :class:`~controller.gang.decide.GangView` of a gang that ``decide`` takes,
and the :class:`~controller.gang.attempt.GangInputs` a plan is made against (NodePools, instance
types, machines, DaemonSets, offerings out of capacity, budgets). It reads the cache, the writer's
in-flight NodeClaims, PodGroup sizes and the cloud's instance types; it writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

import structlog

from api.v1.labels import LABEL_GANG
from controller.context import Context
from controller.gang import claims as cl
from controller.gang.attempt import GangInputs
from controller.gang.decide import GangView, first_created
from controller.gang.markers import (
    ANNOTATION_GANG_NAME,
    GangMarker,
    gang_marker,
    gang_options,
    has_gate,
    is_active,
)
from controller.gang.podgroups import PodGroupSizes
from controller.gang.record import ADMITTED, Record, newest, record_of
from controller.scheduling import kubeconv
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, Pod
from controller.state.existing import existing_node
from controller.state.inputs import (
    OfferedPools,
    SolverInputs,
    all_types,
    machines,
    manifests,
    offered_pools,
    solver_inputs,
)
from controller.state.spend import pool_bounds
from controller.state.views import NodeClaimView, NodeView, PodView, StateNode

log = structlog.get_logger()

MAX_GONE: Final = 4096


def gang_of_claim(claim: NodeClaimView) -> str | None:
    """The gang (``namespace/name``) a NodeClaim was bought for, if any."""
    if not claim.gang:
        return None
    key = claim.annotations.get(ANNOTATION_GANG_NAME)
    return str(key) if key else None


class GangReader:
    def __init__(self, ctx: Context, sizes: PodGroupSizes) -> None:
        self.ctx = ctx
        self.sizes = sizes
        self.members: dict[str, set[str]] = defaultdict(set)  # gang key -> pod keys
        self._gang_of_pod: dict[str, str] = {}
        self._markers: dict[str, GangMarker] = {}
        self._overrides: dict[str, tuple[Record, frozenset[str]]] = {}  # what we wrote, until cached
        self._seen: dict[str, set[str]] = {}  # attempt id -> NodeClaims seen to exist (the newest MAX_GONE)
        self._gone: dict[str, NodeClaimView] = {}  # last state of gang NodeClaims that were deleted

    # --- from watch events -----------------------------------------------------------------------

    def index(self, pod: PodView, *, deleted: bool = False) -> tuple[str | None, str | None]:
        """Track the pod's gang. Returns the gang it left (if any) and the gang to look at now."""
        pkey = pod.key
        marker = gang_marker(pod)
        previous = self._gang_of_pod.get(pkey)
        left: str | None = None
        if previous is not None and (deleted or marker is None or marker.key != previous):
            self.members[previous].discard(pkey)
            self._gang_of_pod.pop(pkey, None)
            left = previous
        if marker is None or deleted:
            return left, previous
        self._markers[marker.key] = marker
        self.members[marker.key].add(pkey)
        self._gang_of_pod[pkey] = marker.key
        return left, marker.key

    def claim_deleted(self, claim: NodeClaimView) -> None:
        """Keep a deleted gang NodeClaim's last state: why it went and what it was, for the rollback."""
        self._gone[claim.name] = claim
        while len(self._gone) > MAX_GONE:
            self._gone.pop(next(iter(self._gone)))

    def wrote(self, key: str, record: Record, pods: Sequence[PodView]) -> None:
        """The record just written on ``pods``: it counts until the cache shows it."""
        self._overrides[key] = (record, frozenset(p.uid or "" for p in pods))

    def cached(self, key: str) -> None:
        """The gang's pods carry what was written (or it does not matter any more)."""
        self._overrides.pop(key, None)

    def created(self, attempt: str, names: Sequence[str]) -> None:
        """NodeClaims of ``attempt`` about to be created: once gone, they failed (not never created)."""
        self._seen_for(attempt).update(names)

    def forget(self, key: str) -> bool:
        """Drop a gang no pod names any more; False while it still has members."""
        if self.members.get(key):
            return False
        self.members.pop(key, None)
        self._markers.pop(key, None)
        self._overrides.pop(key, None)
        return True

    def _seen_for(self, attempt: str) -> set[str]:
        found = self._seen.get(attempt)
        if found is None:
            found = self._seen[attempt] = set()
            while len(self._seen) > MAX_GONE:
                self._seen.pop(next(iter(self._seen)))
        return found

    # --- the view ----------------------------------------------------------------------------

    async def _size(self, marker: GangMarker, annotated: int | None) -> int | None:
        if marker.source == "joiner":
            return annotated
        from_group = await self.sizes.min_member(marker)
        return from_group if from_group is not None else annotated

    async def view(self, key: str) -> GangView:
        cluster = self.ctx.cluster
        pods = [p for k in sorted(self.members.get(key, ())) if (p := cluster.pod_view(k)) is not None]
        marker = self._markers.get(key)
        if marker is None:
            ns, _, name = key.partition("/")
            marker = GangMarker(ns, name, "joiner")
        gid = marker.id
        active = [p for p in pods if is_active(p) and gang_marker(p) is not None]
        gated = [p for p in active if has_gate(p)]
        released = [p for p in active if not has_gate(p) and (r := record_of(p)) is not None and r.phase == ADMITTED]
        claims: dict[str, NodeClaimView] = {n: c for n, c in cluster.claim_views().items() if c.gang == gid}
        for claim in self.ctx.writer.in_flight():
            if claim.gang == gid:
                claims.setdefault(claim.name, claim)
        uids = {p.uid or "" for p in gated}
        records = [record_of(p) for p in gated]
        override = self._overrides.get(key)
        if override is not None and override[1] & uids:
            records.append(override[0])
        pending = newest(r for r in records if r is not None and r.phase != ADMITTED)
        admitted = newest(r for r in (record_of(p) for p in released) if r is not None)
        options = gang_options(active)
        size = await self._size(marker, options.size) if gated else options.size
        seen = self._seen_for(pending.id) if pending is not None else set()
        if pending is not None:
            seen.update(n for n in pending.nodeclaims if n in claims)
        return GangView(
            key=key,
            gid=gid,
            size=size,
            gated=tuple(gated),
            released=tuple(released),
            claims=claims,
            pending=pending,
            admitted=admitted,
            seen=frozenset(seen),
            gone={n: self._gone[n] for n in (pending.nodeclaims if pending else ()) if n in self._gone},
            strays=self._strays(gid, claims),
            first_created=first_created(active),
            member_loss_policy=options.member_loss_policy,
            problems=options.problems,
            written_seq=override[0].seq if override is not None else 0,
        )

    def _strays(self, gid: str, claims: dict[str, NodeClaimView]) -> dict[str, NodeView]:
        """Nodes labelled with the gang that none of its NodeClaims accounts for."""
        known = cl.node_names(claims)
        out: dict[str, NodeView] = {}
        for name, node in self.ctx.cluster.node_views().items():
            if node.labels.get(LABEL_GANG) != gid:
                continue
            if name in known or node.provider_id in known:
                continue
            out[name] = node
        return out

    def fingerprint(self, view: GangView) -> tuple[Any, ...]:
        """What a "can never fit" verdict depends on: the members and the NodePools and node classes."""
        cluster = self.ctx.cluster
        members = tuple(sorted(p.uid or "" for p in view.gated))
        pools = tuple(sorted((n, p["metadata"].get("resourceVersion")) for n, p in cluster.nodepools().items()))
        classes = tuple(sorted((n, c["metadata"].get("resourceVersion")) for n, c in cluster.nodeclasses().items()))
        return members, pools, classes

    # --- the capacity a plan is made against -------------------------------------------------------

    async def _pools(self) -> tuple[OfferedPools, list[ExistingNode]]:
        """The valid NodePools with their instance types, and the cluster's machines (in-flight
        NodeClaims included): every machine counts for the NodePools' usage."""
        ctx = self.ctx
        pools = await offered_pools(ctx.cluster, ctx.cloud, component="gang")
        return pools, machines(ctx.cluster, pools, in_flight=ctx.writer.in_flight())

    def _inputs(
        self, pools: OfferedPools, *, existing: Sequence[ExistingNode], usage_from: Sequence[ExistingNode]
    ) -> SolverInputs:
        ctx = self.ctx
        return solver_inputs(
            ctx.cluster,
            pools,
            existing=existing,
            usage_from=usage_from,
            unavailable=ctx.unavailable.current(),
            component="gang",
        )

    def _capacity(self, pools: OfferedPools, inputs: SolverInputs, claim_of_node: dict[str, str]) -> GangInputs:
        ctx = self.ctx
        claims = [*ctx.cluster.claim_views().values(), *ctx.writer.in_flight()]
        raw = manifests(pools)
        return GangInputs(
            pools=raw,
            templates=inputs.templates,
            existing=inputs.existing,
            daemons=inputs.daemons,
            unavailable=inputs.unavailable,
            bounds=pool_bounds(raw, claims, dict(inputs.instance_types)),
            claim_of_node=claim_of_node,
            volumes=ctx.cluster.volumes_of,
        )

    async def inputs(self, gid: str) -> GangInputs:
        """For a new attempt: every machine of the cluster (the gang's own named with their NodeClaim)."""
        pools, existing = await self._pools()
        mine = {
            n.name: claim for n in existing if n.labels.get(LABEL_GANG) == gid and (claim := self._claim_named(n.name))
        }
        return self._capacity(pools, self._inputs(pools, existing=existing, usage_from=existing), mine)

    async def kept_inputs(self, view: GangView, kept: Sequence[str]) -> tuple[GangInputs, str | None]:
        """For a re-plan: the attempt's kept machines as the only ones the members may use; and why
        they cannot be read that way, if they cannot."""
        pools, existing = await self._pools()
        unreadable: str | None = None
        kept_nodes: list[ExistingNode] = []
        try:
            kept_nodes = self._kept_nodes(view, kept, list(all_types(pools).values()))
        except ValueError as err:  # a malformed pod or Node in the cache: no partial plan
            unreadable = str(err)
        return self._capacity(pools, self._inputs(pools, existing=kept_nodes, usage_from=existing), {}), unreadable

    def _kept_nodes(
        self, view: GangView, kept: Sequence[str], instance_types: Sequence[InstanceType]
    ) -> list[ExistingNode]:
        """The attempt's machines that launched or are coming up, as the solver sees them: in flight
        until Initialized (their start-up taints do not keep the members off), with what runs on them."""
        cluster = self.ctx.cluster
        machines: list[StateNode] = []
        for name in kept:
            claim = view.claims.get(name)
            if claim is not None and not claim.deleting:
                machines.append(StateNode(node=cluster.node_view_for_claim(claim), claim=claim))
        names = {m.node.name for m in machines if m.node is not None}
        bound: dict[str, list[Pod]] = {}
        if names:
            for pod in cluster.pod_views():
                if pod.node_name in names and not pod.is_terminal:
                    bound.setdefault(pod.node_name, []).append(kubeconv.pod_from_dict(pod.raw, detect_gang=False))
        out: list[ExistingNode] = []
        for m in machines:
            pods = bound.get(m.node.name, []) if m.node is not None else []
            converted = existing_node(m, pods=pods, instance_types=instance_types)
            if converted is not None:
                out.append(converted)
        return out

    def _claim_named(self, node_name: str) -> str | None:
        cluster = self.ctx.cluster
        if node_name in cluster.claim_views():
            return node_name
        node = cluster.node_views().get(node_name)
        claim = cluster.claim_view_for_node(node) if node is not None else None
        return None if claim is None else claim.name
