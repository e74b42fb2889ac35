"""How many pods a workload's controller still has to make: whether a burst is all in.

A Deployment of 1,000 replicas reaches the cluster as 1,000 pods over a few seconds: the ReplicaSet
controller creates them in steps (1, 2, 4, ... pods, each step once it has seen the last), and the
steps come farther apart the busier the apiserver. One plan for the whole burst buys fewer, better
packed Nodes than one per step, so the provisioner's batch waits while a burst is still arriving.
Without knowing the burst's size it can only wait for a quiet gap (``ARRIVAL_GAP_SECONDS`` in the
provisioner). Its owner knows the size: a ReplicaSet wants ``spec.replicas`` pods, a Job
``min(parallelism, completions - succeeded)`` while not suspended, a StatefulSet ``spec.replicas``.
Once the cache holds that many of the owner's active pods (not finished, not being deleted: what
the owner's controller counts), the burst is in.

Pure: the objects are passed in. The informers of these kinds keep only what is read here
(:func:`slim`): their pod templates can be large and are never needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from controller.kube.resources import JOBS, REPLICASETS, STATEFULSETS, Resource

Obj = dict[str, Any]

# the kinds whose pods' bursts the provisioner can count (a pod's controller ownerReference)
WORKLOADS: Final[tuple[Resource, ...]] = (REPLICASETS, STATEFULSETS, JOBS)
WORKLOAD_KINDS: Final[frozenset[str]] = frozenset(r.kind for r in WORKLOADS)


def _count(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not a count: {value!r}")
    return max(0, value)


def wanted_pods(kind: str, obj: Mapping[str, Any]) -> int | None:
    """How many active pods `obj` (a `kind`) wants now; None when that cannot be told (another kind,
    or a field the API would not accept)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    try:
        if kind in ("ReplicaSet", "StatefulSet"):
            return _count(spec.get("replicas"), 1)
        if kind == "Job":
            if spec.get("suspend"):
                return 0
            parallelism = _count(spec.get("parallelism"), 1)
            succeeded = _count(status.get("succeeded"), 0)
            completions = spec.get("completions")
            if completions is None:
                # a Job without completions is done once any pod succeeded, and makes no more
                return 0 if succeeded else parallelism
            return min(parallelism, max(0, _count(completions, 1) - succeeded))
    except ValueError:
        return None
    return None


def slim(obj: Obj) -> Obj:
    """What of a workload the cache keeps: its metadata, the counts in its spec and its status."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        obj["spec"] = {k: spec[k] for k in ("replicas", "parallelism", "completions", "suspend") if k in spec}
    status = obj.get("status")
    if isinstance(status, dict):
        obj["status"] = {k: status[k] for k in ("succeeded",) if k in status}
    return obj
