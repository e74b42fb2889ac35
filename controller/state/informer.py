"""List-then-watch caches of one resource kind, surviving watch expiry and apiserver restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, Protocol

import structlog

from controller.clock import Clock
from controller.kube.resources import Resource, key_of
from controller.state.views import Obj

log = structlog.get_logger()
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[EventType, Obj, Obj | None], None]


class GoneLike(Protocol):
    status: int


class Source(Protocol):
    """What an informer needs from the API client (KubeClient satisfies it)."""

    async def list(self, res: Resource) -> Any: ...

    def watch(self, res: Resource, *, resource_version: str, timeout_seconds: int = 300) -> Any: ...


def _slim(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Informer:
    """Keeps `store` equal to the apiserver's view of one resource and calls handlers on change."""

    def __init__(
        self,
        *,
        source: Source,
        resource: Resource,
        clock: Clock,
        handler: Handler,
        watch_timeout_seconds: float = 300.0,
        slim: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self.resource = resource
        self._keep = slim  # what of each object to keep, beyond dropping managedFields
        self._timeout = max(1, round(watch_timeout_seconds))
        self.store: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self._source = source
        self._clock = clock
        self._handler = handler

    def _slim(self, obj: Obj) -> Obj:
        obj = _slim(obj)
        return self._keep(obj) if self._keep is not None else obj

    def _apply(self, etype: EventType, obj: Obj) -> None:
        key = key_of(obj)
        old = self.store.get(key)
        if etype == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        try:
            self._handler(etype, obj, old)
        except Exception:
            log.exception("informer.handler_failed", kind=self.resource.kind, key=key)

    async def _relist(self) -> str:
        result = await self._source.list(self.resource)
        fresh = {key_of(o): self._slim(o) for o in result.items}
        for key in list(self.store):
            if key not in fresh:
                self._apply("DELETED", self.store[key])
        for key, obj in fresh.items():
            old = self.store.get(key)
            if old is None:
                self._apply("ADDED", obj)
            elif old.get("metadata", {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._apply("MODIFIED", obj)
        self.synced.set()
        return str(result.resource_version)

    async def run(self) -> None:
        backoff = 0.5
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._relist()
                    log.debug("informer.listed", kind=self.resource.kind, count=len(self.store))
                async for event in self._source.watch(
                    self.resource, resource_version=rv, timeout_seconds=self._timeout
                ):
                    obj = event.object
                    new_rv = obj.get("metadata", {}).get("resourceVersion")
                    if new_rv:
                        rv = new_rv
                    if event.type != "BOOKMARK":
                        self._apply(event.type, self._slim(obj))
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if getattr(err, "status", None) == 410:
                    log.info("informer.watch_expired", kind=self.resource.kind)
                    rv = ""
                    continue
                log.warning("informer.watch_failed", kind=self.resource.kind, error=str(err), retry_in=backoff)
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                rv = ""
