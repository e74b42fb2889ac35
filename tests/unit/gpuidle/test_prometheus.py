"""Reading DCGM utilization from the Prometheus HTTP API: the query, the answer, the failures."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from controller.gpuidle.prometheus import PrometheusError, PrometheusSource, parse_vector, utilization_query
from tests.unit.local_http import serving


def vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [1700000000.0, v]} for m, v in series]},
    }


def test_the_query_takes_the_highest_gpu_of_each_node_over_the_range() -> None:
    assert (
        utilization_query(node_label="Hostname", range_seconds=60)
        == "max by (Hostname) (max_over_time(DCGM_FI_DEV_GPU_UTIL[60s]))"
    )
    with pytest.raises(ValueError, match="label name"):
        utilization_query(node_label="node name", range_seconds=60)
    with pytest.raises(ValueError, match="range"):
        utilization_query(node_label="node", range_seconds=0)


def test_an_answer_becomes_one_value_per_node() -> None:
    body = vector(
        ({"Hostname": "gpu-a"}, "3"),
        ({"Hostname": "gpu-b"}, "87.5"),
        ({"Hostname": "gpu-b"}, "12"),  # two series for one node: the higher counts
        ({"node": "elsewhere"}, "1"),  # no node label
        ({"Hostname": "gpu-c"}, "NaN"),
        ({"Hostname": "gpu-d"}, "not a number"),
    )
    assert parse_vector(body, node_label="Hostname") == {"gpu-a": 3.0, "gpu-b": 87.5}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "not a JSON object"),
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data parse error"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "instant vector"),
        ({"status": "success", "data": {"resultType": "vector"}}, "no result list"),
    ],
)
def test_unreadable_answers_are_errors_that_say_why(body: Any, message: str) -> None:
    with pytest.raises(PrometheusError, match=message):
        parse_vector(body, node_label="Hostname")


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """A small HTTP server answering /api/v1/query as the test says; records each request."""
    seen: list[dict[str, Any]] = []
    answer: dict[str, Any] = {"status": 200, "body": json.dumps(vector(({"Hostname": "gpu-a"}, "4")))}

    async def query(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        return web.Response(status=answer["status"], text=answer["body"], content_type="application/json")

    async with serving("/api/v1/query", query) as url:
        yield f"{url}/", seen, answer


async def test_the_source_queries_prometheus_over_http(
    prometheus: tuple[str, list[dict[str, Any]], dict[str, Any]],
) -> None:
    url, seen, answer = prometheus
    source = PrometheusSource(url=url)
    assert await source.utilization(range_seconds=90) == {"gpu-a": 4.0}
    assert seen == [{"query": "max by (Hostname) (max_over_time(DCGM_FI_DEV_GPU_UTIL[90s]))"}]
    answer["status"] = 503
    answer["body"] = "overloaded"
    with pytest.raises(PrometheusError, match="503"):
        await source.utilization(range_seconds=90)
    answer["status"] = 200
    answer["body"] = "<html>"
    with pytest.raises(PrometheusError, match="no JSON"):
        await source.utilization(range_seconds=90)


async def test_an_unreachable_prometheus_is_an_error_not_a_crash() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = PrometheusSource(url=f"http://127.0.0.1:{port}", timeout_seconds=2.0)
    with pytest.raises(PrometheusError, match="cannot reach Prometheus"):
        await source.utilization(range_seconds=60)
