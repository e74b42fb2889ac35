"""Kubernetes Events on the objects joiner acts on: what `kubectl describe` and `kubectl get events`
show a user. Repeats of the same event fold into one with a count, as the kubelet's recorder does."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Literal

import structlog

from controller.clock import Clock, format_time
from controller.kube.client import ApiError, KubeClient
from controller.kube.resources import EVENTS

log = structlog.get_logger()
Obj = dict[str, Any]
COMPONENT = "joiner"


class EventRecorder:
    def __init__(self, *, client: KubeClient, clock: Clock, cache_size: int = 4096) -> None:
        self._client = client
        self._clock = clock
        self._seen: OrderedDict[str, tuple[str, str, int]] = OrderedDict()  # key -> (ns, name, count)
        self._cache_size = cache_size

    async def emit(self, obj: Obj, *, reason: str, message: str, type: Literal["Normal", "Warning"] = "Normal") -> None:
        """Record an event on `obj`; never raises (an event is not worth failing a reconcile)."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        uid = meta.get("uid", "")
        key = hashlib.sha1(f"{uid}/{meta.get('name')}/{reason}/{message}".encode()).hexdigest()[:16]
        now = format_time(self._clock.now())
        try:
            if key in self._seen:
                ns, name, count = self._seen[key]
                self._seen.move_to_end(key)
                await self._client.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": now}, namespace=ns)
                self._seen[key] = (ns, name, count + 1)
                return
            name = f"{meta.get('name', 'unknown')}.{key}"[:253]
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion"),
                    "kind": obj.get("kind"),
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "uid": uid,
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "reason": reason,
                "message": message[:1024],
                "type": type,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": COMPONENT,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            await self._client.create(EVENTS, event, namespace=namespace)
            self._seen[key] = (namespace, name, 1)
            while len(self._seen) > self._cache_size:
                self._seen.popitem(last=False)
        except ApiError as err:
            if err.status in (404, 409):  # expired or raced: start over next time
                self._seen.pop(key, None)
            log.debug("event.not_recorded", reason=reason, error=str(err))
        except Exception as err:
            log.warning("event.not_recorded", reason=reason, error=str(err))
