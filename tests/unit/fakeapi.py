"""An in-memory apiserver behind the `KubeClient` seam, for controller tests without a cluster.

It keeps what the controllers rely on: resourceVersions (and merge-patch preconditions on them),
uids (and delete preconditions), creationTimestamp/deletionTimestamp from the test's clock,
finalizers (delete marks, the last finalizer's removal deletes), JSON patch with `test`, merge
patch, the status subresource, watches (with replay from a resourceVersion; `lag()` holds a
resource's watch events back until `catch_up()`, as a slow watch would), and the Eviction API
(pods listed in `blocked_evictions` answer 429, as a PodDisruptionBudget would).
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

from controller.clock import Clock, format_time
from controller.kube.client import (
    ConflictError,
    InvalidError,
    KubeClient,
    ListResult,
    NotFoundError,
    PatchType,
    TooManyRequestsError,
    WatchEvent,
)
from controller.kube.resources import EVENTS, PODS, Resource

Obj = dict[str, Any]


class _TestFailed(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise _TestFailed(f"bad pointer {pointer!r}")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, list):
            cur = cur[int(tok)]
        elif isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        else:
            raise _TestFailed(f"path {'/'.join(tokens)} does not exist")
    return cur


def apply_json_patch(doc: Obj, ops: list[Obj]) -> Obj:
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = _split(op["path"])
        parent = _parent(out, tokens)
        last = tokens[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last, _TestFailed)
            if current != op["value"]:
                raise _TestFailed(f"test failed at {op['path']}")
        elif kind == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op["value"])
            elif last not in parent:
                raise _TestFailed(f"replace: {op['path']} does not exist")
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise _TestFailed(f"remove: {op['path']} does not exist")
        else:
            raise _TestFailed(f"unsupported op {kind}")
    return out


def apply_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


class FakeKube(KubeClient):
    def __init__(self, *, clock: Clock) -> None:  # no ApiClient: nothing goes over the wire
        self._clock = clock
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self.store: dict[str, dict[str, Obj]] = defaultdict(dict)
        self._history: dict[str, builtins.list[tuple[int, WatchEvent]]] = defaultdict(list)
        self._watchers: dict[str, builtins.list[asyncio.Queue[WatchEvent]]] = defaultdict(list)
        self.blocked_evictions: set[tuple[str, str]] = set()
        self.graceful_pod_deletion = False
        self._stopping_pods: set[str] = set()  # deleted with a grace period: the "kubelet" removes them
        self.calls: builtins.list[tuple[str, str, str]] = []
        self.on_call: Callable[[str, str, str], None] | None = None
        self._held: dict[str, builtins.list[WatchEvent]] = {}  # plural -> events its watchers do not see yet

    # --- plumbing ----------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return "fake"

    async def close(self) -> None:
        return None

    @staticmethod
    def _key(res: Resource, name: str, namespace: str | None) -> str:
        return f"{namespace or 'default'}/{name}" if res.namespaced else name

    def _record(self, verb: str, res: Resource, name: str) -> None:
        self.calls.append((verb, res.plural, name))
        if self.on_call is not None:
            self.on_call(verb, res.plural, name)

    def _emit(self, res: Resource, etype: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        event = WatchEvent(type=etype, object=copy.deepcopy(obj))  # type: ignore[arg-type]
        self._history[res.plural].append((rv, event))
        if res.plural in self._held:
            self._held[res.plural].append(event)
            return
        for queue in self._watchers[res.plural]:
            queue.put_nowait(event)

    def lag(self, res: Resource) -> None:
        """Writes to ``res`` take effect, but its watchers (the cache) do not hear of them until ``catch_up``."""
        self._held.setdefault(res.plural, [])

    def catch_up(self, res: Resource) -> None:
        for event in self._held.pop(res.plural, []):
            for queue in self._watchers[res.plural]:
                queue.put_nowait(event)

    def _bump(self, obj: Obj) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def _get(self, res: Resource, name: str, namespace: str | None) -> Obj:
        obj = self.store[res.plural].get(self._key(res, name, namespace))
        if obj is None:
            raise NotFoundError(404, "NotFound", f'{res.plural} "{name}" not found')
        return obj

    def _commit(self, res: Resource, key: str, obj: Obj) -> Obj:
        """Store a modified object; finish its deletion when its last finalizer went."""
        meta = obj["metadata"]
        self._bump(obj)
        stopping = res is PODS and key in self._stopping_pods
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not stopping:
            self.store[res.plural].pop(key, None)
            self._emit(res, "DELETED", obj)
        else:
            self.store[res.plural][key] = obj
            self._emit(res, "MODIFIED", obj)
        return copy.deepcopy(obj)

    # --- reads -------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, *, namespace: str | None = None) -> Obj:
        self._record("get", res, name)
        return copy.deepcopy(self._get(res, name, namespace))

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ListResult:
        items = []
        for obj in self.store[res.plural].values():
            item = copy.deepcopy(obj)
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
            items.append(item)
        return ListResult(items=items, resource_version=str(next(self._rv)))

    async def watch(
        self, res: Resource, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[WatchEvent]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        start = int(resource_version or 0)
        for rv, event in self._history[res.plural]:
            if rv > start:
                queue.put_nowait(event)
        self._watchers[res.plural].append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._watchers[res.plural].remove(queue)

    # --- writes ------------------------------------------------------------------------------

    async def create(self, res: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uid):05d}"
        ns = namespace or meta.get("namespace")
        if res.namespaced:
            meta["namespace"] = ns or "default"
        key = self._key(res, meta["name"], ns)
        self._record("create", res, meta["name"])
        if key in self.store[res.plural]:
            raise ConflictError(409, "AlreadyExists", f'{res.plural} "{meta["name"]}" already exists')
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        meta["uid"] = f"uid-{next(self._uid)}"
        meta["creationTimestamp"] = format_time(self._clock.now())
        meta.setdefault("generation", 1)
        self._bump(obj)
        self.store[res.plural][key] = obj
        self._emit(res, "ADDED", obj)
        return copy.deepcopy(obj)

    async def replace(self, res: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        current = self._get(res, meta["name"], meta.get("namespace"))
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ConflictError(409, "Conflict", "the object has been modified")
        return self._commit(res, self._key(res, meta["name"], meta.get("namespace")), copy.deepcopy(obj))

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
    ) -> Obj:
        self._record(f"patch{'/' + subresource if subresource else ''}", res, name)
        current = self._get(res, name, namespace)
        if patch_type == "json":
            try:
                updated = apply_json_patch(current, patch)
            except (_TestFailed, IndexError, KeyError, ValueError) as err:
                raise InvalidError(422, "Invalid", f"the JSON patch could not be applied: {err}") from None
        else:
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != current["metadata"]["resourceVersion"]:
                raise ConflictError(409, "Conflict", "the object has been modified; please apply your changes")
            updated = apply_merge_patch(current, patch)
        if subresource == "status":  # only status changes
            merged = copy.deepcopy(current)
            merged["status"] = updated.get("status")
            updated = merged
        elif "status" in current:  # the main resource leaves status alone
            updated["status"] = copy.deepcopy(current["status"])
        old_fin = current["metadata"].get("finalizers") or []
        new_fin = updated["metadata"].get("finalizers") or []
        if current["metadata"].get("deletionTimestamp") and any(f not in old_fin for f in new_fin):
            raise InvalidError(422, "Invalid", "no new finalizers can be added if the object is being deleted")
        updated["metadata"]["uid"] = current["metadata"]["uid"]
        updated["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        if subresource is None and updated.get("spec") != current.get("spec"):  # as the apiserver counts
            updated["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        if current["metadata"].get("deletionTimestamp"):
            updated["metadata"]["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
        return self._commit(res, self._key(res, name, namespace), updated)

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        self._record("delete", res, name)
        current = self._get(res, name, namespace)
        if uid and current["metadata"]["uid"] != uid:
            raise ConflictError(409, "Conflict", "Precondition failed: UID in precondition does not match")
        key = self._key(res, name, namespace)
        graceful = res is PODS and self.graceful_pod_deletion and grace_period_seconds != 0
        if graceful:
            self._stopping_pods.add(key)
        else:
            self._stopping_pods.discard(key)
        if current["metadata"].get("finalizers") or graceful:
            if not current["metadata"].get("deletionTimestamp"):
                obj = copy.deepcopy(current)
                obj["metadata"]["deletionTimestamp"] = format_time(self._clock.now())
                self._commit(res, key, obj)
            return
        obj = self.store[res.plural].pop(key)
        self._bump(obj)
        self._emit(res, "DELETED", obj)

    async def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> None:
        self._record("evict", PODS, name)
        self._get(PODS, name, namespace)
        if (namespace, name) in self.blocked_evictions:
            raise TooManyRequestsError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        await self.delete(PODS, name, namespace=namespace, grace_period_seconds=grace_period_seconds)

    # --- test helpers ------------------------------------------------------------------------

    def objects(self, res: Resource) -> dict[str, Obj]:
        return {k: copy.deepcopy(v) for k, v in self.store[res.plural].items()}

    def obj(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        found = self.store[res.plural].get(self._key(res, name, namespace))
        return copy.deepcopy(found) if found is not None else None

    def events(self, name: str | None = None) -> builtins.list[Obj]:
        """Events recorded, optionally only those about the object called `name`."""
        return [
            e
            for e in self.store[EVENTS.plural].values()
            if name is None or (e.get("involvedObject") or {}).get("name") == name
        ]

    def event_reasons(self, name: str | None = None) -> builtins.list[str]:
        return [str(e["reason"]) for e in self.events(name)]

    def finish_pod_deletions(self) -> None:
        """What the kubelet (kwok) does: pods with a deletionTimestamp go away."""
        for key, pod in list(self.store[PODS.plural].items()):
            if pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("finalizers"):
                self._stopping_pods.discard(key)
                obj = self.store[PODS.plural].pop(key)
                self._bump(obj)
                self._emit(PODS, "DELETED", obj)
