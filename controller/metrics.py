"""The process-wide Prometheus registry. Each subsystem declares its own metrics next to its code,
named `joiner_<subsystem>_<name>_{total,seconds}`, and registers them here; the operator serves
this registry on :8080/metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    return Gauge(name, doc, labels, registry=REGISTRY)


def histogram(
    name: str, doc: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = DURATION_BUCKETS
) -> Histogram:
    return Histogram(name, doc, labels, registry=REGISTRY, buckets=buckets)
