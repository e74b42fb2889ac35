"""The one door to Azure: Microsoft's ``azure-mgmt-compute`` aio client (awaitable, aiohttp underneath),
credentials from ``azure-identity``'s aio ``DefaultAzureCredential``, retries with tenacity, errors
as the project's own type. The Retail Prices API (public, no credentials) is read with aiohttp.

azure-core's own retries are off (``retry_total=0``) so that the retries are ours and counted:
HTTP 429 (``TooManyRequests``), 5xx and dropped connections are retried with exponential backoff and
full jitter; everything else fails at once as :class:`AzureError` with ARM's error code. Answers are
plain dicts in ARM's JSON names (the SDK's models are MutableMappings of them): nothing outside this
package sees an SDK type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aiohttp
import structlog
from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.mgmt.compute.aio import ComputeManagementClient
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from controller.metrics import counter

log = structlog.get_logger()
Obj = dict[str, Any]
T = TypeVar("T")

ARM_ENDPOINT: Final = "https://management.azure.com"
PRICES_ENDPOINT: Final = "https://prices.azure.com"
THROTTLING_CODES: Final = frozenset({"TooManyRequests", "RetryableError", "InternalServerError"})

RETRIES = counter(
    "joiner_azure_api_retries_total",
    "Azure API calls retried after throttling (429), a 5xx answer or a dropped connection.",
    ("operation", "code"),
)
CALLS = counter(
    "joiner_azure_api_calls_total",
    "Azure API calls by outcome (code is empty on success, else ARM's error code).",
    ("operation", "code"),
)


class AzureError(Exception):
    """An Azure call failed: ``code`` is ARM's error code (``AllocationFailed``, ``ResourceNotFound``...)."""

    def __init__(self, *, status: int, code: str, message: str, operation: str, retry_after: float = 0.0) -> None:
        super().__init__(f"{operation}: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds ARM asked to wait (Retry-After of a 429)

    @property
    def retryable(self) -> bool:
        return self.status == 429 or self.status >= 500 or self.status == 0 or self.code in THROTTLING_CODES


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 6
    base_seconds: float = 0.5
    cap_seconds: float = 20.0


class _NoCredential:
    """For an endpoint that checks no credentials (the fake ARM server of the tests)."""

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise AzureError(status=0, code="NoCredential", message="no credentials configured", operation="token")

    async def close(self) -> None:
        return None


def _error(err: Exception, operation: str) -> AzureError:
    if isinstance(err, HttpResponseError):
        code = (err.error.code if err.error is not None else None) or str(err.reason or "Unknown")
        message = (err.error.message if err.error is not None else None) or str(err.message or err)
        # a failed long-running operation is reported with the poll's 200: it is not a server error
        status = int(err.status_code or 0)
        status = status if status >= 400 else 409
        headers = getattr(err.response, "headers", None) or {}
        try:
            retry_after = float(headers.get("Retry-After") or 0)
        except ValueError:
            retry_after = 0.0
        return AzureError(
            status=status, code=str(code), message=str(message), operation=operation, retry_after=retry_after
        )
    return AzureError(status=0, code="ConnectionError", message=str(err) or type(err).__name__, operation=operation)


class AzureApi:
    """One ComputeManagementClient per subscription (``endpoint`` is ARM's, a fake server in tests)."""

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        prices_endpoint: str | None = None,
        anonymous: bool = False,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        polling_interval: float = 5.0,
    ) -> None:
        self.endpoint = (endpoint or ARM_ENDPOINT).rstrip("/")
        self.prices_endpoint = (prices_endpoint or PRICES_ENDPOINT).rstrip("/")
        self._anonymous = anonymous
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._polling = polling_interval
        self._credential: Any = None
        self._clients: dict[str, ComputeManagementClient] = {}
        self._http: aiohttp.ClientSession | None = None

    def _client(self, subscription: str) -> ComputeManagementClient:
        client = self._clients.get(subscription)
        if client is None:
            kwargs: dict[str, Any] = {"polling_interval": self._polling, "retry_total": 0}
            if self._anonymous:
                self._credential = self._credential or _NoCredential()
                kwargs["authentication_policy"] = SansIOHTTPPolicy()
            elif self._credential is None:
                from azure.identity.aio import DefaultAzureCredential

                self._credential = DefaultAzureCredential()
            client = ComputeManagementClient(
                credential=self._credential, subscription_id=subscription, base_url=self.endpoint, **kwargs
            )
            self._clients[subscription] = client
        return client

    async def token(self, scope: str) -> str | None:
        """A bearer token for ``scope`` (Service Bus), or None when this API sends no credentials."""
        if self._anonymous:
            return None
        if self._credential is None:
            from azure.identity.aio import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
        access = await self._credential.get_token(scope)
        return str(access.token)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        if self._credential is not None:
            await self._credential.close()
            self._credential = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def call(self, subscription: str, operation: str, fn: Callable[[ComputeManagementClient], Awaitable[T]]) -> T:
        """``fn(client)``, retried when it may be; Azure's errors as AzureError."""

        def before_sleep(state: Any) -> None:
            err = state.outcome.exception() if state.outcome is not None else None
            code = err.code if isinstance(err, AzureError) else "Unknown"
            RETRIES.labels(operation, code).inc()
            log.info("azure.retry", operation=operation, code=code, attempt=state.attempt_number)

        kwargs: dict[str, Any] = {"sleep": self._sleep} if self._sleep is not None else {}
        backoff = wait_random_exponential(multiplier=self._retry.base_seconds, max=self._retry.cap_seconds)

        def wait(state: Any) -> float:
            """The backoff, but never less than the Retry-After ARM sent (capped)."""
            err = state.outcome.exception() if state.outcome is not None else None
            asked = min(err.retry_after, self._retry.cap_seconds) if isinstance(err, AzureError) else 0.0
            return max(float(backoff(state)), asked)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retry.attempts),
            wait=wait,
            retry=retry_if_exception(lambda e: isinstance(e, AzureError) and e.retryable),
            before_sleep=before_sleep,
            reraise=True,
            **kwargs,
        )
        async for attempt in retrying:
            with attempt:
                try:
                    result = await fn(self._client(subscription))
                except (HttpResponseError, ServiceRequestError, ServiceResponseError) as err:
                    error = _error(err, operation)
                    CALLS.labels(operation, error.code).inc()
                    raise error from None
                CALLS.labels(operation, "").inc()
                return result
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def retail_prices(self, location: str) -> list[Obj]:
        """The Retail Prices API's Linux VM prices of ``location`` (every page)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        query = f"serviceName eq 'Virtual Machines' and armRegionName eq '{location}' and priceType eq 'Consumption'"
        url: str | None = f"{self.prices_endpoint}/api/retail/prices?$filter={query}"
        items: list[Obj] = []
        while url:
            async with self._http.get(url) as response:
                if response.status >= 400:
                    raise AzureError(
                        status=response.status,
                        code="PricesUnavailable",
                        message=await response.text(),
                        operation="retailPrices",
                    )
                page = await response.json()
            items += page.get("Items") or []
            url = page.get("NextPageLink") or None
        return items


def as_dict(model: Any) -> Obj:
    """An SDK model (or a plain answer) as ARM's JSON."""
    if model is None:
        return {}
    if hasattr(model, "as_dict"):
        out: Obj = model.as_dict()
        return out
    return dict(model)
