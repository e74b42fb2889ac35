"""The one door to Google Cloud: JSON over HTTPS with aiohttp, tokens from google-auth, retries with
tenacity, errors as the project's own type.

Why not ``google-cloud-compute``: it is a synchronous client (``requests`` underneath, operations
polled by blocking ``result()`` calls). joiner's launches wait minutes on zone operations, 48 at a
time; in a thread executor (6 threads on a 2-core node) they would queue behind each other. The
Compute and Pub/Sub REST APIs are small and documented, so joiner speaks them directly on the event
loop and uses Google's ``google-auth`` for what must not be reinvented: Application Default
Credentials (workload identity, metadata server, key files) and token refresh (the refresh is a
blocking call, made in a thread, at most once per token lifetime).

Every call goes through :meth:`GCPApi.call`. HTTP 429, 5xx, ``rateLimitExceeded`` /
``userRateLimitExceeded`` 403s and dropped connections are retried with exponential backoff and full
jitter, a bounded number of times; each retry counts in ``joiner_gcp_api_retries_total``. Everything
else fails at once as :class:`GCPError` carrying the HTTP status, the error reason and message.
Long-running zone operations are awaited with ``zoneOperations.wait`` (the server holds the request
up to two minutes), and an operation that ends with errors raises :class:`OperationError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiohttp
import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from controller.metrics import counter

log = structlog.get_logger()
Obj = dict[str, Any]

COMPUTE_ENDPOINT: Final = "https://compute.googleapis.com/compute/v1/"
PUBSUB_ENDPOINT: Final = "https://pubsub.googleapis.com/v1/"
BILLING_ENDPOINT: Final = "https://cloudbilling.googleapis.com/v1/"
CONTAINER_ENDPOINT: Final = "https://container.googleapis.com/v1/"
SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
RATE_LIMIT_REASONS: Final = frozenset(
    {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "backendError"}
)
OPERATION_TIMEOUT_SECONDS: Final = 600.0

RETRIES = counter(
    "joiner_gcp_api_retries_total",
    "Google Cloud API calls retried after a rate limit, a 5xx answer or a dropped connection.",
    ("api", "method", "reason"),
)
CALLS = counter(
    "joiner_gcp_api_calls_total",
    "Google Cloud API calls by outcome (reason is empty on success, else the error reason).",
    ("api", "method", "reason"),
)


class GCPError(Exception):
    """A call failed: ``status`` is the HTTP status, ``reason`` the first error's reason
    (``notFound``, ``rateLimitExceeded``, ``QUOTA_EXCEEDED``...)."""

    def __init__(self, *, status: int, reason: str, message: str, what: str) -> None:
        super().__init__(f"{what}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.status == 429 or self.status >= 500 or self.status == 0 or self.reason in RATE_LIMIT_REASONS


class OperationError(Exception):
    """A long-running operation finished with errors; ``codes`` are their codes
    (``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``...)."""

    def __init__(self, operation: Obj) -> None:
        self.operation = operation
        self.errors: list[Obj] = list(((operation.get("error") or {}).get("errors")) or [])
        self.codes = tuple(str(e.get("code") or "UNKNOWN") for e in self.errors)
        detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in self.errors[:5])
        super().__init__(f"operation {operation.get('operationType')} {operation.get('name')} failed: {detail}")


class TokenSource(Protocol):
    async def token(self) -> str | None:
        """A bearer token, or None to send no Authorization header."""


class NoToken:
    """For an endpoint that checks no credentials (the fake Compute API of the tests)."""

    async def token(self) -> str | None:
        return None


class DefaultCredentials:
    """Application Default Credentials (google-auth), refreshed in a thread shortly before expiry."""

    def __init__(self) -> None:
        import google.auth
        import google.auth.transport.urllib3
        import urllib3

        self._credentials, self.project = google.auth.default(scopes=[SCOPE])
        # urllib3 is already in the image (botocore's); the requests transport would add requests
        self._request = google.auth.transport.urllib3.Request(urllib3.PoolManager())  # type: ignore[no-untyped-call]
        self._lock = asyncio.Lock()

    async def token(self) -> str | None:
        async with self._lock:
            expiry = getattr(self._credentials, "expiry", None)
            fresh = self._credentials.token and (expiry is None or expiry.timestamp() - time.time() > 300)
            if not fresh:
                await asyncio.to_thread(self._credentials.refresh, self._request)
            return str(self._credentials.token)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to min(cap, base * 2**n) seconds."""

    attempts: int = 6
    base_seconds: float = 0.2
    cap_seconds: float = 10.0


def _reason(body: Any, status: int) -> tuple[str, str]:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return (f"HTTP{status}", str(body)[:200])
    errors = error.get("errors") or []
    reason = str(errors[0].get("reason") or "") if errors and isinstance(errors[0], dict) else ""
    return (reason or str(error.get("status") or f"HTTP{status}"), str(error.get("message") or ""))


class GCPApi:
    """One aiohttp session for Compute Engine and Pub/Sub (the endpoints are options, for tests)."""

    def __init__(
        self,
        *,
        compute_endpoint: str = COMPUTE_ENDPOINT,
        pubsub_endpoint: str = PUBSUB_ENDPOINT,
        billing_endpoint: str = BILLING_ENDPOINT,
        container_endpoint: str = CONTAINER_ENDPOINT,
        tokens: TokenSource | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        operation_poll_seconds: float = 1.0,
    ) -> None:
        self.compute_endpoint = compute_endpoint.rstrip("/") + "/"
        self.pubsub_endpoint = pubsub_endpoint.rstrip("/") + "/"
        self.billing_endpoint = billing_endpoint.rstrip("/") + "/"
        self.container_endpoint = container_endpoint.rstrip("/") + "/"
        self._tokens: TokenSource = tokens if tokens is not None else DefaultCredentials()
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._poll = operation_poll_seconds
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=150, connect=10))
        return self._session

    async def compute(self, method: str, path: str, *, body: Obj | None = None, params: Obj | None = None) -> Obj:
        """A Compute Engine call: ``path`` is relative, e.g. ``projects/p/zones/z/instances``."""
        return await self.call("compute", method, self.compute_endpoint + path, body=body, params=params)

    async def pubsub(self, method: str, path: str, *, body: Obj | None = None) -> Obj:
        return await self.call("pubsub", method, self.pubsub_endpoint + path, body=body)

    async def billing(self, method: str, path: str, *, params: Obj | None = None) -> Obj:
        return await self.call("billing", method, self.billing_endpoint + path, params=params)

    async def container(self, method: str, path: str) -> Obj:
        """A GKE API call (``projects/p/locations/l/clusters/c/nodePools/n``)."""
        return await self.call("container", method, self.container_endpoint + path)

    async def compute_list(self, path: str, *, params: Obj | None = None) -> list[Obj]:
        """Every item of a Compute list call, following ``nextPageToken``."""
        out: list[Obj] = []
        token: str | None = None
        while True:
            page = await self.compute("GET", path, params={**(params or {}), **({"pageToken": token} if token else {})})
            out += page.get("items") or []
            token = page.get("nextPageToken")
            if not token:
                return out

    async def call(self, api: str, method: str, url: str, *, body: Obj | None = None, params: Obj | None = None) -> Obj:
        """One call, retried when it may be (see the module docstring)."""
        what = f"{method} {url.split('/v1/', 1)[-1]}"
        short = _method_name(url)

        def before_sleep(state: Any) -> None:
            err = state.outcome.exception() if state.outcome is not None else None
            reason = err.reason if isinstance(err, GCPError) else "Unknown"
            RETRIES.labels(api, short, reason).inc()
            log.info("gcp.retry", call=what, reason=reason, attempt=state.attempt_number)

        kwargs: dict[str, Any] = {"sleep": self._sleep} if self._sleep is not None else {}
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retry.attempts),
            wait=wait_random_exponential(multiplier=self._retry.base_seconds, max=self._retry.cap_seconds),
            retry=retry_if_exception(lambda e: isinstance(e, GCPError) and e.retryable),
            before_sleep=before_sleep,
            reraise=True,
            **kwargs,
        )
        result: Obj = {}
        async for attempt in retrying:
            with attempt:
                result = await self._once(api, short, method, url, body=body, params=params, what=what)
        return result

    async def _once(
        self, api: str, short: str, method: str, url: str, *, body: Obj | None, params: Obj | None, what: str
    ) -> Obj:
        headers = {"Content-Type": "application/json"}
        token = await self._tokens.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            async with self._http().request(method, url, json=body, params=query, headers=headers) as response:
                status = response.status
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            CALLS.labels(api, short, "ConnectionError").inc()
            message = str(err) or type(err).__name__
            raise GCPError(status=0, reason="ConnectionError", message=message, what=what) from None
        try:
            answer: Any = await asyncio.to_thread(_json, text) if len(text) > 1_000_000 else _json(text)
        except ValueError:
            answer = text
        if status >= 400:
            reason, message = _reason(answer, status)
            CALLS.labels(api, short, reason).inc()
            raise GCPError(status=status, reason=reason, message=message, what=what)
        CALLS.labels(api, short, "").inc()
        return answer if isinstance(answer, dict) else {}

    async def wait_zone_operation(self, project: str, zone: str, operation: Obj) -> Obj:
        """Wait for a zone operation to finish; its final form, or OperationError if it has errors."""
        name = str(operation.get("name") or "")
        deadline = time.monotonic() + OPERATION_TIMEOUT_SECONDS
        op = operation
        while op.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise GCPError(status=0, reason="OperationTimeout", message=f"{name} not DONE", what="wait")
            op = await self.compute("POST", f"projects/{project}/zones/{zone}/operations/{name}/wait")
            if op.get("status") != "DONE":
                await (self._sleep or asyncio.sleep)(self._poll)
        if op.get("error"):
            raise OperationError(op)
        return op


def _json(text: str) -> Any:
    import json

    return json.loads(text) if text else {}


_COLLECTIONS: Final = frozenset(
    {
        "instances",
        "machineTypes",
        "acceleratorTypes",
        "operations",
        "zones",
        "regions",
        "subnetworks",
        "images",
        "reservations",
        "instanceTemplates",
        "subscriptions",
        "skus",
        "nodePools",
        "instanceGroupManagers",
    }
)
_ACTIONS: Final = frozenset({"bulkInsert", "wait", "getFromFamily", "setLabels"})


def _method_name(url: str) -> str:
    """A low-cardinality name of the call for metrics: ``instances.bulkInsert``, ``subscriptions:pull``."""
    parts: Sequence[str] = [p for p in url.split("?", 1)[0].split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        head = parts[i].partition(":")[0]
        if head in _COLLECTIONS:
            last = parts[-1]
            if ":" in last:
                return f"{head}:{last.partition(':')[2]}"
            return f"{head}.{last}" if last in _ACTIONS else head
    return "?"
