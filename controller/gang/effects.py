"""The gang controller's writes: patches on member pods, NodeClaims and Nodes deleted, the
GangAdmitted condition on pods and NodeClaims, Events on the members, offerings marked
unavailable. Each one does what it is told; what to write is decided in ``attempt.py`` and
``decide.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import structlog

from controller.cloudprovider.types import OfferingId
from controller.context import Context
from controller.gang.decide import GangView
from controller.gang.patches import claim_admitted_patch, pod_condition_patch
from controller.gang.record import Avoided, offering_keys
from controller.kube.client import ApiError, ConflictError, NotFoundError, PatchType
from controller.kube.resources import NODECLAIMS, NODES, PODS
from controller.state.deletion import delete_nodeclaim
from controller.state.views import PodView

if TYPE_CHECKING:
    from controller.state.queue import WorkQueue

log = structlog.get_logger()

EVENT_PODS: Final = 64  # at most this many members get each Event (the log names the gang)


class GangEffects:
    def __init__(self, ctx: Context, queue: WorkQueue) -> None:
        self.ctx = ctx
        self.queue = queue
        self._told: dict[str, tuple[str, str]] = {}

    # --- telling users -----------------------------------------------------------------------

    def news(self, key: str, what: tuple[str, str]) -> bool:
        """Whether ``what`` differs from what was last noted under ``key`` (and note it)."""
        fresh = self._told.get(key) != what
        self._told[key] = what
        return fresh

    def forget(self, key: str) -> None:
        for told in [k for k in self._told if k == key or k.startswith(f"{key}#")]:
            self._told.pop(told, None)

    async def tell(
        self,
        view: GangView,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        pods: Sequence[PodView] | None = None,
        once: bool = True,
    ) -> None:
        """An Event on each member (at most EVENT_PODS); with ``once``, not repeated while unchanged."""
        if once and self._told.get(view.key) == (reason, message):
            return
        self._told[view.key] = (reason, message)
        targets = list(pods if pods is not None else view.gated or view.released)[:EVENT_PODS]
        kind: Literal["Normal", "Warning"] = "Warning" if warning else "Normal"
        await asyncio.gather(*(self.ctx.events.emit(p.raw, reason=reason, message=message, type=kind) for p in targets))

    async def condition(self, pods: Sequence[PodView], *, status: bool, reason: str, message: str) -> None:
        now = self.ctx.clock.now()
        patch = pod_condition_patch(status=status, reason=reason, message=message, now=now)

        async def one(pod: PodView) -> None:
            with contextlib.suppress(ApiError):
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    patch,
                    namespace=pod.namespace,
                    subresource="status",
                    patch_type="strategic",
                )

        await asyncio.gather(*(one(p) for p in pods))

    # --- writes ------------------------------------------------------------------------------

    async def patch_pods(
        self, pods: Sequence[PodView], patch_of: Callable[[PodView], Any], *, patch_type: PatchType = "merge"
    ) -> int:
        """Send each pod its patch, all at once; return how many succeeded."""

        async def one(pod: PodView) -> bool:
            patch = patch_of(pod)
            if patch is None:
                return False
            try:
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    patch,
                    namespace=pod.namespace,
                    patch_type=patch_type,
                )
                return True
            except NotFoundError:
                return False
            except ApiError as err:  # a stale view (test failed) or a rejected change: decide again
                log.info("gang.pod_patch_failed", pod=pod.key, error=str(err))
                return False

        results = await asyncio.gather(*(one(p) for p in pods))
        return sum(1 for r in results if r)

    async def delete_pods(self, pods: Sequence[PodView]) -> None:
        async def delete(pod: PodView) -> None:
            with contextlib.suppress(NotFoundError):
                await self.ctx.client.delete(PODS, pod.name, namespace=pod.namespace)

        await asyncio.gather(*(delete(p) for p in pods))

    async def delete_claims(self, view: GangView, names: Iterable[str], *, reason: str, message: str) -> int:
        async def one(name: str) -> bool:
            claim = view.claims.get(name)
            self.ctx.writer.forget(name)
            if claim is None or claim.deleting:
                return False
            return await delete_nodeclaim(self.ctx, claim, reason=reason, message=message)

        results = await asyncio.gather(*(one(n) for n in names))
        deleted = sum(1 for r in results if r)
        if deleted:
            log.info("gang.nodeclaims_deleted", gang=view.key, reason=reason, count=deleted, message=message)
        return deleted

    async def delete_nodes(self, view: GangView, names: Iterable[str]) -> None:
        async def one(name: str) -> None:
            with contextlib.suppress(NotFoundError, ConflictError):
                await self.ctx.client.delete(NODES, name)

        names = list(names)
        await asyncio.gather(*(one(n) for n in names))
        log.info(
            "gang.nodes_deleted",
            gang=view.key,
            nodes=names,
            reason="the Node carries the gang's label but belongs to none of its NodeClaims",
        )

    async def mark_claims(
        self, view: GangView, names: Iterable[str], *, status: bool, reason: str, message: str
    ) -> None:
        now = self.ctx.clock.now()

        async def one(name: str) -> None:
            claim = view.claims.get(name)
            if claim is None or name not in self.ctx.cluster.claim_views():
                return
            try:
                await self.ctx.client.patch(
                    NODECLAIMS,
                    name,
                    claim_admitted_patch(claim, status=status, reason=reason, message=message, now=now),
                    subresource="status",
                )
            except (ConflictError, NotFoundError):
                self.queue.add_after(view.key, 0.5)
            except ApiError as err:
                log.warning("gang.nodeclaim_mark_failed", nodeclaim=name, error=str(err))

        await asyncio.gather(*(one(n) for n in names))

    def mark_unavailable(self, avoided: Iterable[Avoided]) -> None:
        """Every decider (and the launch) skips these offerings until each one's expiry."""
        unavailable = self.ctx.unavailable
        now = self.ctx.clock.now()
        for entry in avoided:
            if entry.until is None or entry.until <= now:
                continue
            for instance_type, zone, capacity_type in offering_keys([entry.offering]):
                offering = OfferingId(instance_type, zone, capacity_type)
                if not unavailable.is_unavailable(offering):
                    unavailable.mark(offering, ttl_seconds=(entry.until - now).total_seconds())
