"""``joiner plan``: run the solver offline on a scenario file and print what it would buy.

    joiner plan -f scenario.yaml [-f more.yaml] [--catalog catalog.json] [-o table|json|yaml]

A scenario is multi-document YAML (or JSON) holding, in any order:

* ``Pod`` -- pending unless ``spec.nodeName`` is set (then it runs on that Node);
* ``Deployment``, ``StatefulSet``, ``ReplicaSet``, ``Job`` -- expanded into their pending pods;
* ``NodePool`` and ``KWOKNodeClass`` (``joiner.sh/v1``, validated like the apiserver would);
* ``NodeClaim`` (``joiner.sh/v1``) -- in-flight capacity not registered as a Node yet;
* ``Node``, ``DaemonSet``, and ``ConfigMap`` (a KWOKNodeClass's ``spec.catalog``);
* ``PersistentVolumeClaim``, ``PersistentVolume``, ``StorageClass`` -- where pods' volumes let them
  run (without any, pods are planned without their volumes' zones, and a warning says so);
* ``List`` -- any of the above under ``items`` (what ``kubectl get -o yaml`` prints).

Exit status: 0 when a plan was printed (even with unschedulable pods), 1 for bad input (one line
that names the document, the object and the field), 2 for usage errors. Bad input is never
planned around: a negative request, a pod named twice, a key twice in a mapping, a field the kind
does not have, a document nested deeper than 100 levels or workloads that expand to more than
1,000,000 pods are errors. A NodePool's budget and ``limits.nodes`` apply as in the controller.
A NodePool whose NodeClass is not in the scenario is planned with the built-in catalog and a
warning on stderr (the controller would not launch from it until the NodeClass exists). A gang
with fewer pending or running members than its ``joiner.sh/gang-size`` is reported
unschedulable, as the controller waits for the rest before buying anything. See docs/errors.md.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.cloudprovider.catalog import load_catalog, parse_catalog_text
from controller.helptext import for_terminal
from controller.scenario import (
    CATALOG_KEY,
    Located,
    Scenario,
    ScenarioError,
    _name,
    _pod_key,
    load_scenario,
    read_documents,
)
from controller.scheduling import (
    CatalogError,
    ExistingNode,
    Gang,
    InstanceType,
    NodePoolTemplate,
    Plan,
    Pod,
    solve,
)
from controller.scheduling.bounds import apply_bounds, bounds_wanted
from controller.scheduling.kubeconv import (
    ConversionError,
    daemonset_from_dict,
    gang_of,
    is_terminal,
    pod_from_dict,
    unplannable,
)
from controller.scheduling.kubeconv_nodes import node_from_dict, nodeclaim_from_dict
from controller.scheduling.kubeconv_volumes import VolumeNotReady, Volumes, has_claims, with_volumes
from controller.serialization import (
    dump_yaml,
    dumps_json_pretty,
)

Obj = dict[str, Any]


# --- solving ---------------------------------------------------------------------------------


def _catalog_for(
    pool: Mapping[str, Any], sc: Scenario, default: tuple[InstanceType, ...], where: str
) -> tuple[InstanceType, ...]:
    ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    nodeclass = sc.nodeclasses.get(str(ref.get("name"))) if ref.get("kind") == "KWOKNodeClass" else None
    catalog_ref = ((nodeclass or {}).get("spec") or {}).get("catalog")
    if not catalog_ref:
        return default
    cm = sc.configmaps.get(str(catalog_ref))
    if cm is None:
        raise ScenarioError(
            f"{where}: KWOKNodeClass {ref.get('name')!r} spec.catalog refers to ConfigMap {catalog_ref}, "
            "which is not in the scenario"
        )
    text = (cm.get("data") or {}).get(CATALOG_KEY)
    if not isinstance(text, str):
        raise ScenarioError(f"ConfigMap {catalog_ref}: data.{CATALOG_KEY}: required")
    try:
        return parse_catalog_text(text, source=f"ConfigMap {catalog_ref}")
    except CatalogError as err:
        raise ScenarioError(str(err)) from err


@dataclass(frozen=True)
class Inputs:
    pods: tuple[Pod, ...]
    pools: tuple[NodePoolTemplate, ...]
    existing: tuple[ExistingNode, ...]
    daemons: tuple[Pod, ...]
    gangs: tuple[Gang, ...]
    # every gang's unfinished members, bound or not, in scenario order (for its size)
    members: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)
    # pods kube-scheduler would place nowhere until one of their volumes changes, with why
    waiting: Mapping[str, str] = field(default_factory=dict)


def _pod(obj: Obj, sc: Scenario, *, detect_gang: bool = True) -> Pod:
    try:
        return pod_from_dict(obj, detect_gang=detect_gang)
    except ConversionError as err:
        raise ScenarioError(f"{sc.pod_where.get(_pod_key(obj), 'scenario')}: {err}") from err


def _converted(where: str, convert: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return convert(*args, **kwargs)
    except ConversionError as err:
        raise ScenarioError(f"{where}: {err}") from err


def _missing_nodeclasses(sc: Scenario) -> list[str]:
    """Warnings for NodePools whose NodeClass is not in the scenario (planned with the built-in catalog)."""
    out = []
    for where, np_obj in sc.nodepools:
        ref = np_obj["spec"]["template"]["spec"]["nodeClassRef"]
        if ref.get("kind") != "KWOKNodeClass" or (sc.nodeclasses and ref.get("name") not in sc.nodeclasses):
            out.append(
                f"{where}: spec.template.spec.nodeClassRef: {ref.get('kind')} {ref.get('name')!r} is not in the "
                "scenario; planned with the built-in catalog (the controller launches nothing from this pool "
                "until the NodeClass exists)"
            )
    return out


def _short_gangs(sc: Scenario, members: Mapping[str, Sequence[Obj]]) -> dict[str, str]:
    """Gang -> why it waits: fewer members exist than its ``joiner.sh/gang-size`` (the controller waits too)."""
    if not members:
        return {}
    from controller.gang.markers import gang_options  # (only a scenario with gangs needs them)
    from controller.state.views import PodView

    out = {}
    for gid, pods in members.items():
        options = gang_options([PodView.of(p) for p in pods])
        if options.problems:
            raise ScenarioError(f"{sc.pod_where.get(_pod_key(pods[0]), 'scenario')}: gang {gid}: {options.problems[0]}")
        if options.size is not None and len(pods) < options.size:
            out[gid] = (
                f"gang {gid} has {len(pods)} of {options.size} members: joiner waits for every member "
                "before it buys nodes for any"
            )
    return out


def build_inputs(sc: Scenario, catalog: tuple[InstanceType, ...]) -> Inputs:
    pending: list[Pod] = []
    bound: dict[str, list[Pod]] = {}
    # each gang's unbound pods (finished ones too), for its same-zone annotation, and its
    # unfinished pods (bound ones too), for its size
    members: dict[str, list[Obj]] = {}
    unfinished: dict[str, list[Obj]] = {}
    # with no claim, volume or StorageClass in the scenario, pods are planned without their volumes
    volumes = Volumes(sc.claims, sc.volumes, sc.storage_classes)
    waiting: dict[str, str] = {}
    for obj in sc.pods:
        node_name = (obj.get("spec") or {}).get("nodeName")
        terminal = is_terminal(obj)
        if terminal or node_name:
            gid = _converted(sc.pod_where.get(_pod_key(obj), "scenario"), gang_of, obj)
            if terminal:
                if gid is not None and not node_name:
                    members.setdefault(gid, []).append(obj)
                continue
            if gid is not None:
                unfinished.setdefault(gid, []).append(obj)
            bound.setdefault(str(node_name), []).append(_pod(obj, sc, detect_gang=False))
        else:
            pod = _pod(obj, sc)
            why = unplannable(obj.get("spec") or {})
            if why is not None:
                waiting[pod.key] = f"joiner cannot provision this pod: {why}"
                continue
            if (sc.claims or sc.volumes or sc.storage_classes) and has_claims(obj.get("spec") or {}):
                try:
                    pod = with_volumes(pod, obj, volumes)
                except VolumeNotReady as err:
                    waiting[pod.key] = f"joiner cannot provision this pod: {err}"
                    continue
                except ConversionError as err:
                    raise ScenarioError(f"{sc.pod_where.get(_pod_key(obj), 'scenario')}: {err}") from err
            pending.append(pod)
            if pod.gang is not None:
                members.setdefault(pod.gang, []).append(obj)
                unfinished.setdefault(pod.gang, []).append(obj)
    existing = [_converted(f"Node {_name(n)!r}", node_from_dict, n, pods=bound.pop(_name(n), [])) for n in sc.nodes]
    if bound:
        missing = ", ".join(sorted(bound))
        raise ScenarioError(f"pods are bound (spec.nodeName) to nodes not in the scenario: {missing}")
    default_types = catalog
    for claim in sc.nodeclaims:
        in_flight = _converted(f"NodeClaim {_name(claim)!r}", nodeclaim_from_dict, claim, instance_types=default_types)
        if in_flight is not None and not any(e.name == in_flight.name for e in existing):
            existing.append(in_flight)
    # the NodePools as the controller makes them (state/inputs.py): validated once into their view,
    # usage counted from the scenario's machines
    from controller.state.nodepool_view import NodePoolView  # (without the other views)

    pools = [
        _converted(where, NodePoolView.of(dict(np_obj)).template, _catalog_for(np_obj, sc, catalog, where), existing)
        for where, np_obj in sc.nodepools
    ]
    daemons = [_converted(f"DaemonSet {_name(d)!r}", daemonset_from_dict, d) for d in sc.daemonsets]
    # as the controller does: a gang's nodes share one zone unless the gang's annotation or
    # every NodePool's spec.gang.sameZone says otherwise
    pools_spread = bool(sc.nodepools) and all(
        ((np_obj.get("spec") or {}).get("gang") or {}).get("sameZone") is False for _, np_obj in sc.nodepools
    )
    gangs = tuple(
        Gang(g, same_zone=_same_zone(members.get(g, []), default=not pools_spread))
        for g in sorted({p.gang for p in pending if p.gang is not None})
    )
    return Inputs(
        tuple(pending),
        tuple(pools),
        tuple(existing),
        tuple(daemons),
        gangs,
        {gid: tuple(objs) for gid, objs in unfinished.items()},
        waiting,
    )


def _same_zone(pods: list[Obj], *, default: bool) -> bool:
    from controller.gang.markers import ANNOTATION_GANG_SAME_ZONE  # (only a scenario with gangs needs them)

    for obj in sorted(pods, key=_name):
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GANG_SAME_ZONE)
        if raw is not None and str(raw).strip().lower() in ("true", "false"):
            return str(raw).strip().lower() == "true"
    return default


def _bounded(plan: Plan, sc: Scenario, pools: Sequence[NodePoolTemplate]) -> Plan:
    """The plan cut to each pool's $/hour budget and ``limits.nodes``, as the provisioner cuts it,
    counting the scenario's NodeClaims as what the pools hold."""
    pools_by_name = {_name(obj): obj for _, obj in sc.nodepools}
    if not plan.new_nodes or not bounds_wanted(pools_by_name):
        return plan
    from controller.state.spend import pool_bounds  # (only a plan that buys within bounds needs the views)
    from controller.state.views import NodeClaimView

    types = {it.name: it for pool in pools for it in pool.instance_types}
    claims = [NodeClaimView.of(claim) for claim in sc.nodeclaims]
    bounds = pool_bounds(pools_by_name, claims, types)
    return apply_bounds(plan, bounds).plan


def plan_scenario(
    texts: Iterable[tuple[str, str]], *, catalog: tuple[InstanceType, ...], warnings: list[str] | None = None
) -> Plan:
    """The plan for a scenario; ``warnings`` (if given) receives what the user should know."""
    located: Located = {}
    sc = load_scenario(read_documents(texts, located=located), located=located)
    inputs = build_inputs(sc, catalog)
    if warnings is not None:
        warnings.extend(_missing_nodeclasses(sc))
        if not (sc.claims or sc.volumes or sc.storage_classes) and any(
            has_claims(o.get("spec") or {}) for o in sc.pods
        ):
            warnings.append(
                "pods use PersistentVolumeClaims, but the scenario has no PersistentVolumeClaim, PersistentVolume "
                "or StorageClass: they are planned without the zones their volumes allow (add them: kubectl get "
                "pvc,pv,storageclass -A -o yaml)"
            )
    waiting = _short_gangs(sc, inputs.members)
    pods = tuple(p for p in inputs.pods if p.gang not in waiting)
    plan = solve(
        pods=pods,
        node_pools=inputs.pools,
        existing_nodes=inputs.existing,
        daemon_pods=inputs.daemons,
        gangs=tuple(g for g in inputs.gangs if g.id not in waiting),
    )
    plan = _bounded(plan, sc, inputs.pools)
    if not waiting and not inputs.waiting:
        return plan
    held = {f"{p.namespace}/{p.name}": waiting[p.gang] for p in inputs.pods if p.gang in waiting}
    return replace(plan, unschedulable={**plan.unschedulable, **held, **inputs.waiting})


# --- output ----------------------------------------------------------------------------------


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON form: ``nodeClaims``, ``existingNodes``, ``unschedulable``, ``totalPrice``."""
    # nodes share their candidate tuples (up to one per catalog instance type): named once each,
    # and each node gets its own list of the names
    names: dict[int, tuple[tuple[Any, ...], list[str]]] = {}

    def type_names(candidates: tuple[Any, ...]) -> list[str]:
        got = names.get(id(candidates))
        if got is None or got[0] is not candidates:
            got = names[id(candidates)] = (candidates, [c.instance_type for c in candidates])
        return list(got[1])

    return {
        "nodeClaims": [
            {
                "name": n.name,
                "nodePool": n.node_pool,
                "instanceType": n.choice.instance_type,
                "instanceTypes": type_names(n.candidates),
                "zone": n.choice.zone,
                "capacityType": n.choice.capacity_type,
                "price": round(n.choice.price, 6),
                "pods": list(n.pods),
                "gang": n.gang,
                "requests": n.requests.to_quantities(),
                "requirements": n.requirements.to_expressions(),
            }
            for n in plan.new_nodes
        ],
        "existingNodes": [{"node": name, "pods": list(pods)} for name, pods in plan.existing_placements.items()],
        "unschedulable": [{"pod": pod, "reason": reason} for pod, reason in plan.unschedulable.items()],
        "totalPrice": round(plan.total_price, 6),
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def plan_to_table(plan: Plan) -> str:
    out: list[str] = []
    if plan.new_nodes:
        rows = [["NODECLAIM", "NODEPOOL", "INSTANCE-TYPE", "ZONE", "CAPACITY", "$/H", "PODS", "GANG", "FALLBACKS"]]
        for n in plan.new_nodes:
            rows.append(
                [
                    n.name,
                    n.node_pool,
                    n.choice.instance_type,
                    n.choice.zone,
                    n.choice.capacity_type,
                    f"{n.choice.price:.4f}",
                    str(len(n.pods)),
                    n.gang or "-",
                    str(len(n.candidates) - 1),
                ]
            )
        out.append(_table(rows))
    else:
        out.append("No new nodes.")
    if plan.existing_placements:
        rows = [["EXISTING-NODE", "PODS", "NEW-PODS"]]
        for name, pods in plan.existing_placements.items():
            shown = ", ".join(pods[:3]) + (f", ... ({len(pods)})" if len(pods) > 3 else "")
            rows.append([name, str(len(pods)), shown])
        out.append(_table(rows))
    if plan.unschedulable:
        rows = [["UNSCHEDULABLE-POD", "REASON"]]
        rows.extend([pod, reason] for pod, reason in plan.unschedulable.items())
        out.append(_table(rows))
    placed = sum(len(n.pods) for n in plan.new_nodes)
    out.append(
        f"Total: {len(plan.new_nodes)} new nodes for {placed} pods, "
        f"{sum(len(p) for p in plan.existing_placements.values())} pods on existing nodes, "
        f"{len(plan.unschedulable)} unschedulable, ${plan.total_price:.4f}/h"
    )
    return "\n\n".join(out)


# --- command ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``joiner plan``."""
    p = subparsers.add_parser(
        "plan",
        help="show what joiner would buy for a scenario (the solver, offline)",
        description=for_terminal(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f", "--filename", action="append", required=True, metavar="FILE", help="scenario YAML/JSON; '-' for stdin"
    )
    p.add_argument("--catalog", metavar="FILE", help="instance catalog JSON (default: the built-in KWOK catalog)")
    p.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help="output format (default: table)"
    )
    p.set_defaults(handler=run)


def _read(name: str) -> tuple[str, str]:
    source = "<stdin>" if name == "-" else name
    try:
        if name == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            return (source, buffer.read().decode("utf-8") if buffer is not None else sys.stdin.read())
        return (source, Path(name).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ScenarioError(
            f"{source}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})"
        ) from err


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


@dataclass(frozen=True)
class Outcome:
    """What ``joiner plan`` prints and returns: the exit status, stdout and stderr."""

    code: int
    out: str
    err: str
    plan: Plan | None = None


def execute(
    texts: Sequence[tuple[str, str]],
    *,
    catalog: tuple[InstanceType, ...] | None = None,
    catalog_text: str | None = None,
    output: str = "table",
) -> Outcome:
    """``joiner plan`` in process: scenario texts (and a catalog, given or as JSON text) in, what it
    prints out. Bad input gives ``code`` 1 and one ``error:`` line, never an exception."""
    warnings: list[str] = []
    try:
        if catalog is None:
            catalog = parse_catalog_text(catalog_text, source="catalog") if catalog_text is not None else load_catalog()
        plan = plan_scenario(texts, catalog=catalog, warnings=warnings)
    except (ScenarioError, CatalogError, OSError) as error:
        return Outcome(1, "", f"error: {_one_line(error)}\n")
    told = "".join(f"warning: {_one_line(Exception(w))}\n" for w in warnings)
    if output == "json":
        out = dumps_json_pretty(plan_to_dict(plan)) + "\n"
    elif output == "yaml":
        out = dump_yaml(plan_to_dict(plan), sort_keys=False)
    else:
        out = plan_to_table(plan) + "\n"
    return Outcome(0, out, told, plan)


def run(args: argparse.Namespace) -> int:
    # a short-lived process that builds many objects (the catalog's too) and frees them by
    # reference count: the cyclic collector would only re-scan them (about a tenth of the whole
    # command's time)
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            catalog = load_catalog(args.catalog)
            texts = [_read(name) for name in args.filename]
        except (ScenarioError, CatalogError, OSError) as err:
            print(f"error: {_one_line(err)}", file=sys.stderr)
            return 1
        outcome = execute(texts, catalog=catalog, output=args.output)
    finally:
        if collecting:
            gc.enable()
    sys.stderr.write(outcome.err)
    sys.stdout.write(outcome.out)
    return outcome.code
