"""Gang sizes from PodGroups: the coscheduling plugin's and Volcano's ``spec.minMember``.

Read through the client on demand (PodGroups are not in the watch cache): only when the CRD is
installed, cached for a short while. When the CRD or the PodGroup is missing, the size comes from
the pods' ``joiner.sh/gang-size`` annotation instead.
"""

from __future__ import annotations

from typing import Final

import structlog

from controller.clock import Clock
from controller.gang.markers import GangMarker
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import CRDS, Resource

log = structlog.get_logger()

COSCHEDULING_PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True)
VOLCANO_PODGROUPS: Final = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True)
_BY_SOURCE: Final = {
    "coscheduling": (COSCHEDULING_PODGROUPS, "podgroups.scheduling.x-k8s.io"),
    "volcano": (VOLCANO_PODGROUPS, "podgroups.scheduling.volcano.sh"),
}


class PodGroupSizes:
    def __init__(self, *, client: KubeClient, clock: Clock, ttl_seconds: float = 30.0) -> None:
        self._client = client
        self._clock = clock
        self._ttl = ttl_seconds
        self._crds: dict[str, tuple[float, bool]] = {}
        self._sizes: dict[str, tuple[float, int | None]] = {}

    async def _crd_installed(self, crd: str) -> bool:
        now = self._clock.monotonic()
        cached = self._crds.get(crd)
        if cached is not None and now - cached[0] < self._ttl * 4:
            return cached[1]
        try:
            await self._client.get(CRDS, crd)
            found = True
        except NotFoundError:
            found = False
        except ApiError as err:
            log.debug("gang.podgroup_crd_unreadable", crd=crd, error=str(err))
            found = False
        self._crds[crd] = (now, found)
        return found

    async def min_member(self, marker: GangMarker) -> int | None:
        """The PodGroup's minMember, or None (no such CRD, no such PodGroup, or joiner's own label)."""
        entry = _BY_SOURCE.get(marker.source)
        if entry is None:
            return None
        resource, crd = entry
        now = self._clock.monotonic()
        cached = self._sizes.get(f"{marker.source}:{marker.key}")
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        size: int | None = None
        if await self._crd_installed(crd):
            try:
                obj = await self._client.get(resource, marker.name, namespace=marker.namespace)
                raw = (obj.get("spec") or {}).get("minMember")
                size = int(raw) if raw is not None and int(raw) > 0 else None
            except NotFoundError:
                size = None
            except (ApiError, ValueError, TypeError) as err:
                log.debug("gang.podgroup_unreadable", gang=marker.key, error=str(err))
                size = None
        self._sizes[f"{marker.source}:{marker.key}"] = (now, size)
        return size
