"""The solver's inputs, made from the cluster state in one place for every purpose.

Every decider that solves (the provisioner, a gang in a zone, a ProvisioningRequest, a
consolidation what-if, the capacity controller's buffer shapes) reads the same things: the
NodePools that may launch now with the instance types their provider offers them, the machines
of the cluster (in-flight NodeClaims included), the NodePools as the solver sees them (their usage
counted from those machines), the DaemonSets' overhead and the offerings out of capacity. This
module is the one place that reads them:

* :func:`offered_pools` -- the NodePools not being deleted, validated once when their watch event
  came (:class:`~controller.state.views.NodePoolView`), each with its instance types; an invalid
  one, or one whose provider cannot list its types, is left out with a log line.
* :func:`machines` -- the cluster's machines as the solver's ``ExistingNode``.
* :func:`pool_templates` -- NodePools as the solver's ``NodePoolTemplate``
  (:meth:`~controller.state.views.NodePoolView.template` each).
* :func:`daemon_templates` -- the pod every DaemonSet would run on a new node.
* :func:`unavailable_offerings` -- the offerings out of capacity, as the solver's keys.
* :func:`solver_inputs` -- all of them in one :class:`SolverInputs`, over the machines the caller
  chose (every machine for provisioning; the gang's kept ones for a re-plan; the nodes left after
  a consolidation's candidates for a what-if).

The offline ``joiner plan`` has no cache: it builds its templates with
:meth:`~controller.state.views.NodePoolView.template` from the scenario's NodePools, so it plans
exactly as the controller does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

import structlog

from api.v1.labels import TAINT_PLANNED, TAINT_UNREGISTERED
from controller.cloudprovider.types import CloudProviderError
from controller.scheduling import kubeconv
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, NodePoolTemplate, OfferingKey, Pod
from controller.scheduling.requirements import Requirements
from controller.scheduling.taints import Taint, first_untolerated
from controller.state.cluster import ClusterState
from controller.state.existing import cluster_machines
from controller.state.reservations import daemon_pods, excludes
from controller.state.views import NodeClaimView, NodePoolView, Obj

log = structlog.get_logger()


class InstanceTypeSource(Protocol):
    """What the builder needs of a cloud provider: the instance types a NodePool may launch."""

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]: ...


class Offering(Protocol):
    """An offering marked out of capacity (``cloudprovider.types.OfferingId``)."""

    @property
    def instance_type(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def capacity_type(self) -> str: ...


class OfferedPool(NamedTuple):
    """A NodePool that may launch now, with the instance types its provider offers it."""

    view: NodePoolView
    instance_types: tuple[InstanceType, ...]


OfferedPools = dict[str, OfferedPool]


async def offered_pools(
    cluster: ClusterState,
    cloud: InstanceTypeSource,
    *,
    component: str,
    on_invalid: Callable[[NodePoolView], None] | None = None,
    quiet: bool = False,
) -> OfferedPools:
    """The NodePools (by name, sorted) that may launch now, with their instance types.

    ``on_invalid`` is told of every invalid NodePool instead of the ``<component>.nodepool_invalid``
    warning; ``quiet`` logs a provider that cannot list its types at debug level."""
    pools: OfferedPools = {}
    for name, view in sorted(cluster.nodepool_views().items()):
        if view.deleting:
            continue
        if view.invalid is not None:
            if on_invalid is not None:
                on_invalid(view)
            else:
                log.warning(f"{component}.nodepool_invalid", nodepool=name, error=str(view.invalid))
            continue
        try:
            instance_types = tuple(await cloud.instance_types(view.raw))
        except CloudProviderError as err:
            (log.debug if quiet else log.warning)(
                f"{component}.instance_types_unavailable", nodepool=name, error=str(err)
            )
            continue
        pools[name] = OfferedPool(view, instance_types)
    return pools


def all_types(pools: Mapping[str, OfferedPool]) -> dict[str, InstanceType]:
    """Every instance type the pools offer, by name."""
    return {it.name: it for _, its in pools.values() for it in its}


def manifests(pools: Mapping[str, OfferedPool]) -> dict[str, Obj]:
    """The pools' manifests as written, by name (for budgets, limits, spec.gang and status)."""
    return {name: pool.view.raw for name, pool in pools.items()}


def machines(
    cluster: ClusterState, pools: Mapping[str, OfferedPool], *, in_flight: Iterable[NodeClaimView] = ()
) -> list[ExistingNode]:
    """Every machine of the cluster as the solver sees it: registered Nodes with their pods, and
    NodeClaims without a Node yet (``in_flight``: the ones just created that the cache does not show
    yet) as the capacity they will bring; each also holding the pods of the DaemonSets that will run
    there and have none there yet (`with_daemon_pods`)."""
    found = cluster_machines(cluster, list(all_types(pools).values()), extra_claims=in_flight)
    return with_daemon_pods(found, cluster.daemonsets())


def with_daemon_pods(machines: Sequence[ExistingNode], daemonsets: Iterable[Obj]) -> list[ExistingNode]:
    """``machines``, each with the pod of every DaemonSet that will run there and has no pod bound there
    yet: a Node still coming up or a NodeClaim in flight (the DaemonSet controller makes its pods once
    the Node is there), or a Node reserved to its planned pods, which keeps off the DaemonSets that do
    not tolerate the reservation until it ends. The room is theirs: the plan that bought the machine
    left it for them, and another plan must not fill it first (the daemon pod would then stay
    Pending). Judged on the machine's taints other than joiner's own (`joiner.sh/unregistered`,
    `joiner.sh/planned`: they come off), and its labels: all of them on a registered Node, on a
    NodeClaim those it knows (a selector on a label it does not know yet counts as matching)."""
    daemons = daemon_pods(daemonsets)
    if not daemons:
        return list(machines)
    out: list[ExistingNode] = []
    for machine in machines:
        present = {p.owner for p in machine.pods}
        taints = [t for t in machine.taints if t.key not in (TAINT_UNREGISTERED, TAINT_PLANNED)]
        missing = [
            replace(daemon, name=f"{daemon.name}-{machine.name}")
            for uid, daemon in daemons
            if uid not in present and _runs_on(daemon, machine, taints)
        ]
        out.append(replace(machine, pods=(*machine.pods, *missing)) if missing else machine)
    return out


def _runs_on(daemon: Pod, machine: ExistingNode, taints: Sequence[Taint]) -> bool:
    if first_untolerated(daemon.tolerations, taints) is not None:
        return False
    terms = daemon.node_requirements
    if not terms:
        return True
    if not machine.in_flight:
        return any(term.matches(machine.labels) for term in terms)
    known = Requirements.from_labels(machine.labels)
    return not all(excludes(term, known) for term in terms)


def pool_templates(
    pools: Mapping[str, OfferedPool],
    existing: Sequence[ExistingNode],
    *,
    on_error: Callable[[str, ValueError], None],
) -> list[NodePoolTemplate]:
    """The offered NodePools as the solver sees them, each one's usage counted from ``existing``;
    ``on_error(name, err)`` is told of one that does not convert, which is left out."""
    templates: list[NodePoolTemplate] = []
    for name, (view, types) in pools.items():
        try:
            templates.append(view.template(types, existing))
        except ValueError as err:
            on_error(name, err)
    return templates


def daemon_templates(cluster: ClusterState, *, component: str) -> list[Pod]:
    """The pod every DaemonSet would run on a new node (its overhead)."""
    daemons = []
    for ds in cluster.daemonsets():
        try:
            daemons.append(kubeconv.daemonset_from_dict(ds))
        except ValueError as err:
            log.warning(f"{component}.daemonset_unreadable", daemonset=ds["metadata"]["name"], error=str(err))
    return daemons


def unavailable_offerings(marked: Iterable[Offering]) -> frozenset[OfferingKey]:
    """The offerings out of capacity (``UnavailableOfferings.current()``) as the solver's keys."""
    return frozenset((o.instance_type, o.zone, o.capacity_type) for o in marked)


@dataclass(frozen=True, slots=True)
class SolverInputs:
    """What one solve takes besides its pods, read from the cluster state at one moment."""

    pools: OfferedPools  # the NodePools that may launch now, with their instance types
    instance_types: Mapping[str, InstanceType]  # every type they offer, by name
    existing: tuple[ExistingNode, ...]  # the machines the pods may use
    templates: tuple[NodePoolTemplate, ...]  # the NodePools as the solver sees them, usage counted
    daemons: tuple[Pod, ...]  # the DaemonSets' overhead on a new node
    unavailable: frozenset[OfferingKey]  # offerings every decider skips now


def solver_inputs(
    cluster: ClusterState,
    pools: OfferedPools,
    *,
    existing: Sequence[ExistingNode],
    usage_from: Sequence[ExistingNode] | None = None,
    unavailable: Iterable[Offering],
    component: str,
    invalid_event: str = "nodepool_invalid",
) -> SolverInputs:
    """The solver's inputs over ``existing`` (the machines the caller lets the pods use): the pools'
    templates with their usage counted from ``usage_from`` (``existing`` unless given: a gang's
    re-plan uses only its kept machines but every machine counts for the NodePools' limits)."""

    def invalid(name: str, err: ValueError) -> None:
        log.warning(f"{component}.{invalid_event}", nodepool=name, error=str(err))

    counted = existing if usage_from is None else usage_from
    templates = pool_templates(pools, counted, on_error=invalid)
    return SolverInputs(
        pools=pools,
        instance_types=all_types(pools),
        existing=tuple(existing),
        templates=tuple(templates),
        daemons=tuple(daemon_templates(cluster, component=component)),
        unavailable=unavailable_offerings(unavailable),
    )
