"""The cluster cache: one informer per kind joiner cares about, plus the indexes controllers need
(pods by node, nodes by providerID, NodeClaim <-> Node). Every decision waits for `synced`."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from controller.clock import Clock
from controller.kube import resources as r
from controller.kube.resources import Resource
from controller.scheduling import kubeconv, kubeconv_nodes, kubeconv_volumes
from controller.scheduling.labels import EPHEMERAL_TAINT_KEYS
from controller.scheduling.model import ExistingNode, Pod
from controller.state.informer import EventType, Informer, Source
from controller.state.views import (
    ControllerRef,
    NodeClaimView,
    NodePoolView,
    NodeView,
    Obj,
    PodView,
    StateNode,
)
from controller.state.workloads import WORKLOAD_KINDS, WORKLOADS, wanted_pods
from controller.state.workloads import slim as slim_workload

Listener = Callable[[EventType, Obj, Obj | None], None]
View = PodView | NodeView | NodeClaimView | NodePoolView
ViewListener = Callable[[EventType, Any, Any], None]
"""Called with (event, view, previous view or None); the view's class is the kind's."""

WATCHED: tuple[Resource, ...] = (
    r.PODS,
    r.NODES,
    r.NODECLAIMS,
    r.NODEPOOLS,
    r.KWOKNODECLASSES,
    r.DAEMONSETS,
    r.PDBS,
    r.PVCS,
    r.PVS,
    r.STORAGECLASSES,
    *WORKLOADS,
)
# kinds read only as hints (how many pods a burst still lacks): nothing waits for their informers to
# sync, and one that cannot list (RBAC without them, from an older install) only loses the hint
HINT_KINDS: frozenset[str] = WORKLOAD_KINDS
# where pods' volumes let them run: nothing else waits for them either; until they are read (an
# older install's role without them: never) a pending pod with a claim is not provisioned for
VOLUME_KINDS: frozenset[str] = frozenset({r.PVCS.kind, r.PVS.kind, r.STORAGECLASSES.kind})
UNSYNCED_KINDS: frozenset[str] = HINT_KINDS | VOLUME_KINDS
_VIEWS: dict[str, Callable[[Obj], View]] = {
    "Pod": PodView.of,
    "Node": NodeView.of,
    "NodeClaim": NodeClaimView.of,
    "NodePool": NodePoolView.of,
}


def _active_owner(pod: PodView | None) -> str | None:
    """The uid of the controller whose active pods `pod` counts among, if it counts."""
    if pod is None or pod.controller is None or pod.deleting or pod.is_terminal:
        return None
    return pod.controller.uid


class ClusterState:
    """The informers' stores, their typed views (made once per event) and the indexes on them."""

    def __init__(
        self,
        *,
        source: Source,
        clock: Clock,
        watched: Iterable[Resource] = WATCHED,
        watch_timeout_seconds: float = 300.0,
    ) -> None:
        self.clock = clock
        self._listeners: dict[str, list[Listener]] = defaultdict(list)
        self._view_listeners: dict[str, list[ViewListener]] = defaultdict(list)
        self._pods: dict[str, PodView] = {}
        self._nodes: dict[str, NodeView] = {}
        self._claims: dict[str, NodeClaimView] = {}
        self._pools: dict[str, NodePoolView] = {}
        self._pods_by_node: dict[str, set[str]] = defaultdict(set)
        self._active_by_controller: Counter[str] = Counter()  # owner uid -> its active pods
        # pod key -> (resourceVersion, the solver's Pod): a pod is converted once per version, not
        # once per solve (a 10,000-pod burst re-reads the same pending and bound pods every few seconds)
        self._pod_models: dict[str, tuple[str, Pod]] = {}
        # node name -> ((resourceVersion, in flight, taint keys left out), the solver's node without pods)
        self._node_models: dict[str, tuple[tuple[str, bool, frozenset[str]], ExistingNode]] = {}
        self._node_by_provider_id: dict[str, str] = {}
        self._claims_by_provider_id: dict[str, dict[str, None]] = defaultdict(dict)  # ordered set of names
        self.informers: dict[str, Informer] = {}
        for res in watched:
            self.informers[res.kind] = Informer(
                source=source,
                resource=res,
                clock=clock,
                handler=self._handler_for(res.kind),
                watch_timeout_seconds=watch_timeout_seconds,
                slim=slim_workload if res.kind in WORKLOAD_KINDS else None,
            )

    # --- wiring --------------------------------------------------------------------------
    def subscribe(self, kind: str, listener: Listener) -> None:
        """Call `listener(event, obj, old)` on every change of `kind` (after the indexes update).

        Subscribing the same listener again is a no-op, so a controller restarted by the operator's
        supervisor does not get every event twice."""
        if listener not in self._listeners[kind]:
            self._listeners[kind].append(listener)

    def subscribe_views(self, kind: str, listener: ViewListener) -> None:
        """Like `subscribe`, with the event's views (Pod, Node, NodeClaim, NodePool) instead of the dicts."""
        if kind not in _VIEWS:
            raise ValueError(f"no view for {kind}")
        if listener not in self._view_listeners[kind]:
            self._view_listeners[kind].append(listener)

    def _handler_for(self, kind: str) -> Callable[[EventType, Obj, Obj | None], None]:
        make = _VIEWS.get(kind)

        def handle(etype: EventType, obj: Obj, old: Obj | None) -> None:
            view: Any = None
            old_view: Any = None
            if make is not None:
                view = make(obj)
                if kind == "Pod":
                    old_view = self._index_pod(etype, view)
                elif kind == "Node":
                    old_view = self._index_node(etype, view)
                elif kind == "NodePool":
                    old_view = self._index_pool(etype, view)
                else:
                    old_view = self._index_claim(etype, view)
                if old_view is None and old is not None:
                    old_view = make(old)
            for listener in self._listeners.get(kind, ()):
                listener(etype, obj, old)
            for view_listener in self._view_listeners.get(kind, ()):
                view_listener(etype, view, old_view)

        return handle

    def _index_pod(self, etype: EventType, pod: PodView) -> PodView | None:
        old = self._pods.get(pod.key)
        if etype == "DELETED":
            self._pods.pop(pod.key, None)
            self._pod_models.pop(pod.key, None)
        else:
            self._pods[pod.key] = pod
        old_node = old.node_name if old is not None else None
        new_node = pod.node_name if etype != "DELETED" else None
        if old_node and old_node != new_node:
            self._pods_by_node[old_node].discard(pod.key)
            if not self._pods_by_node[old_node]:
                del self._pods_by_node[old_node]
        if new_node:
            self._pods_by_node[new_node].add(pod.key)
        # active pods per owner, as the owner's controller counts them (not finished, not being deleted)
        before = _active_owner(old)
        after = _active_owner(pod) if etype != "DELETED" else None
        if before != after:
            if before is not None:
                self._active_by_controller[before] -= 1
                if self._active_by_controller[before] <= 0:
                    del self._active_by_controller[before]
            if after is not None:
                self._active_by_controller[after] += 1
        return old

    def _index_pool(self, etype: EventType, pool: NodePoolView) -> NodePoolView | None:
        old = self._pools.get(pool.name)
        if etype == "DELETED":
            self._pools.pop(pool.name, None)
        else:
            self._pools[pool.name] = pool
        return old

    def _index_node(self, etype: EventType, node: NodeView) -> NodeView | None:
        old = self._nodes.get(node.name)
        if etype == "DELETED":
            self._nodes.pop(node.name, None)
            self._node_models.pop(node.name, None)
        else:
            self._nodes[node.name] = node
        if old is not None and old.provider_id:
            self._node_by_provider_id.pop(old.provider_id, None)
        if node.provider_id and etype != "DELETED":
            self._node_by_provider_id[node.provider_id] = node.name
        return old

    def _index_claim(self, etype: EventType, claim: NodeClaimView) -> NodeClaimView | None:
        old = self._claims.get(claim.name)
        if etype == "DELETED":
            self._claims.pop(claim.name, None)
        else:
            self._claims[claim.name] = claim
        if old is not None and old.provider_id and old.provider_id != claim.provider_id:
            self._drop_claim_pid(old.provider_id, claim.name)
        if claim.provider_id:
            if etype == "DELETED":
                self._drop_claim_pid(claim.provider_id, claim.name)
            else:
                self._claims_by_provider_id[claim.provider_id][claim.name] = None
        return old

    def _drop_claim_pid(self, provider_id: str, name: str) -> None:
        names = self._claims_by_provider_id.get(provider_id)
        if names is not None:
            names.pop(name, None)
            if not names:
                del self._claims_by_provider_id[provider_id]

    async def run(self) -> None:
        await asyncio.gather(*(inf.run() for inf in self.informers.values()))

    async def wait_synced(self) -> None:
        for kind, inf in self.informers.items():
            if kind not in UNSYNCED_KINDS:
                await inf.synced.wait()

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for kind, inf in self.informers.items() if kind not in UNSYNCED_KINDS)

    # --- views -----------------------------------------------------------------------------
    def pod_views(self) -> Iterable[PodView]:
        return self._pods.values()

    def pod_view(self, key: str) -> PodView | None:
        return self._pods.get(key)

    def scheduling_pod(self, pod: PodView) -> Pod:
        """`pod` as the solver's :class:`Pod` (gang markers not read), converted once per
        resourceVersion, with the nodes its volumes allow (`volumes_of`). Raises
        :class:`kubeconv.ConversionError` (a ValueError) like :func:`kubeconv.pod_from_dict`, and
        :class:`kubeconv.Unplannable` for a pending pod no node joiner buys would take (its volumes
        not ready, devices claimed through DRA); a pod that does not convert is not remembered."""
        version = str((pod.raw.get("metadata") or {}).get("resourceVersion") or "")
        hit = self._pod_models.get(pod.key)
        if hit is not None and version and hit[0] == version:
            model = hit[1]
        else:
            model = kubeconv.pod_from_dict(pod.raw, detect_gang=False)
            if version and pod.key in self._pods:
                self._pod_models[pod.key] = (version, model)
        spec = pod.raw.get("spec")
        if type(spec) is dict and not pod.node_name and (why := kubeconv.unplannable(spec)) is not None:
            raise kubeconv.Unplannable(why)
        if type(spec) is dict and kubeconv_volumes.has_claims(spec):
            try:
                return self.volumes_of(model, pod.raw)
            except ValueError:
                if pod.node_name:
                    return model  # bound: it holds its room wherever its volumes are
                raise
        return model

    def volumes_of(self, model: Pod, raw: Mapping[str, Any]) -> Pod:
        """``model`` (converted from ``raw``) narrowed to the nodes its volumes allow, from the cached
        claims, volumes and StorageClasses (:func:`kubeconv_volumes.with_volumes`)."""
        if not all(self.informers[kind].synced.is_set() for kind in VOLUME_KINDS if kind in self.informers):
            raise kubeconv_volumes.VolumeNotReady(
                "joiner has not read the cluster's PersistentVolumeClaims, PersistentVolumes and StorageClasses "
                "(yet: its ClusterRole must let it list and watch them)"
            )
        return kubeconv_volumes.with_volumes(model, raw, self.volume_lookup())

    def volume_lookup(self) -> kubeconv_volumes.VolumeLookup:
        """The cached claims, volumes and StorageClasses."""
        return kubeconv_volumes.Volumes(
            self._store_of(r.PVCS.kind), self._store_of(r.PVS.kind), self._store_of(r.STORAGECLASSES.kind)
        )

    def _store_of(self, kind: str) -> dict[str, Obj]:
        informer = self.informers.get(kind)
        return informer.store if informer is not None else {}

    def scheduling_node(
        self,
        node: NodeView,
        *,
        pods: Iterable[Pod] = (),
        in_flight: bool = False,
        ignore_taint_keys: Iterable[str] = EPHEMERAL_TAINT_KEYS,
    ) -> ExistingNode:
        """`node` as the solver's :class:`ExistingNode` with ``pods`` on it, as
        :func:`kubeconv_nodes.node_from_dict` makes it; the Node itself (labels, allocatable, taints) is
        converted once per resourceVersion. Raises :class:`kubeconv.ConversionError` (a ValueError)."""
        version = str((node.raw.get("metadata") or {}).get("resourceVersion") or "")
        key = (version, in_flight, frozenset(ignore_taint_keys))
        hit = self._node_models.get(node.name)
        if hit is not None and version and hit[0] == key:
            base = hit[1]
        else:
            base = kubeconv_nodes.node_from_dict(node.raw, in_flight=in_flight, ignore_taint_keys=key[2])
            if version and node.name in self._nodes:
                self._node_models[node.name] = (key, base)
        pods = tuple(pods)
        return replace(base, pods=pods) if pods else base

    def node_views(self) -> Mapping[str, NodeView]:
        return self._nodes

    def claim_views(self) -> Mapping[str, NodeClaimView]:
        return self._claims

    def pod_views_on_node(self, node_name: str) -> list[PodView]:
        pods = self._pods
        return [pods[k] for k in sorted(self._pods_by_node.get(node_name, ())) if k in pods]

    def node_view_by_provider_id(self, provider_id: str) -> NodeView | None:
        name = self._node_by_provider_id.get(provider_id)
        return self._nodes.get(name) if name else None

    def node_view_for_claim(self, claim: NodeClaimView) -> NodeView | None:
        """The NodeClaim's Node: the one with its providerID, else the one its status names."""
        if claim.provider_id:
            node = self.node_view_by_provider_id(claim.provider_id)
            if node is not None:
                return node
        return self._nodes.get(claim.node_name) if claim.node_name else None

    def claim_view_for_node(self, node: NodeView) -> NodeClaimView | None:
        """The NodeClaim whose status.providerID is the Node's, or None."""
        if not node.provider_id:
            return None
        for name in self._claims_by_provider_id.get(node.provider_id, ()):
            claim = self._claims.get(name)
            if claim is not None and claim.provider_id == node.provider_id:
                return claim
        return None

    def state_nodes(self) -> list[StateNode]:
        """Every NodeClaim with its Node (if it has one yet), then every Node no NodeClaim owns."""
        out: list[StateNode] = []
        owned: set[str] = set()
        for claim in self._claims.values():
            node = self.node_view_for_claim(claim)
            if node is not None:
                owned.add(node.name)
            out.append(StateNode(node=node, claim=claim))
        out.extend(StateNode(node=node) for name, node in self._nodes.items() if name not in owned)
        return out

    # --- dicts: the kinds without views (Pods, Nodes and NodeClaims are read as views above) -----
    def nodepool_views(self) -> Mapping[str, NodePoolView]:
        """The NodePools, each validated once when its watch event came."""
        return self._pools

    def store(self, kind: str) -> dict[str, Obj]:
        return self.informers[kind].store

    def nodepools(self) -> dict[str, Obj]:
        return self.store("NodePool")

    def nodeclasses(self) -> dict[str, Obj]:
        return self.store("KWOKNodeClass")

    def daemonsets(self) -> Iterable[Obj]:
        return self.store("DaemonSet").values()

    def pdbs(self) -> Iterable[Obj]:
        return self.store("PodDisruptionBudget").values()

    def workload_complete(self, owner: ControllerRef) -> bool | None:
        """Whether the cache holds as many active pods of `owner` (not finished, not being deleted)
        as it wants (:func:`controller.state.workloads.wanted_pods`); None when that cannot be told:
        a kind not watched, or not (yet) in the cache."""
        informer = self.informers.get(owner.kind)
        if informer is None or not informer.synced.is_set():
            return None
        obj = informer.store.get(f"{owner.namespace}/{owner.name}")
        if obj is None or (obj.get("metadata") or {}).get("uid") != owner.uid:
            return None
        wanted = wanted_pods(owner.kind, obj)
        return None if wanted is None else self._active_by_controller.get(owner.uid, 0) >= wanted
