"""The process-wide Prometheus registry. Each subsystem declares its own metrics next to its code,
named `joiner_<subsystem>_<name>_{total,seconds}`, and registers them here; the operator serves
this registry on :8080/metrics. Every declaration is also recorded as a `MetricSpec` so that
docs/metrics.md can be generated from the code (`python -m controller.metrics_doc`)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class MetricSpec:
    """What a metric is, as the documentation lists it."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


DECLARED: dict[str, MetricSpec] = {}
"""Every metric declared in this process, by name (modules add theirs when imported)."""


def declare(*, name: str, type: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    """Record a metric a custom collector serves (the helpers below record theirs themselves)."""
    spec = MetricSpec(name=name, type=type, labels=labels, help=help)
    DECLARED[name] = spec
    return spec


def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    declare(name=name, type="counter", labels=labels, help=doc)
    return Counter(name, doc, labels, registry=REGISTRY)


def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    declare(name=name, type="gauge", labels=labels, help=doc)
    return Gauge(name, doc, labels, registry=REGISTRY)


def histogram(
    name: str, doc: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = DURATION_BUCKETS
) -> Histogram:
    declare(name=name, type="histogram", labels=labels, help=doc)
    return Histogram(name, doc, labels, registry=REGISTRY, buckets=buckets)
