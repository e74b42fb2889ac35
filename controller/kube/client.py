"""The only module that talks to the Kubernetes API (through kubernetes_asyncio).

Objects travel as plain JSON dicts, exactly as the apiserver sends them: no generated model
classes cross this boundary, so the rest of joiner works on the same shapes that
`kubectl get -o json` prints, and the pure layers stay free of client types.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from controller.kube.resources import PODS, Resource
from controller.serialization import loads_json

Obj = dict[str, Any]
PatchType = Literal["merge", "json", "strategic", "apply"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
FIELD_MANAGER = "joiner"
# aiohttp speaks HTTP/1.1 to the apiserver, so every request in flight holds a connection of its own
# (client-go multiplexes its requests over one HTTP/2 connection). What bounds joiner's requests in
# flight is its workers (the NodeClaim writer's 48, the lifecycle's 48, the nominator's 32, ...), and
# the pool must not bound them again: a pool smaller than their sum queues requests at the client,
# first come first served, and the NodeClaims of a plan waited behind the launches, Node syncs and
# tolerations of the first ones (a plan of 156 GPU NodeClaims took 4.2 s to write with 64 connections
# shared with the watches, 0.7 s with this; docs/performance.md, "The client's connections").
REQUEST_CONNECTIONS: Final = 256
# A watch holds its connection for minutes: the watches have a pool of their own (one connection per
# informer, no limit), so that no number of informers takes a request's connection or waits for one.
WATCH_CONNECTIONS: Final = 0  # aiohttp: no limit


class ApiError(Exception):
    """A non-2xx answer from the apiserver."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    """409: the object changed (resourceVersion) or already exists."""


class GoneError(ApiError):
    """410: a watch's resourceVersion is too old; relist."""


class TooManyRequestsError(ApiError):
    """429: throttled, or an eviction that a PodDisruptionBudget forbids right now."""


class InvalidError(ApiError):
    """422: the object failed validation (OpenAPI schema, CEL)."""


class TransportError(Exception):
    """No answer from the apiserver: the connection failed, broke or timed out. A write may or may not
    have been applied (the apiserver can commit a create and go away before it answers)."""


def _error_for(status: int, body: bytes) -> ApiError:
    reason, message = "", body.decode("utf-8", "replace")[:2000]
    try:
        status_obj = json.loads(body)
        reason = str(status_obj.get("reason", ""))
        message = str(status_obj.get("message", message))
    except (ValueError, AttributeError):
        pass
    cls: type[ApiError] = {
        404: NotFoundError,
        409: ConflictError,
        410: GoneError,
        422: InvalidError,
        429: TooManyRequestsError,
    }.get(status, ApiError)
    return cls(status, reason, message)


def _read_proxy_environment_once(configuration: k8s_client.Configuration) -> None:
    """The proxy the environment names for the apiserver (``HTTPS_PROXY``, ``NO_PROXY``, ...), as
    client-go honours it, read once into the configuration rather than on every request."""
    if configuration.proxy:
        return
    url = urlsplit(str(configuration.host))
    if not url.hostname or proxy_bypass(url.hostname):
        return
    proxy = getproxies().get(url.scheme)
    if not proxy:
        return
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.username:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        header = "Basic " + base64.b64encode(credentials).decode("ascii")
        configuration.proxy_headers = {**(configuration.proxy_headers or {}), "Proxy-Authorization": header}
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    configuration.proxy = urlunsplit(parts)


def user_agent() -> str:
    """What joiner sends as its User-Agent, in client-go's form (``<program>/<version> (<os>/<arch>)
    <client>``): the apiserver's audit log, its request metrics and API Priority and Fairness name
    the client by it. kubernetes_asyncio's default, ``OpenAPI-Generator/<version>/python``, says
    nothing about which controller sent a request."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("joiner")
    except PackageNotFoundError:
        mine = "0.0.0+unknown"
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine().lower(), platform.machine().lower())
    return f"joiner/{mine} ({platform.system().lower()}/{arch}) kubernetes-asyncio"


def _stop_trusting_environment(api: k8s_client.ApiClient) -> None:
    """kubernetes_asyncio opens its aiohttp session with ``trust_env=True``: aiohttp then looks up the
    proxy variables and reads ``~/.netrc`` again for every request, each time in a worker thread (two
    thread hops per request: about 6 % of joiner's CPU in a 10,000-pod burst). The proxy was read
    once above, and ``~/.netrc`` credentials are nothing a Kubernetes client sends (client-go never
    reads it): the session is replaced by one that does not look, over the same connection pool."""
    rest: Any = getattr(api, "rest_client", None)
    old = getattr(rest, "pool_manager", None)
    if not isinstance(old, aiohttp.ClientSession) or old.connector is None:
        return  # another kubernetes_asyncio layout: keep its session (slower, same behaviour)
    rest.pool_manager = aiohttp.ClientSession(
        connector=old.connector,
        trust_env=False,
        read_bufsize=2**21,  # as kubernetes_asyncio sets it: large objects in one watch line
    )
    old.detach()  # hands the connector over without closing it


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[Obj]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Obj


class KubeClient:
    """A small, dict-based client over kubernetes_asyncio's authenticated ApiClient."""

    def __init__(self, api: k8s_client.ApiClient, watch_api: k8s_client.ApiClient) -> None:
        self._api = api  # requests
        self._watch_api = watch_api  # watches, on connections of their own

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, connections: int = REQUEST_CONNECTIONS) -> KubeClient:
        """Load a kubeconfig file (or the in-cluster service account when none is given).
        ``connections``: requests in flight at most (watches aside)."""
        configuration = k8s_client.Configuration()
        if kubeconfig:
            await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException:
                await k8s_config.load_kube_config(client_configuration=configuration)
        _read_proxy_environment_once(configuration)
        agent = user_agent()
        apis = []
        for size in (connections, WATCH_CONNECTIONS):
            # each ApiClient reads the pool's size from the configuration as it opens its session
            configuration.connection_pool_maxsize = size
            api = k8s_client.ApiClient(configuration)
            api.user_agent = agent
            _stop_trusting_environment(api)
            apis.append(api)
        return cls(apis[0], apis[1])

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def close(self) -> None:
        await self._api.close()
        await self._watch_api.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = 60,
        watch: bool = False,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        api = self._watch_api if watch else self._api
        try:
            response: aiohttp.ClientResponse = await api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=request_timeout, sock_read=request_timeout)
                if request_timeout
                else None,
            )
            if response.status >= 300:
                data = await response.read()
                response.release()
                raise _error_for(response.status, data)
        except (TimeoutError, aiohttp.ClientError) as err:
            raise TransportError(f"{method} {path}: {type(err).__name__}: {err}") from err
        return response

    async def _json(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = await self._request(method, path, **kwargs)
        try:
            data: Obj = await response.json(content_type=None, loads=loads_json)
        except (TimeoutError, aiohttp.ClientError) as err:
            raise TransportError(f"{method} {path}: {type(err).__name__}: {err}") from err
        finally:
            response.release()
        return data

    async def get_raw(self, path: str) -> Obj:
        return await self._json("GET", path)

    async def get(self, res: Resource, name: str, *, namespace: str | None = None) -> Obj:
        return await self._json("GET", res.path(namespace=namespace, name=name))

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ListResult:
        items: list[Obj] = []
        query: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        while True:
            page = await self._json("GET", res.path(namespace=namespace), query=query)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return ListResult(items=items, resource_version=str(meta.get("resourceVersion", "")))
            query["continue"] = meta["continue"]

    async def watch(
        self, res: Resource, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[WatchEvent]:
        """Stream changes since `resource_version` until the server closes the watch.

        Raises GoneError when the version is too old (the caller relists).
        """
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        response = await self._request("GET", res.path(), query=query, request_timeout=timeout_seconds + 30, watch=True)
        try:
            async for line in response.content:
                if not line.strip():
                    continue
                event = loads_json(line)
                etype = event.get("type")
                obj = event.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code", 500))
                    raise _error_for(code, json.dumps(obj).encode())
                if etype in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                    yield WatchEvent(type=etype, object=obj)
        finally:
            response.release()

    async def create(self, res: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return await self._json("POST", res.path(namespace=ns), body=obj, query={"fieldManager": FIELD_MANAGER})

    async def replace(self, res: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        """PUT: optimistic concurrency through metadata.resourceVersion (ConflictError on a race)."""
        meta = obj["metadata"]
        path = res.path(namespace=meta.get("namespace"), name=meta["name"], subresource=subresource)
        return await self._json("PUT", path, body=obj, query={"fieldManager": FIELD_MANAGER})

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
        query = {"fieldManager": FIELD_MANAGER}
        if patch_type == "apply":
            query["force"] = "true"
        return await self._json(
            "PATCH",
            res.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            query=query,
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        response = await self._request("DELETE", res.path(namespace=namespace, name=name), body=body)
        response.release()

    async def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> None:
        """The Eviction API: honours PodDisruptionBudgets (TooManyRequestsError when one forbids)."""
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        response = await self._request(
            "POST", PODS.path(namespace=namespace, name=name, subresource="eviction"), body=body
        )
        response.release()
