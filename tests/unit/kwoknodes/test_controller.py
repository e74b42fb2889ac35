"""The kwok provider's Node-making loop (controller/kwoknodes/) against the in-memory apiserver: the
Node waits for the registration delay, a restarted process still creates it, and the provider starts
the loop itself when nobody runs it."""

from __future__ import annotations

from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.clock import format_time
from controller.kube.resources import NODECLAIMS
from tests.unit.harness import Harness, kwok_provider


async def test_the_node_waits_for_the_registration_delay_on_the_clock(harness: Harness) -> None:
    await harness.create_nodeclass(registrationDelay="30s")
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    await harness.cloud.create(claim)
    await harness.advance(29)
    assert harness.node("nc-1") is None
    await harness.advance(1)
    await harness.eventually(lambda: harness.node("nc-1") is not None, "the Node is created after 30s")


async def test_after_a_restart_a_launched_claim_still_gets_its_node(harness: Harness) -> None:
    """State, not memory: a new provider finds the launched NodeClaim and creates its Node on time."""
    await harness.create_nodeclass(registrationDelay="60s")
    await harness.create_claim("nc-1", instance_types=["cpu-4"])
    launched_at = format_time(harness.clock.now())
    await harness.kube.patch(
        NODECLAIMS,
        "nc-1",
        {
            "metadata": {"labels": {LABEL_INSTANCE_TYPE: "cpu-4", LABEL_ZONE: "zone-a", LABEL_CAPACITY_TYPE: "spot"}},
        },
    )
    await harness.kube.patch(
        NODECLAIMS,
        "nc-1",
        {
            "status": {
                "providerID": "kwok://nc-1",
                "conditions": [
                    {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": launched_at}
                ],
            }
        },
        subresource="status",
    )
    await harness.advance(20)
    fresh = kwok_provider(kube=harness.kube, cluster=harness.cluster, clock=harness.clock)
    harness.start(fresh)
    await harness.settle()
    assert harness.node("nc-1") is None
    await harness.advance(40)
    await harness.eventually(lambda: harness.node("nc-1") is not None, "the restarted provider creates the Node")


async def test_without_an_explicit_run_the_provider_starts_its_own_loop(harness: Harness) -> None:
    """The operator may forget to run the provider: delayed Nodes still appear, and a later run() takes over."""
    lonely = kwok_provider(kube=harness.kube, cluster=harness.cluster, clock=harness.clock)
    await harness.create_nodeclass(registrationDelay="10s")
    await lonely.create(await harness.create_claim("nc-1", instance_types=["cpu-4"]))
    await harness.advance(10)
    await harness.eventually(lambda: harness.node("nc-1") is not None, "Node created by the lazy loop")
    harness.start(lonely)  # an explicit run() replaces the background task
    await harness.settle()
    await lonely.create(await harness.create_claim("nc-2", instance_types=["cpu-4"]))
    await harness.advance(10)
    await harness.eventually(lambda: harness.node("nc-2") is not None, "Node created by the explicit loop")
