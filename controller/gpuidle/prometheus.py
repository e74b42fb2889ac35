"""Reads per-node GPU utilization (DCGM's ``DCGM_FI_DEV_GPU_UTIL``) from a Prometheus HTTP API.

One instant query per poll: the highest utilization any GPU of a node reached over the last
``range``, grouped by the label that names the node in the user's scrape configuration
(``Hostname`` as dcgm-exporter writes it; ``node`` or ``kubernetes_node`` after a common relabeling).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

METRIC: Final = "DCGM_FI_DEV_GPU_UTIL"
DEFAULT_NODE_LABEL: Final = "Hostname"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class PrometheusError(Exception):
    """The query could not be run or its answer could not be read."""


def utilization_query(*, node_label: str, range_seconds: int) -> str:
    """The PromQL for the highest GPU utilization per node over the last ``range_seconds``."""
    if not _LABEL_NAME.match(node_label):
        raise ValueError(f"not a Prometheus label name: {node_label!r}")
    if range_seconds < 1:
        raise ValueError(f"the query range must be at least 1 s, got {range_seconds}")
    return f"max by ({node_label}) (max_over_time({METRIC}[{range_seconds}s]))"


def parse_vector(body: Any, *, node_label: str) -> dict[str, float]:
    """Node name → value from a Prometheus ``/api/v1/query`` answer (an instant vector)."""
    if not isinstance(body, Mapping):
        raise PrometheusError("the answer is not a JSON object")
    if body.get("status") != "success":
        raise PrometheusError(f"the query failed: {body.get('errorType', '')} {body.get('error', '')}".strip())
    data = body.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        raise PrometheusError("the answer is not an instant vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError("the answer has no result list")
    out: dict[str, float] = {}
    for series in result:
        if not isinstance(series, Mapping):
            continue
        metric = series.get("metric")
        value = series.get("value")
        if not isinstance(metric, Mapping) or not isinstance(value, list) or len(value) != 2:
            continue
        node = metric.get(node_label)
        if not isinstance(node, str) or not node:
            continue
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[node] = max(number, out.get(node, -math.inf))
    return out


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    """GPU utilization per node from the Prometheus at ``url``."""

    url: str
    node_label: str = DEFAULT_NODE_LABEL
    timeout_seconds: float = 10.0

    async def utilization(self, *, range_seconds: int) -> dict[str, float]:
        query = utilization_query(node_label=self.node_label, range_seconds=range_seconds)
        endpoint = self.url.rstrip("/") + "/api/v1/query"
        timeout = aiohttp.ClientTimeout(total=self.timeout_seconds)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(endpoint, params={"query": query}) as response,
            ):
                text = await response.text()
                if response.status >= 500:
                    raise PrometheusError(f"Prometheus answered {response.status}: {text[:200]}")
                try:
                    body = json.loads(text)
                except json.JSONDecodeError as err:
                    raise PrometheusError(f"Prometheus answered {response.status} with no JSON: {text[:200]}") from err
        except (aiohttp.ClientError, TimeoutError) as err:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {err}") from err
        return parse_vector(body, node_label=self.node_label)
