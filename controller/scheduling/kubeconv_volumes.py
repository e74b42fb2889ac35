"""Where a pod's volumes let it run: PersistentVolumeClaims -> node requirements, as kube-scheduler's
VolumeBinding and VolumeZone filters read them. Pure: the claims, volumes and StorageClasses come
from a :class:`VolumeLookup` (the cluster cache, or a ``joiner plan`` scenario).

For each volume of the pod that names a claim (``persistentVolumeClaim``, or a generic
``ephemeral`` volume, whose claim is ``<pod>-<volume>``):

* a claim bound to a PersistentVolume (``spec.volumeName`` and the binder's
  ``pv.kubernetes.io/bind-completed`` annotation) allows the nodes the volume's
  ``nodeAffinity.required`` terms allow, and the zones its zone label names;
* an unbound claim whose StorageClass binds ``WaitForFirstConsumer`` allows the StorageClass's
  ``allowedTopologies`` (none: anywhere; the volume is made where the pod lands);
* an unbound claim that binds at once (``Immediate``, no StorageClass, or a claim the binder has not
  finished), a claim being deleted or lost, or one that names a volume or class that does not
  exist: kube-scheduler places the pod nowhere until that changes, and neither does joiner
  (:class:`VolumeNotReady`, with what it waits for).

Zone keys of storage drivers (``topology.ebs.csi.aws.com/zone``, ``topology.gke.io/zone``,
``topology.disk.csi.azure.com/zone``, the beta zone label) read as ``topology.kubernetes.io/zone``:
the driver labels a new Node with its zone once it registers there. Region keys are left out: a
cluster's nodes are in one region, and its instance types do not carry it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final, Protocol

from controller.scheduling.kubeconv import (
    ConversionError,
    Unplannable,
    _list,
    _meta,
    _node_selector_term,
    _obj,
    _objects,
    _str_map,
)
from controller.scheduling.labels import LABEL_ZONE
from controller.scheduling.model import Pod
from controller.scheduling.requirements import EVERYTHING, Requirement, RequirementError, Requirements

Obj = Mapping[str, Any]

BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
DEFAULT_CLASS: Final = "storageclass.kubernetes.io/is-default-class"
ZONE_KEYS: Final = frozenset(
    {
        LABEL_ZONE,
        "failure-domain.beta.kubernetes.io/zone",
        "topology.ebs.csi.aws.com/zone",
        "topology.gke.io/zone",
        "topology.disk.csi.azure.com/zone",
    }
)
REGION_KEYS: Final = frozenset({"topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"})
MAX_TERMS: Final = 64
"""More alternatives than this (volumes' terms multiplied out) read as none: anywhere the pod's own
terms allow. Real volumes have one term or a few."""


class VolumeNotReady(Unplannable):
    """kube-scheduler cannot place the pod until one of its volumes' objects changes."""


class VolumeLookup(Protocol):
    """Where the claims, volumes and classes come from."""

    def claim(self, namespace: str, name: str) -> Obj | None: ...
    def volume(self, name: str) -> Obj | None: ...
    def storage_class(self, name: str) -> Obj | None: ...
    def default_class(self) -> str | None: ...


class Volumes:
    """A :class:`VolumeLookup` over dicts: claims by ``namespace/name``, volumes and classes by name."""

    def __init__(self, claims: Mapping[str, Obj], volumes: Mapping[str, Obj], classes: Mapping[str, Obj]) -> None:
        self._claims, self._volumes, self._classes = claims, volumes, classes

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self._claims.get(f"{namespace}/{name}")

    def volume(self, name: str) -> Obj | None:
        return self._volumes.get(name)

    def storage_class(self, name: str) -> Obj | None:
        return self._classes.get(name)

    def default_class(self) -> str | None:
        return default_class(self._classes.values())


def default_class(classes: Iterable[Obj]) -> str | None:
    """The StorageClass marked default (the newest if several are, as the apiserver picks), or None."""
    marked = [c for c in classes if str((_meta(c).get("annotations") or {}).get(DEFAULT_CLASS, "")).lower() == "true"]
    if not marked:
        return None
    newest = max(marked, key=lambda c: (str(_meta(c).get("creationTimestamp") or ""), str(_meta(c).get("name") or "")))
    return str(_meta(newest).get("name") or "") or None


def has_claims(spec: Obj) -> bool:
    """Whether any volume of the pod is backed by a PersistentVolumeClaim (cheap: no lookups)."""
    volumes = spec.get("volumes")
    if not volumes or type(volumes) is not list:
        return False
    return any(
        type(v) is dict and (v.get("persistentVolumeClaim") is not None or v.get("ephemeral") is not None)
        for v in volumes
    )


def with_volumes(pod: Pod, obj: Obj, lookup: VolumeLookup) -> Pod:
    """``pod`` (converted from ``obj``) with its node requirements narrowed to where its volumes
    allow it; the same pod when they allow anywhere. Raises :class:`VolumeNotReady` when
    kube-scheduler would place it nowhere now."""
    spec = _obj(obj.get("spec"), "spec")
    if not has_claims(spec):
        return pod
    alternatives = volume_terms(obj, lookup)
    if alternatives is None:
        return pod
    own = pod.node_requirements or (EVERYTHING,)
    merged: list[Requirements] = []
    for mine in own:
        for theirs in alternatives:
            both = mine.intersect(theirs)
            if both.is_satisfiable() and both not in merged:
                merged.append(both)
    if not merged:
        described = " or ".join(str(t) for t in alternatives)
        raise VolumeNotReady(f"its volumes allow only nodes with {described}, which its own node selection rules out")
    return replace(pod, node_requirements=tuple(merged))


def volume_terms(obj: Obj, lookup: VolumeLookup) -> tuple[Requirements, ...] | None:
    """The alternatives (OR) its volumes leave the pod, each volume's ANDed in; None: anywhere."""
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default")
    pod_name = str(meta.get("name") or "")
    spec = _obj(obj.get("spec"), "spec")
    combined: list[Requirements] | None = None
    for i, vol in enumerate(_objects(spec.get("volumes"), "spec.volumes")):
        where = f"spec.volumes[{i}]"
        terms = _claim_terms(vol, where, namespace=namespace, pod_name=pod_name, pod_uid=meta.get("uid"), lookup=lookup)
        if terms is None or any(not t.items for t in terms):
            continue  # this volume allows anywhere
        if combined is None:
            combined = list(terms)
        else:
            combined = [a.intersect(b) for a in combined for b in terms]
            combined = [t for t in combined if t.is_satisfiable()]
            if not combined:
                raise VolumeNotReady("its volumes' node affinities have no node in common")
        if len(combined) > MAX_TERMS:
            return None
    return None if combined is None else tuple(combined)


def _claim_terms(
    vol: Obj, where: str, *, namespace: str, pod_name: str, pod_uid: Any, lookup: VolumeLookup
) -> tuple[Requirements, ...] | None:
    source = vol.get("persistentVolumeClaim")
    ephemeral = vol.get("ephemeral")
    if source is not None:
        name = _obj(source, f"{where}.persistentVolumeClaim").get("claimName")
        if not isinstance(name, str) or not name:
            raise ConversionError(f"{where}.persistentVolumeClaim.claimName: required")
        claim = lookup.claim(namespace, name)
        if claim is None:
            raise VolumeNotReady(f'PersistentVolumeClaim "{name}" not found')
    elif ephemeral is not None:
        name = f"{pod_name}-{vol.get('name')}"
        claim = lookup.claim(namespace, name)
        if claim is None:
            # the ephemeral volume controller makes it in a moment; its class is the template's
            template = _obj(_obj(ephemeral, f"{where}.ephemeral").get("volumeClaimTemplate"), f"{where}.ephemeral")
            tspec = _obj(template.get("spec"), f"{where}.ephemeral.volumeClaimTemplate.spec")
            return _unbound(name, tspec.get("storageClassName"), lookup)
        owners = _objects(_meta(claim).get("ownerReferences"), "metadata.ownerReferences")
        if pod_uid and not any(o.get("uid") == pod_uid and o.get("controller") for o in owners):
            raise VolumeNotReady(f'PersistentVolumeClaim "{name}" was not made for this pod\'s ephemeral volume')
    else:
        return None
    return _claim(name, claim, lookup)


def _claim(name: str, claim: Obj, lookup: VolumeLookup) -> tuple[Requirements, ...] | None:
    meta = _meta(claim)
    if meta.get("deletionTimestamp"):
        raise VolumeNotReady(f'PersistentVolumeClaim "{name}" is being deleted')
    status = _obj(claim.get("status"), "status")
    if status.get("phase") == "Lost":
        raise VolumeNotReady(f'PersistentVolumeClaim "{name}" lost its PersistentVolume')
    spec = _obj(claim.get("spec"), "spec")
    volume_name = spec.get("volumeName")
    if volume_name:
        if BIND_COMPLETED not in (meta.get("annotations") or {}):
            raise VolumeNotReady(
                f'PersistentVolumeClaim "{name}" names PersistentVolume "{volume_name}" but is not bound to it yet'
            )
        volume = lookup.volume(str(volume_name))
        if volume is None:
            raise VolumeNotReady(f'PersistentVolume "{volume_name}" of PersistentVolumeClaim "{name}" not found')
        return volume_requirements(volume)
    return _unbound(name, spec.get("storageClassName"), lookup)


def _unbound(name: str, class_name: Any, lookup: VolumeLookup) -> tuple[Requirements, ...] | None:
    if class_name is None:
        class_name = lookup.default_class()  # what the admission plugin gives a claim it creates
    if not class_name:
        raise VolumeNotReady(
            f'PersistentVolumeClaim "{name}" is not bound and has no StorageClass to make a volume where the pod lands'
        )
    storage_class = lookup.storage_class(str(class_name))
    if storage_class is None:
        raise VolumeNotReady(f'StorageClass "{class_name}" of PersistentVolumeClaim "{name}" not found')
    if storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
        raise VolumeNotReady(
            f'PersistentVolumeClaim "{name}" is not bound, and StorageClass "{class_name}" binds at once '
            "(volumeBindingMode Immediate): the pod is placed once the claim is bound"
        )
    return class_requirements(storage_class)


def volume_requirements(volume: Obj) -> tuple[Requirements, ...] | None:
    """Where a PersistentVolume can be used: its ``nodeAffinity.required`` terms (OR), each with the
    zones of its zone label; None: anywhere."""
    spec = _obj(volume.get("spec"), "spec")
    pv = f'PersistentVolume "{_meta(volume).get("name") or ""}"'
    affinity = _obj(_obj(spec.get("nodeAffinity"), "spec.nodeAffinity").get("required"), "spec.nodeAffinity.required")
    terms: list[Requirements] = []
    for i, term in enumerate(_objects(affinity.get("nodeSelectorTerms"), "nodeSelectorTerms")):
        where = f"{pv} spec.nodeAffinity.required.nodeSelectorTerms[{i}]"
        exprs: list[Obj] = []
        dropped = False
        for expr in _objects(_obj(term, where).get("matchExpressions"), f"{where}.matchExpressions"):
            key = expr.get("key")
            if key in REGION_KEYS:
                dropped = True
            else:
                exprs.append({**expr, "key": LABEL_ZONE} if key in ZONE_KEYS else expr)
        reqs = _node_selector_term({**term, "matchExpressions": exprs}, where)
        if reqs is not None:
            terms.append(reqs)
        elif dropped:
            terms.append(EVERYTHING)  # a region only: the cluster's
        # (an empty term matches no node)
    if affinity.get("nodeSelectorTerms") is not None and not terms:
        raise VolumeNotReady(f"{pv}: its node affinity matches no node")
    zones: set[str] = set()
    for key, value in _str_map(_meta(volume).get("labels"), "metadata.labels").items():
        if key in ZONE_KEYS:
            zones.update(z for z in value.split("__") if z)
    if zones:
        zone = Requirement.in_(LABEL_ZONE, *sorted(zones))
        terms = [t.with_(zone) for t in terms] if terms else [Requirements((zone,))]
    return tuple(terms) if terms else None


def class_requirements(storage_class: Obj) -> tuple[Requirements, ...] | None:
    """A ``WaitForFirstConsumer`` StorageClass's ``allowedTopologies`` (OR); None: anywhere."""
    terms: list[Requirements] = []
    for i, term in enumerate(_objects(storage_class.get("allowedTopologies"), "allowedTopologies")):
        where = f"StorageClass allowedTopologies[{i}].matchLabelExpressions"
        items = []
        for j, expr in enumerate(_objects(_obj(term, where).get("matchLabelExpressions"), where)):
            items.append(_requirement({**expr, "operator": "In"}, f"{where}[{j}]"))
        kept = [r for r in items if r is not None]
        if kept:
            terms.append(Requirements(kept))
    return tuple(terms) if terms else None


def _requirement(expr: Obj, where: str) -> Requirement | None:
    """One node selector requirement with a storage driver's zone key read as the zone; None for a
    region key."""
    expr = _obj(expr, where)
    key = expr.get("key")
    if not isinstance(key, str) or not key:
        raise ConversionError(f"{where}.key: required")
    if key in REGION_KEYS:
        return None
    if key in ZONE_KEYS:
        key = LABEL_ZONE
    values = [str(v) for v in _list(expr.get("values"), f"{where}.values")]
    try:
        return Requirement.new(key, str(expr.get("operator")), values)
    except RequirementError as err:
        raise ConversionError(f"{where}: {err}") from err
