"""The one conversion from what the cache knows about a machine (a :class:`StateNode`: a Node, its
NodeClaim, or both) to the solver's :class:`ExistingNode`. Pure.

* a Node with an initialized NodeClaim, or a Node joiner does not manage: the Node as it is
  (ephemeral start-up taints left out);
* a Node whose NodeClaim is not initialized yet: in flight, with the NodeClaim's startup taints
  left out too (pods need not tolerate them);
* a NodeClaim without a Node yet: in flight, the capacity it will bring -- its recorded
  allocatable, else the instance type it launched on, else the one its plan chose (so a machine
  created but not launched yet is not bought twice). None when none of these is known.

`cluster_machines` applies it to the whole cache: what the provisioner and gangs are given about
the machines that exist or are coming up.

The solver stays pure and knows nothing of views; this module is the state side of that edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from api.v1.labels import LABEL_INSTANCE_TYPE
from controller.scheduling import kubeconv_nodes
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.labels import EPHEMERAL_TAINT_KEYS
from controller.scheduling.model import ExistingNode, Pod
from controller.state.cluster import ClusterState
from controller.state.views import NodeClaimView, NodeView, StateNode


def _claim_capacity(
    claim: NodeClaimView, *, instance_types: Sequence[InstanceType], pods: Sequence[Pod]
) -> ExistingNode | None:
    node = kubeconv_nodes.nodeclaim_from_dict(claim.raw, instance_types=instance_types, pods=pods)
    planned = claim.planned_instance_type
    if node is None and planned:
        meta = claim.raw.get("metadata") or {}
        labels = {**claim.labels, LABEL_INSTANCE_TYPE: planned}
        node = kubeconv_nodes.nodeclaim_from_dict(
            {**claim.raw, "metadata": {**meta, "labels": labels}}, instance_types=instance_types, pods=pods
        )
    return node


def existing_node(
    machine: StateNode,
    *,
    pods: Sequence[Pod] = (),
    instance_types: Sequence[InstanceType] = (),
    uninitialized_in_flight: bool = True,
    cache: ClusterState | None = None,
) -> ExistingNode | None:
    """`machine` as the solver sees it, with `pods` bound to it.

    ``uninitialized_in_flight=False`` converts a registered Node whose NodeClaim is not initialized
    yet like any other Node (the provisioner's view: its startup taints still count). ``cache``: the
    cluster cache the Node came from, which converts each Node once per resourceVersion.
    Raises :class:`kubeconv.ConversionError` (a ValueError) on a malformed object.
    """
    node, claim = machine.node, machine.claim
    if node is None:
        assert claim is not None
        return _claim_capacity(claim, instance_types=instance_types, pods=pods)
    if claim is not None and uninitialized_in_flight and not claim.initialized:
        startup = {t.key for t in claim.startup_taints if t.key}
        ignore = {*EPHEMERAL_TAINT_KEYS, *startup}
        if cache is not None:
            return cache.scheduling_node(node, pods=pods, in_flight=True, ignore_taint_keys=ignore)
        return kubeconv_nodes.node_from_dict(node.raw, pods=pods, in_flight=True, ignore_taint_keys=ignore)
    if cache is not None:
        return cache.scheduling_node(node, pods=pods)
    return kubeconv_nodes.node_from_dict(node.raw, pods=pods)


def _made_before_seen(cluster: ClusterState, node: NodeView | None) -> bool:
    """Whether ``node``, named like a NodeClaim whose launch the cache does not show yet (no
    providerID), is that NodeClaim's machine: no NodeClaim owns it by providerID. The kwok, gcp and
    azure providers name the machine after its NodeClaim, and its Node's event can come before the
    NodeClaim's status (1.4 s under load); counted twice, the room planned on it looked free."""
    return node is not None and cluster.claim_view_for_node(node) is None


def cluster_machines(
    cluster: ClusterState, instance_types: Sequence[InstanceType], *, extra_claims: Iterable[NodeClaimView] = ()
) -> list[ExistingNode]:
    """Registered Nodes with the (non-terminal) pods bound to them, then NodeClaims without a Node
    yet (not being deleted) as the capacity they will bring. A registered Node counts as it is,
    initialized or not.

    ``extra_claims``: NodeClaims the caller just created that the cache may not show yet.
    Raises :class:`kubeconv.ConversionError` on a malformed Node or pod.
    """
    bound: dict[str, list[Pod]] = {}
    for pod in cluster.pod_views():
        if pod.node_name and not pod.is_terminal:
            bound.setdefault(pod.node_name, []).append(cluster.scheduling_pod(pod))
    out: list[ExistingNode] = []
    for node in cluster.node_views().values():
        machine = StateNode(node=node, claim=cluster.claim_view_for_node(node))
        converted = existing_node(machine, pods=bound.get(node.name, ()), uninitialized_in_flight=False, cache=cluster)
        assert converted is not None  # a Node always converts (or raises)
        out.append(converted)
    cached = cluster.claim_views()
    extra = {c.name: c for c in extra_claims if c.name not in cached}
    nodes = cluster.node_views()
    for claim in [*cached.values(), *extra.values()]:
        if claim.deleting or cluster.node_view_for_claim(claim) is not None:
            continue
        if not claim.provider_id and _made_before_seen(cluster, nodes.get(claim.name)):
            continue  # its Node is above: one machine, counted once
        in_flight = existing_node(StateNode(claim=claim), instance_types=instance_types)
        if in_flight is not None:
            out.append(in_flight)
    return out
