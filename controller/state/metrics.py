"""Gauges read from the cluster cache when Prometheus scrapes: what each NodePool uses against its
limits, each node's allocatable and the requests of the pods on it, and the nodes and $/hour by
NodePool and capacity type. Computed at scrape time, so a node or pool that is gone leaves no
stale series behind."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api.v1 import labels as wk
from controller.metrics import REGISTRY, declare
from controller.scheduling.kubeconv import pod_requests
from controller.scheduling.quantity import QuantityError, parse_quantity
from controller.scheduling.resources import Resources
from controller.state.cluster import ClusterState
from controller.state.views import NodeClaimView, NodeView

NODE_LABELS = ("node_name", "nodepool", "capacity_type", "instance_type", "zone", "resource_type")
POOL_LABELS = ("nodepool", "resource_type")

USAGE = declare(
    name="joiner_nodepools_usage",
    type="gauge",
    labels=POOL_LABELS,
    help="Resources the NodePool's NodeClaims hold (their capacity; deleting ones left out), in base units "
    "(cores, bytes, GPUs).",
)
LIMIT = declare(
    name="joiner_nodepools_limit",
    type="gauge",
    labels=POOL_LABELS,
    help="The NodePool's spec.limits, in base units; only the resources it limits.",
)
ALLOCATABLE = declare(
    name="joiner_nodes_allocatable",
    type="gauge",
    labels=NODE_LABELS,
    help="Allocatable resources of each Node a NodePool launched, in base units.",
)
POD_REQUESTS = declare(
    name="joiner_nodes_total_pod_requests",
    type="gauge",
    labels=NODE_LABELS,
    help="Summed requests of the non-daemon, non-terminal pods bound to each Node a NodePool launched.",
)
DAEMON_REQUESTS = declare(
    name="joiner_nodes_total_daemon_requests",
    type="gauge",
    labels=NODE_LABELS,
    help="Summed requests of the DaemonSet pods bound to each Node a NodePool launched.",
)
NODES = declare(
    name="joiner_nodes",
    type="gauge",
    labels=("nodepool", "capacity_type"),
    help="Nodes (registered NodeClaims, deleting ones left out) by NodePool and capacity type.",
)
PRICE = declare(
    name="joiner_nodes_price_per_hour",
    type="gauge",
    labels=("nodepool", "capacity_type"),
    help="Summed planned $/hour (joiner.sh/planned-price) of the launched, not deleting NodeClaims, by NodePool "
    "and capacity type.",
)


def base_units(milli: int) -> float:
    return milli / 1000.0


def _family(spec_name: str, help: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec_name, help, labels=list(labels))


def _limits(pool: dict[str, object]) -> dict[str, int]:
    spec = pool.get("spec")
    raw = spec.get("limits") if isinstance(spec, dict) else None
    out: dict[str, int] = {}
    if isinstance(raw, dict):
        for res, amount in raw.items():
            try:
                out[str(res)] = parse_quantity(amount)
            except QuantityError:
                continue  # validation reports it on the NodePool
    return out


def _capacity(claim: NodeClaimView) -> Resources:
    try:
        return Resources.parse(dict(claim.capacity))
    except (QuantityError, ValueError, TypeError):
        return Resources()


def _price(claim: NodeClaimView) -> float:
    try:
        return float(claim.annotations.get(wk.ANNOTATION_PLANNED_PRICE) or 0.0)
    except ValueError:
        return 0.0


NOT_READY_AGE = declare(
    name="joiner_nodeclaims_not_ready_oldest_age_seconds",
    type="gauge",
    labels=("nodepool",),
    help="Age of the NodePool's oldest NodeClaim that is not Ready yet (deleting ones left out); 0 when all are "
    "Ready. A NodeClaim stuck before Ready shows here long before its lifecycle timeout.",
)


class ClusterCollector(Collector):
    """Serves the cache-derived gauges of one ClusterState (``watch`` it once the cache exists)."""

    def __init__(self) -> None:
        self.cluster: ClusterState | None = None
        # pod key -> (the pod object the requests were computed from, its requests): a pod's
        # requests are parsed again only when the watch delivered a new object for it
        self._requests: dict[str, tuple[dict[str, Any], Resources]] = {}

    def describe(self) -> Iterable[Metric]:
        specs = (USAGE, LIMIT, NODES, PRICE, ALLOCATABLE, POD_REQUESTS, DAEMON_REQUESTS, NOT_READY_AGE)
        return [_family(s.name, s.help, s.labels) for s in specs]

    def collect(self) -> Iterator[Metric]:
        cluster = self.cluster
        if cluster is None:
            return
        yield from self._pools(cluster)
        yield from self._nodes(cluster)

    def _pools(self, cluster: ClusterState) -> Iterator[Metric]:
        usage = _family(USAGE.name, USAGE.help, USAGE.labels)
        limit = _family(LIMIT.name, LIMIT.help, LIMIT.labels)
        nodes = _family(NODES.name, NODES.help, NODES.labels)
        price = _family(PRICE.name, PRICE.help, PRICE.labels)
        not_ready = _family(NOT_READY_AGE.name, NOT_READY_AGE.help, NOT_READY_AGE.labels)
        now = cluster.clock.now()
        oldest: dict[str, float] = {}
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        count: dict[tuple[str, str], int] = defaultdict(int)
        dollars: dict[tuple[str, str], float] = defaultdict(float)
        for claim in cluster.claim_views().values():
            if claim.deletion_timestamp or not claim.nodepool:
                continue
            for res, amount in _capacity(claim).items:
                used[claim.nodepool][res] += amount
            tier = claim.labels.get(wk.LABEL_CAPACITY_TYPE) or ""
            if cluster.node_view_for_claim(claim) is not None:
                count[(claim.nodepool, tier)] += 1
            if claim.is_true("Launched"):
                dollars[(claim.nodepool, tier)] += _price(claim)
            created = claim.created
            if not claim.is_true("Ready") and created is not None:
                age = max(0.0, (now - created).total_seconds())
                oldest[claim.nodepool] = max(age, oldest.get(claim.nodepool, 0.0))
        for name, pool in sorted(cluster.nodepools().items()):
            limits = _limits(pool)
            for res, amount in sorted(limits.items()):
                limit.add_metric([name, res], base_units(amount))
            held = Resources(used.get(name, {}))
            for res in sorted(set(held.names()) | set(limits)):
                usage.add_metric([name, res], base_units(held.get(res)))
            not_ready.add_metric([name], round(oldest.get(name, 0.0), 3))
        for (pool_name, tier), n in sorted(count.items()):
            nodes.add_metric([pool_name, tier], n)
        for (pool_name, tier), spend in sorted(dollars.items()):
            price.add_metric([pool_name, tier], round(spend, 6))
        yield from (usage, limit, nodes, price, not_ready)

    def _nodes(self, cluster: ClusterState) -> Iterator[Metric]:
        allocatable = _family(ALLOCATABLE.name, ALLOCATABLE.help, ALLOCATABLE.labels)
        pods = _family(POD_REQUESTS.name, POD_REQUESTS.help, POD_REQUESTS.labels)
        daemons = _family(DAEMON_REQUESTS.name, DAEMON_REQUESTS.help, DAEMON_REQUESTS.labels)
        seen: set[str] = set()
        for name, node in sorted(cluster.node_views().items()):
            pool = node.labels.get(wk.LABEL_NODEPOOL)
            if not pool:
                continue  # not a node joiner launched
            ident = _node_labels(node, pool)
            try:
                alloc = Resources.parse(dict(node.allocatable))
            except (QuantityError, ValueError, TypeError):
                alloc = Resources()
            requested, daemon = self._node_requests(cluster, name, seen)
            for res in alloc.names():
                allocatable.add_metric([*ident, res], base_units(alloc.get(res)))
            for res in sorted(set(alloc.names()) | set(requested.names())):
                pods.add_metric([*ident, res], base_units(requested.get(res)))
            for res in daemon.names():
                daemons.add_metric([*ident, res], base_units(daemon.get(res)))
        for gone in self._requests.keys() - seen:
            del self._requests[gone]
        yield from (allocatable, pods, daemons)

    def _node_requests(self, cluster: ClusterState, node_name: str, seen: set[str]) -> tuple[Resources, Resources]:
        """(non-daemon, daemon) requests of the live pods on the node."""
        pods: dict[str, int] = defaultdict(int)
        daemons: dict[str, int] = defaultdict(int)
        for pod in cluster.pod_views_on_node(node_name):
            if pod.is_terminal:
                continue
            seen.add(pod.key)
            cached = self._requests.get(pod.key)
            if cached is not None and cached[0] is pod.raw:
                req = cached[1]
            else:
                try:
                    req = pod_requests(pod.raw.get("spec") or {})
                except (QuantityError, ValueError, TypeError):
                    req = Resources()
                self._requests[pod.key] = (pod.raw, req)
            into = daemons if pod.is_daemon else pods
            for res, amount in req.items:
                into[res] += amount
        return Resources(pods), Resources(daemons)


def _node_labels(node: NodeView, pool: str) -> list[str]:
    return [
        node.name,
        pool,
        node.labels.get(wk.LABEL_CAPACITY_TYPE) or "",
        node.labels.get(wk.LABEL_INSTANCE_TYPE) or "",
        node.labels.get(wk.LABEL_ZONE) or "",
    ]


COLLECTOR = ClusterCollector()
REGISTRY.register(COLLECTOR)


def watch(cluster: ClusterState) -> None:
    """Serve the gauges of this cache from now on."""
    COLLECTOR.cluster = cluster
