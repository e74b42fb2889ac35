"""The cluster cache: one informer per kind joiner cares about, plus the indexes controllers need
(pods by node, nodes by providerID, NodeClaim <-> Node). Every decision waits for `synced`."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from controller.clock import Clock
from controller.kube import resources as r
from controller.kube.resources import Resource, key_of
from controller.state.informer import EventType, Informer, Source

Obj = dict[str, Any]
Listener = Callable[[EventType, Obj, Obj | None], None]

WATCHED: tuple[Resource, ...] = (
    r.PODS,
    r.NODES,
    r.NODECLAIMS,
    r.NODEPOOLS,
    r.KWOKNODECLASSES,
    r.DAEMONSETS,
    r.PDBS,
)


def condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def condition_true(obj: Obj, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_unschedulable(pod: Obj) -> bool:
    """kube-scheduler tried and could not place it: PodScheduled=False/Unschedulable, not bound yet."""
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp") or is_terminal(pod):
        return False
    cond = condition(pod, "PodScheduled")
    return cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


def awaits_scheduler(pod: Obj) -> bool:
    """kube-scheduler has not tried it yet: not bound, not gated, no PodScheduled condition."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates") or pod["metadata"].get("deletionTimestamp"):
        return False
    return not is_terminal(pod) and condition(pod, "PodScheduled") is None


def is_daemon_pod(pod: Obj) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])


class ClusterState:
    def __init__(self, *, source: Source, clock: Clock, watched: Iterable[Resource] = WATCHED) -> None:
        self.clock = clock
        self._listeners: dict[str, list[Listener]] = defaultdict(list)
        self._pods_by_node: dict[str, set[str]] = defaultdict(set)
        self._node_by_provider_id: dict[str, str] = {}
        self.informers: dict[str, Informer] = {}
        for res in watched:
            self.informers[res.kind] = Informer(
                source=source, resource=res, clock=clock, handler=self._handler_for(res.kind)
            )

    # --- wiring --------------------------------------------------------------------------
    def subscribe(self, kind: str, listener: Listener) -> None:
        """Call `listener(event, obj, old)` on every change of `kind` (after the indexes update).

        Subscribing the same listener again is a no-op, so a controller restarted by the operator's
        supervisor does not get every event twice."""
        if listener not in self._listeners[kind]:
            self._listeners[kind].append(listener)

    def _handler_for(self, kind: str) -> Callable[[EventType, Obj, Obj | None], None]:
        def handle(etype: EventType, obj: Obj, old: Obj | None) -> None:
            if kind == "Pod":
                self._index_pod(etype, obj, old)
            elif kind == "Node":
                self._index_node(etype, obj, old)
            for listener in self._listeners.get(kind, ()):
                listener(etype, obj, old)

        return handle

    def _index_pod(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        key = key_of(obj)
        old_node = ((old or {}).get("spec") or {}).get("nodeName")
        new_node = (obj.get("spec") or {}).get("nodeName") if etype != "DELETED" else None
        if old_node and old_node != new_node:
            self._pods_by_node[old_node].discard(key)
            if not self._pods_by_node[old_node]:
                del self._pods_by_node[old_node]
        if new_node:
            self._pods_by_node[new_node].add(key)

    def _index_node(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        old_pid = ((old or {}).get("spec") or {}).get("providerID")
        if old_pid:
            self._node_by_provider_id.pop(old_pid, None)
        pid = (obj.get("spec") or {}).get("providerID")
        if pid and etype != "DELETED":
            self._node_by_provider_id[pid] = obj["metadata"]["name"]

    async def run(self) -> None:
        await asyncio.gather(*(inf.run() for inf in self.informers.values()))

    async def wait_synced(self) -> None:
        for inf in self.informers.values():
            await inf.synced.wait()

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers.values())

    # --- reads -----------------------------------------------------------------------------
    def store(self, kind: str) -> dict[str, Obj]:
        return self.informers[kind].store

    def pods(self) -> Iterable[Obj]:
        return self.store("Pod").values()

    def nodes(self) -> dict[str, Obj]:
        return self.store("Node")

    def nodeclaims(self) -> dict[str, Obj]:
        return self.store("NodeClaim")

    def nodepools(self) -> dict[str, Obj]:
        return self.store("NodePool")

    def nodeclasses(self) -> dict[str, Obj]:
        return self.store("KWOKNodeClass")

    def daemonsets(self) -> Iterable[Obj]:
        return self.store("DaemonSet").values()

    def pdbs(self) -> Iterable[Obj]:
        return self.store("PodDisruptionBudget").values()

    def pods_on_node(self, node_name: str) -> list[Obj]:
        store = self.store("Pod")
        return [store[k] for k in sorted(self._pods_by_node.get(node_name, ())) if k in store]

    def node_by_provider_id(self, provider_id: str) -> Obj | None:
        name = self._node_by_provider_id.get(provider_id)
        return self.nodes().get(name) if name else None

    def node_for_claim(self, claim: Obj) -> Obj | None:
        status = claim.get("status") or {}
        pid = status.get("providerID")
        if pid:
            node = self.node_by_provider_id(pid)
            if node is not None:
                return node
        name = status.get("nodeName")
        return self.nodes().get(name) if name else None

    def claim_for_node(self, node: Obj) -> Obj | None:
        pid = (node.get("spec") or {}).get("providerID")
        if not pid:
            return None
        for claim in self.nodeclaims().values():
            if (claim.get("status") or {}).get("providerID") == pid:
                return claim
        return None

    def unschedulable_pods(self) -> list[Obj]:
        return [p for p in self.pods() if is_unschedulable(p)]
