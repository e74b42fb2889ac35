"""What makes a node off-limits to voluntary disruption. Pure: views in, sentences out.

A node is not disrupted (for any reason: emptiness, consolidation, drift, expiry) while:

* the Node or its NodeClaim is annotated ``joiner.sh/do-not-disrupt: "true"`` (or Karpenter's
  ``karpenter.sh/do-not-disrupt``);
* one of its pods is annotated so;
* one of its pods is covered by a PodDisruptionBudget that allows no disruption right now
  (``status.disruptionsAllowed`` is 0, or the PDB controller has not computed it yet);
* it runs pods of a gang, or its NodeClaim belongs to a gang that is being admitted or running
  (``GangAdmitted`` absent or True; False means the gang finished): taking one node out of a
  running gang stops the whole gang.

Consolidation (moving pods to save money) is further refused for nodes running pods that no
controller would re-create (no ownerReferences): evicting them would delete them for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from api.v1.conditions import GANG_ADMITTED
from api.v1.labels import ANNOTATION_DO_NOT_DISRUPT, ANNOTATION_IDLE_GPU_RECLAIM, LABEL_GANG
from controller.scheduling.kubeconv import gang_of
from controller.scheduling.requirements import RequirementError, Requirements, label_selector
from controller.state.views import NodeClaimView, NodeView, PodView

PDB = Mapping[str, Any]  # PodDisruptionBudgets are read here only, straight from the cache's dicts

DO_NOT_DISRUPT_ANNOTATIONS: Final = (ANNOTATION_DO_NOT_DISRUPT, "karpenter.sh/do-not-disrupt")


def do_not_disrupt(obj: PodView | NodeView | NodeClaimView) -> bool:
    """Whether a pod, Node or NodeClaim carries ``do-not-disrupt: "true"`` (joiner's or Karpenter's key)."""
    return any(str(obj.annotations.get(key, "")).lower() == "true" for key in DO_NOT_DISRUPT_ANNOTATIONS)


def is_leaving(pod: PodView) -> bool:
    """Being deleted, or finished: it needs no new place."""
    return pod.deleting or pod.is_terminal


def movable(pods: Iterable[PodView]) -> list[PodView]:
    """The pods that disrupting their node would evict (what termination drains), minus those leaving."""
    return [p for p in pods if p.is_drainable and not is_leaving(p)]


def _pdb_selector(pdb: PDB) -> Requirements | None:
    """The PDB's selector; None matches no pod (a null selector), an empty one every pod of the namespace."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return None
    try:
        return label_selector(selector.get("matchLabels"), selector.get("matchExpressions") or ())
    except (RequirementError, KeyError, TypeError):
        return None


def _pdb_meta(pdb: PDB) -> Mapping[str, Any]:
    meta = pdb.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def pdb_allowed(pdb: PDB) -> int:
    """Disruptions the PDB allows now; 0 while its status is missing or stale."""
    status = pdb.get("status") or {}
    generation = _pdb_meta(pdb).get("generation")
    observed = status.get("observedGeneration")
    stale = generation is not None and observed is not None and observed < generation
    if "disruptionsAllowed" not in status or stale:
        return 0
    try:
        return int(status["disruptionsAllowed"])
    except (TypeError, ValueError):
        return 0


def blocking_pdbs(pods: Iterable[PodView], pdbs: Iterable[PDB]) -> list[str]:
    """``pod (by PodDisruptionBudget ns/name)`` for every movable pod whose eviction a PDB forbids now."""
    by_namespace: dict[str, list[tuple[PDB, Requirements]]] = {}
    for pdb in pdbs:
        selector = _pdb_selector(pdb)
        if selector is None:
            continue
        ns = str(_pdb_meta(pdb).get("namespace") or "default")
        by_namespace.setdefault(ns, []).append((pdb, selector))
    out: list[str] = []
    for pod in movable(pods):
        for pdb, selector in by_namespace.get(pod.namespace, ()):
            if selector.matches(pod.labels) and pdb_allowed(pdb) <= 0:
                out.append(f"{pod.key} (PodDisruptionBudget {pod.namespace}/{_pdb_meta(pdb).get('name')})")
                break
    return out


def gang_blocker(*, claim: NodeClaimView, node: NodeView | None, pods: Iterable[PodView]) -> str | None:
    """Why the node belongs to a gang that must not be taken apart, or None."""
    for pod in pods:
        if is_leaving(pod):
            continue
        gang = gang_of(pod.raw)
        if gang is not None:
            return f"it runs pod {pod.key} of gang {gang}; disrupting it would stop the whole gang"
    gang_label = claim.labels.get(LABEL_GANG)
    if not gang_label and node is not None:
        gang_label = node.labels.get(LABEL_GANG)
    if gang_label:
        admitted = claim.condition(GANG_ADMITTED)
        if admitted is None:
            return f"it belongs to gang {gang_label}, which is still being admitted"
        if admitted.is_true:
            return f"it belongs to gang {gang_label}, which is running"
    return None  # GangAdmitted=False: the gang finished, the node is an ordinary one now


def safety_blockers(
    *, claim: NodeClaimView, node: NodeView | None, pods: Iterable[PodView], pdbs: Iterable[PDB]
) -> list[str]:
    """Every reason the node may not be disrupted voluntarily right now (empty: it may)."""
    pods = list(pods)
    out: list[str] = []
    if do_not_disrupt(claim):
        out.append(f"NodeClaim is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    if node is not None and do_not_disrupt(node):
        out.append(f"Node is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    protected = [p.key for p in pods if not is_leaving(p) and do_not_disrupt(p)]
    if protected:
        shown = ", ".join(protected[:3]) + (" ..." if len(protected) > 3 else "")
        out.append(f"pod {shown} is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    pdb = blocking_pdbs(pods, pdbs)
    if pdb:
        shown = ", ".join(pdb[:3]) + (" ..." if len(pdb) > 3 else "")
        out.append(f"eviction of {shown} is not allowed by its PodDisruptionBudget right now")
    gang = gang_blocker(claim=claim, node=node, pods=pods)
    if gang is not None:
        out.append(gang)
    return out


def idle_gpu_reclaimable(pods: Iterable[PodView]) -> list[str]:
    """Movable pods no controller owns that opted in to be evicted for good from a node whose GPUs
    are idle (``joiner.sh/idle-gpu-reclaim: "true"``)."""
    return [
        p.key
        for p in movable(pods)
        if not p.owner_kinds and p.annotations.get(ANNOTATION_IDLE_GPU_RECLAIM, "").lower() == "true"
    ]


def unowned_pods(pods: Iterable[PodView]) -> list[str]:
    """Movable pods no controller owns: evicting them deletes them for good."""
    return [p.key for p in movable(pods) if not p.owner_kinds]
