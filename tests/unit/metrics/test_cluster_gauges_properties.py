"""Properties of the cache-derived gauges over any mix of NodeClaims: a pool's usage is the sum of
its live claims' capacity, and nodes and $/h add up per pool and capacity type."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.state.metrics import ClusterCollector
from tests.unit.builders import nodepool
from tests.unit.metrics.world import feed, new_cluster, node, nodeclaim

claims = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),  # pool
        st.sampled_from(["spot", "on-demand", "reserved"]),
        st.integers(min_value=1, max_value=96),  # cpus
        st.sampled_from(["0.25", "1.5", "3.0"]),  # price
        st.booleans(),  # deleting
        st.booleans(),  # registered (its Node exists)
        st.booleans(),  # launched
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(claims)
def test_usage_nodes_and_spend_add_up(spec: list[tuple[str, str, int, str, bool, bool, bool]]) -> None:
    cluster = new_cluster()
    feed(cluster, nodepool("a", limits={"cpu": "1000"}), nodepool("b"))
    want_cpu: dict[str, float] = defaultdict(float)
    want_nodes: dict[tuple[str, str], int] = defaultdict(int)
    want_price: dict[tuple[str, str], float] = defaultdict(float)
    for i, (pool, tier, cpus, price, deleting, registered, launched) in enumerate(spec):
        name = f"c{i}"
        capacity = {"cpu": str(cpus), "memory": "1Gi"}
        feed(
            cluster,
            nodeclaim(name, pool=pool, tier=tier, capacity=capacity, price=price, launched=launched, deleting=deleting),
        )
        if registered:
            feed(cluster, node(name, pool=pool, tier=tier))
        if deleting:
            continue
        want_cpu[pool] += cpus
        if registered:
            want_nodes[(pool, tier)] += 1
        if launched:
            want_price[(pool, tier)] += float(price)
    collector = ClusterCollector()
    collector.cluster = cluster
    got = {m.name: {tuple(s.labels.values()): s.value for s in m.samples} for m in collector.collect()}
    usage_cpu = {labels[0]: v for labels, v in got["joiner_nodepools_usage"].items() if labels[1] == "cpu"}
    assert usage_cpu == {"a": 0.0, **want_cpu}  # pool a limits cpu: its usage is served even at 0
    assert got["joiner_nodes"] == dict(want_nodes)
    assert got["joiner_nodes_price_per_hour"].keys() == want_price.keys()
    for key, value in want_price.items():
        assert abs(got["joiner_nodes_price_per_hour"][key] - value) < 1e-6
