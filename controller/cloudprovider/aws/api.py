"""The one door to AWS: aioboto3 clients, retries with tenacity, and errors as the project's own type.

Every call goes through :meth:`AWSApi.call` (or :meth:`AWSApi.paginate`). Throttling, 5xx answers and
dropped connections are retried with exponential backoff and full jitter, a bounded number of
times; each retry counts in ``joiner_aws_api_retries_total{service,operation,code}``. Everything
else fails at once as :class:`AWSError`, carrying the AWS error code and message. botocore's own
retries are switched off so that the retries are ours and counted.

Nothing outside this package sees an SDK type: answers are plain dicts, errors are AWSError.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import aioboto3
import botocore.exceptions
import structlog
from botocore.config import Config
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from controller.metrics import counter

log = structlog.get_logger()
Obj = dict[str, Any]

RETRIES = counter(
    "joiner_aws_api_retries_total",
    "AWS API calls retried after throttling, a 5xx answer or a dropped connection.",
    ("service", "operation", "code"),
)
CALLS = counter(
    "joiner_aws_api_calls_total",
    "AWS API calls by outcome (code is empty on success, else the AWS error code).",
    ("service", "operation", "code"),
)

THROTTLING_CODES: Final = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "EC2ThrottledException",
    }
)
SERVER_CODES: Final = frozenset(
    {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "InternalServerError"}
)
CONNECTION_CODE: Final = "ConnectionError"


class AWSError(Exception):
    """An AWS call failed: ``code`` is the AWS error code (``InvalidParameterValue``, ...)."""

    def __init__(self, *, code: str, message: str, operation: str, status: int = 0) -> None:
        super().__init__(f"{operation}: {code}: {message}")
        self.code = code
        self.message = message
        self.operation = operation
        self.status = status

    @property
    def retryable(self) -> bool:
        return (
            self.code in THROTTLING_CODES
            or self.code in SERVER_CODES
            or self.status >= 500
            or (self.code == CONNECTION_CODE)
        )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to min(cap, base * 2**n) seconds."""

    attempts: int = 6
    base_seconds: float = 0.2
    cap_seconds: float = 10.0


def _to_aws_error(err: Exception, operation: str) -> AWSError:
    if isinstance(err, botocore.exceptions.ClientError):
        error = err.response.get("Error") or {}
        status = int((err.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        return AWSError(
            code=str(error.get("Code") or "Unknown"),
            message=str(error.get("Message") or err),
            operation=operation,
            status=status,
        )
    return AWSError(code=CONNECTION_CODE, message=str(err), operation=operation)


_TRANSPORT_ERRORS: Final = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
)


def pricing_region(region: str) -> str:
    """The Price List API answers only in us-east-1, eu-central-1 and ap-south-1: the one to ask for
    ``region``'s prices."""
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    if region.startswith("ap-"):
        return "ap-south-1"
    return "us-east-1"


class AWSApi:
    """Long-lived aioboto3 clients for one region (and an endpoint URL in tests)."""

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        session: Any = None,
    ) -> None:
        self._session = session if session is not None else aioboto3.Session(region_name=region)
        self.region: str = region or self._session.region_name or "us-east-1"
        self._endpoint_url = endpoint_url
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._stack = contextlib.AsyncExitStack()
        self._clients: dict[str, Any] = {}

    async def _client(self, service: str) -> Any:
        client = self._clients.get(service)
        if client is None:
            config = Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=30)
            region = pricing_region(self.region) if service == "pricing" else self.region
            client = await self._stack.enter_async_context(
                self._session.client(service, region_name=region, endpoint_url=self._endpoint_url, config=config)
            )
            self._clients[service] = client
        return client

    async def close(self) -> None:
        self._clients.clear()
        await self._stack.aclose()

    async def call(self, service: str, operation: str, **params: Any) -> Obj:
        """One API call (``operation`` is the snake_case method: ``create_fleet``), retried when it may."""

        def before_sleep(state: Any) -> None:
            err = state.outcome.exception() if state.outcome is not None else None
            code = err.code if isinstance(err, AWSError) else "Unknown"
            RETRIES.labels(service, operation, code).inc()
            log.info("aws.retry", service=service, operation=operation, code=code, attempt=state.attempt_number)

        kwargs: dict[str, Any] = {}
        if self._sleep is not None:
            kwargs["sleep"] = self._sleep
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retry.attempts),
            wait=wait_random_exponential(multiplier=self._retry.base_seconds, max=self._retry.cap_seconds),
            retry=retry_if_exception(lambda e: isinstance(e, AWSError) and e.retryable),
            before_sleep=before_sleep,
            reraise=True,
            **kwargs,
        )
        result: Obj = {}
        async for attempt in retrying:
            with attempt:
                result = await self._once(service, operation, params)
        return result

    async def _once(self, service: str, operation: str, params: Obj) -> Obj:
        client = await self._client(service)
        try:
            answer: Obj = await getattr(client, operation)(**params)
        except (botocore.exceptions.ClientError, *_TRANSPORT_ERRORS) as err:
            error = _to_aws_error(err, operation)
            CALLS.labels(service, operation, error.code).inc()
            raise error from None
        CALLS.labels(service, operation, "").inc()
        answer.pop("ResponseMetadata", None)
        return answer

    async def paginate(self, service: str, operation: str, *, key: str, **params: Any) -> AsyncIterator[Obj]:
        """Every item under ``key`` of every page (following ``NextToken``)."""
        token: str | None = None
        while True:
            page = await self.call(service, operation, **params, **({"NextToken": token} if token else {}))
            for item in page.get(key) or []:
                yield item
            token = page.get("NextToken")
            if not token:
                return

    async def collect(self, service: str, operation: str, *, key: str, **params: Any) -> list[Obj]:
        return [item async for item in self.paginate(service, operation, key=key, **params)]
