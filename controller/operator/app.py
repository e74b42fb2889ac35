"""Wiring: build the shared context, start the caches, the servers and every controller."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

from controller.clock import Clock, RealClock
from controller.cloudprovider.metrics import MeteredCloudProvider
from controller.cloudprovider.types import CloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.context import Context
from controller.kube.client import ApiError, KubeClient, NotFoundError, TransportError
from controller.kube.events import EventRecorder
from controller.kube.resources import (
    AKSNODECLASSES,
    CRDS,
    EC2NODECLASSES,
    GCENODECLASSES,
    PODTEMPLATES,
    PROVISIONING_REQUESTS,
    Resource,
)
from controller.metrics import REGISTRY
from controller.operator.leader import LeaderElector
from controller.operator.metrics import LEADER, LOOP_RESTARTS, record_start
from controller.operator.server import ListenError, Servers
from controller.provreq.request import CRD_NAME as PROVISIONING_REQUEST_CRD
from controller.settings import Settings
from controller.state import metrics as state_metrics
from controller.state.cluster import WATCHED, ClusterState
from controller.state.writer import NodeClaimWriter

if TYPE_CHECKING:
    from controller.cloudprovider.kwok.provider import KWOKCloudProvider
    from controller.scheduling.instancetypes import InstanceType

log = structlog.get_logger()
REQUIRED_CRDS = ("nodepools.joiner.sh", "nodeclaims.joiner.sh", "kwoknodeclasses.joiner.sh")
AWS_CRDS = ("ec2nodeclasses.joiner.sh",)
GCP_CRDS = ("gcenodeclasses.joiner.sh",)
AZURE_CRDS = ("aksnodeclasses.joiner.sh",)


@dataclass(frozen=True, slots=True)
class AWSOptions:
    """Settings of the aws provider (credentials come from the standard AWS chain)."""

    cluster_name: str
    region: str | None = None
    endpoint_url: str | None = None
    interruption_queue: str | None = None
    pricing_refresh_seconds: float = 0.0
    cluster_endpoint: str | None = None
    cluster_ca_bundle: str | None = None
    cluster_cidr: str | None = None
    cluster_version: str | None = None


@dataclass(frozen=True, slots=True)
class GCPOptions:
    """Settings of the gcp provider (credentials: Application Default Credentials, unless an endpoint
    that checks none is given)."""

    cluster_name: str
    region: str = "us-central1"
    compute_endpoint: str | None = None
    pubsub_endpoint: str | None = None
    billing_endpoint: str | None = None
    container_endpoint: str | None = None
    interruption_subscription: str | None = None
    anonymous: bool = False  # send no credentials (a local fake API server)


@dataclass(frozen=True, slots=True)
class AzureOptions:
    """Settings of the azure provider (credentials: azure-identity's DefaultAzureCredential, unless an
    http:// endpoint that checks none is given)."""

    cluster_name: str
    endpoint: str | None = None
    prices_endpoint: str | None = None
    interruption_queue: str | None = None  # https://<namespace>.servicebus.windows.net/<queue>

    @property
    def anonymous(self) -> bool:
        return str(self.endpoint or "").startswith("http://")


@runtime_checkable
class Runnable(Protocol):
    async def run(self) -> None: ...


def build_cloud_provider(
    *,
    provider: str,
    client: KubeClient,
    cluster: ClusterState,
    catalog: str | None,
    clock: RealClock,
    unavailable: UnavailableOfferings,
    aws: AWSOptions | None = None,
    gcp: GCPOptions | None = None,
    azure: AzureOptions | None = None,
) -> CloudProvider:
    if provider == "azure":
        from controller.cloudprovider.azure.api import AzureApi
        from controller.cloudprovider.azure.provider import AzureCloudProvider
        from controller.nodeclass.aks import AKSNodeClassStatusController

        if azure is None or not azure.cluster_name:
            raise ValueError("the azure provider needs --cluster-name")
        azure_api = AzureApi(
            endpoint=azure.endpoint,
            prices_endpoint=azure.prices_endpoint,
            anonymous=azure.anonymous,
            sleep=clock.sleep,
        )
        return AzureCloudProvider(
            api=azure_api,
            cluster_name=azure.cluster_name,
            nodeclasses=lambda: cluster.store(AKSNODECLASSES.kind),
            clock=clock,
            unavailable=unavailable,
            status_loop=lambda p: AKSNodeClassStatusController(
                check=p.check, client=client, cluster=cluster, clock=clock
            ),
        )
    if provider == "gcp":
        from controller.cloudprovider.gcp.api import (
            BILLING_ENDPOINT,
            COMPUTE_ENDPOINT,
            CONTAINER_ENDPOINT,
            PUBSUB_ENDPOINT,
            GCPApi,
            NoToken,
        )
        from controller.cloudprovider.gcp.provider import GCPCloudProvider
        from controller.nodeclass.gce import GCENodeClassStatusController

        if gcp is None or not gcp.cluster_name:
            raise ValueError("the gcp provider needs --cluster-name")
        gcp_api = GCPApi(
            compute_endpoint=gcp.compute_endpoint or COMPUTE_ENDPOINT,
            pubsub_endpoint=gcp.pubsub_endpoint or PUBSUB_ENDPOINT,
            billing_endpoint=gcp.billing_endpoint or BILLING_ENDPOINT,
            container_endpoint=gcp.container_endpoint or CONTAINER_ENDPOINT,
            tokens=NoToken() if gcp.anonymous else None,
            sleep=clock.sleep,
        )
        return GCPCloudProvider(
            api=gcp_api,
            cluster_name=gcp.cluster_name,
            nodeclasses=lambda: cluster.store(GCENODECLASSES.kind),
            clock=clock,
            region=gcp.region,
            unavailable=unavailable,
            status_loop=lambda resolver: GCENodeClassStatusController(
                resolver=resolver, client=client, cluster=cluster, clock=clock
            ),
        )
    if provider == "aws":
        from controller.cloudprovider.aws.api import AWSApi
        from controller.cloudprovider.aws.cluster import ClusterInfoSource, ClusterSettings
        from controller.cloudprovider.aws.provider import AWSCloudProvider
        from controller.nodeclass.ec2 import EC2NodeClassStatusController

        if aws is None or not aws.cluster_name:
            raise ValueError("the aws provider needs --cluster-name")
        api = AWSApi(region=aws.region, endpoint_url=aws.endpoint_url, sleep=clock.sleep)
        source = ClusterInfoSource(
            api,
            aws.cluster_name,
            ClusterSettings(
                endpoint=aws.cluster_endpoint,
                ca_bundle=aws.cluster_ca_bundle,
                service_cidr=aws.cluster_cidr,
                version=aws.cluster_version,
            ),
        )
        status = EC2NodeClassStatusController(
            api=api, client=client, cluster=cluster, clock=clock, cluster_name=aws.cluster_name, cluster_source=source
        )
        return AWSCloudProvider(
            api=api,
            cluster_name=aws.cluster_name,
            nodeclasses=lambda: cluster.store(EC2NODECLASSES.kind),
            clock=clock,
            unavailable=unavailable,
            loop=status,
            pricing_refresh_seconds=aws.pricing_refresh_seconds,
            cluster_source=source,
            gc_seconds=600.0,  # launch templates and instance profiles nothing needs any more
        )
    if provider == "kwok":
        from controller.cloudprovider.catalog import load_catalog

        return build_kwok_provider(
            client=client, cluster=cluster, clock=clock, catalog=load_catalog(catalog), unavailable=unavailable
        )
    raise ValueError(f"unknown provider {provider!r}")


def build_kwok_provider(
    *,
    client: KubeClient,
    cluster: ClusterState,
    clock: Clock,
    catalog: Iterable[InstanceType],
    unavailable: UnavailableOfferings | None = None,
) -> KWOKCloudProvider:
    """The kwok provider, handed the cache it reads and its Node-making loop (controller/kwoknodes/)."""
    from controller.cloudprovider.kwok.provider import KWOKCloudProvider
    from controller.kwoknodes.controller import KWOKNodeController

    def node_loop(provider: KWOKCloudProvider) -> KWOKNodeController:
        return KWOKNodeController(provider=provider, cluster=cluster, clock=clock)

    return KWOKCloudProvider(
        client=client, cluster=cluster, clock=clock, catalog=catalog, node_loop=node_loop, unavailable=unavailable
    )


def build_controllers(ctx: Context, *, provider_loops: list[Runnable]) -> list[Runnable]:
    from controller.capacity.controller import CapacityController
    from controller.disruption.controller import DisruptionController
    from controller.gang.controller import GangController
    from controller.nodeclaim.gc import GarbageCollector
    from controller.nodeclaim.lifecycle import LifecycleController
    from controller.provisioning.nodepool_status import NodePoolStatusController
    from controller.provisioning.provisioner import Provisioner
    from controller.provisioning.startup import PodStartupTracker
    from controller.provreq.controller import ProvisioningRequestController
    from controller.termination.controller import TerminationController

    optional: list[Runnable] = []
    url = ctx.settings.prometheus_url
    if url is not None:
        from datetime import timedelta

        from controller.gpuidle.controller import GPUIdleController
        from controller.gpuidle.prometheus import PrometheusSource
        from controller.gpuidle.tracker import IdlePolicy, IdleTracker

        s = ctx.settings
        policy = IdlePolicy(
            threshold_percent=s.gpu_idle_threshold_percent, window=timedelta(seconds=s.gpu_idle_window_seconds)
        )
        optional.append(
            GPUIdleController(
                ctx,
                source=PrometheusSource(url=url, node_label=s.gpu_utilization_node_label),
                tracker=IdleTracker(policy),
                poll_seconds=s.gpu_idle_poll_seconds,
            )
        )
    if PROVISIONING_REQUESTS.kind in ctx.cluster.informers:
        optional.append(ProvisioningRequestController(ctx))
    return [
        *provider_loops,
        *optional,
        Provisioner(ctx),
        LifecycleController(ctx),
        TerminationController(ctx),
        GarbageCollector(ctx),
        NodePoolStatusController(ctx),
        DisruptionController(ctx),
        GangController(ctx),
        CapacityController(ctx),
        PodStartupTracker(cluster=ctx.cluster, clock=ctx.clock),
    ]


async def serve_provisioning_requests(client: KubeClient, settings: Settings) -> bool:
    """Whether to serve ProvisioningRequests: told so, or (by default) when their CRD is installed."""
    if settings.provisioning_requests is not None:
        return settings.provisioning_requests
    try:
        await client.get(CRDS, PROVISIONING_REQUEST_CRD)
    except NotFoundError:
        log.info("operator.provisioning_requests_off", reason=f"CRD {PROVISIONING_REQUEST_CRD} not installed")
        return False
    return True


async def missing_crds(client: KubeClient, *, provider: str = "kwok") -> list[str]:
    missing = []
    extra = {"aws": AWS_CRDS, "gcp": GCP_CRDS, "azure": AZURE_CRDS}.get(provider, ())
    for name in (*REQUIRED_CRDS, *extra):
        try:
            await client.get(CRDS, name)
        except NotFoundError:
            missing.append(name)
    return missing


async def run_operator(
    *,
    kubeconfig: str | None,
    provider: str,
    settings: Settings,
    leader_elect: bool,
    leader_namespace: str,
    catalog: str | None,
    aws: AWSOptions | None = None,
    gcp: GCPOptions | None = None,
    azure: AzureOptions | None = None,
) -> int:
    clock = RealClock()
    client = await KubeClient.connect(kubeconfig)
    log.info("operator.starting", apiserver=client.host, provider=provider, leader_elect=leader_elect)
    try:
        missing = await missing_crds(client, provider=provider)
    except (ApiError, TransportError) as err:
        log.error("operator.apiserver_unreachable", error=str(err))
        await client.close()
        return 1
    if missing:
        log.error("operator.crds_missing", missing=missing, hint="kubectl apply -f deploy/crds/")
        await client.close()
        return 1

    # the aws, gcp and azure providers read their NodeClasses from the cache too
    watched: tuple[Resource, ...] = {
        "aws": (*WATCHED, EC2NODECLASSES),
        "gcp": (*WATCHED, GCENODECLASSES),
        "azure": (*WATCHED, AKSNODECLASSES),
    }.get(provider, WATCHED)
    if await serve_provisioning_requests(client, settings):
        watched = (*watched, PROVISIONING_REQUESTS, PODTEMPLATES)
    cluster = ClusterState(
        source=client, clock=clock, watched=watched, watch_timeout_seconds=settings.watch_timeout_seconds
    )
    unavailable = UnavailableOfferings(clock=clock, ttl_seconds=settings.unavailable_offering_ttl_seconds)
    raw_cloud = build_cloud_provider(
        provider=provider,
        client=client,
        cluster=cluster,
        catalog=catalog,
        clock=clock,
        unavailable=unavailable,
        aws=aws,
        gcp=gcp,
        azure=azure,
    )
    cloud = MeteredCloudProvider(raw_cloud, clock=clock)
    # a provider may run the loops it was handed (the NodeClass status loops; the kwok provider's
    # Node-making loop, which creates Nodes after the registration delay)
    provider_loops: list[Runnable] = [raw_cloud] if isinstance(raw_cloud, Runnable) else []
    ctx = Context(
        client=client,
        cluster=cluster,
        clock=clock,
        events=EventRecorder(client=client, clock=clock),
        cloud=cloud,
        unavailable=unavailable,
        settings=settings,
        writer=NodeClaimWriter(client=client, cluster=cluster, clock=clock),
    )
    if aws is not None and aws.interruption_queue:
        from controller.cloudprovider.aws.provider import AWSCloudProvider
        from controller.cloudprovider.aws.sqs import SQSSource
        from controller.interruption.controller import InterruptionController

        assert isinstance(raw_cloud, AWSCloudProvider)
        source = SQSSource(api=raw_cloud.api, queue_url=aws.interruption_queue)
        provider_loops.append(InterruptionController(ctx, source=source))
    if gcp is not None and gcp.interruption_subscription:
        from controller.cloudprovider.gcp.provider import GCPCloudProvider
        from controller.cloudprovider.gcp.pubsub import PubSubSource
        from controller.cloudprovider.gcp.pubsub import parse as parse_audit_log
        from controller.interruption.controller import InterruptionController

        assert isinstance(raw_cloud, GCPCloudProvider)
        pubsub = PubSubSource(api=raw_cloud.api, subscription=gcp.interruption_subscription)
        provider_loops.append(InterruptionController(ctx, source=pubsub, parse=parse_audit_log))
    if azure is not None and azure.interruption_queue:
        from controller.cloudprovider.azure.provider import AzureCloudProvider
        from controller.cloudprovider.azure.servicebus import SERVICE_BUS_SCOPE, ServiceBusSource
        from controller.cloudprovider.azure.servicebus import parse as parse_health_event
        from controller.interruption.controller import InterruptionController

        assert isinstance(raw_cloud, AzureCloudProvider)
        azure_api = raw_cloud.api
        bus = ServiceBusSource(queue_url=azure.interruption_queue, token=lambda: azure_api.token(SERVICE_BUS_SCOPE))
        provider_loops.append(InterruptionController(ctx, source=bus, parse=parse_health_event))
    if provider == "kwok":
        # the fake cloud's interruptions: NodeClaims annotated joiner.sh/interruption
        from controller.interruption.controller import InterruptionController
        from controller.interruption.kwok import AnnotationInterruptions

        provider_loops.append(AnnotationInterruptions(InterruptionController(ctx, source=_NoMessages())))
    elector = (
        LeaderElector(
            client=client,
            clock=clock,
            namespace=leader_namespace,
            lease_seconds=settings.leader_lease_seconds,
            renew_deadline_seconds=settings.leader_renew_deadline_seconds,
            retry_period_seconds=settings.leader_retry_period_seconds,
        )
        if leader_elect
        else None
    )

    def not_ready() -> list[str]:
        problems = []
        if not cluster.synced:
            problems.append("cache not synced")
        if elector is not None and elector.leader is None:
            problems.append("leader unknown")
        return problems

    servers = Servers(
        registry=REGISTRY,
        readiness=not_ready,
        bind_address=settings.bind_address,
        metrics_port=settings.metrics_port,
        health_port=settings.health_port,
    )
    try:
        await servers.start()
    except ListenError as err:
        log.error("operator.cannot_listen", error=str(err), hint="--metrics-port, --health-port, --bind-address")
        close = getattr(raw_cloud, "aclose", None)
        if close is not None:
            await close()
        await client.close()
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    record_start(now=clock.now().timestamp())
    tasks: list[asyncio.Task[None]] = [asyncio.create_task(cluster.run(), name="cache")]

    async def lead() -> None:
        if elector is not None:
            tasks.append(asyncio.create_task(elector.run(), name="leader-election"))
            await elector.is_leader.wait()
        await cluster.wait_synced()
        log.info("operator.started", synced=True)
        LEADER.set(1)
        state_metrics.watch(cluster)  # the leader alone serves them, so sums over replicas count once
        controllers = build_controllers(ctx, provider_loops=provider_loops)
        await asyncio.gather(*(_supervise(type(c).__name__, c.run, clock) for c in controllers))

    tasks.append(asyncio.create_task(lead(), name="controllers"))
    waiters = [asyncio.create_task(stop.wait())]
    if elector is not None:
        waiters.append(asyncio.create_task(elector.lost.wait()))
    done, _ = await asyncio.wait([*waiters, *tasks], return_when=asyncio.FIRST_COMPLETED)
    exit_code = 0
    for task in done:
        if task in tasks and task.exception() is not None:
            log.error("operator.task_failed", task=task.get_name(), error=repr(task.exception()))
            exit_code = 1
    if elector is not None and elector.lost.is_set():
        exit_code = 1
    LEADER.set(0)
    log.info("operator.stopping")
    for task in [*tasks, *waiters]:
        task.cancel()
    await asyncio.gather(*tasks, *waiters, return_exceptions=True)
    if elector is not None:
        await elector.release()
    await servers.stop()
    close_cloud = getattr(raw_cloud, "aclose", None)  # the aws provider's HTTP sessions
    if close_cloud is not None:
        await close_cloud()
    await client.close()
    log.info("operator.stopped", exit_code=exit_code)
    return exit_code


class _NoMessages:
    """The kwok provider has no queue: its interruptions come from annotations."""

    async def receive(self) -> list[Any]:
        return []

    async def delete(self, message: Any) -> None:
        return None


async def _supervise(name: str, run: Callable[[], Awaitable[None]], clock: Clock) -> None:
    """Keep a controller running: a crash is logged and the controller restarted, never the process."""
    backoff = 1.0
    LOOP_RESTARTS.labels(name)  # served as 0 from the start
    while True:
        try:
            await run()
            log.warning("controller.returned", controller=name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("controller.crashed", controller=name, restart_in=backoff)
        LOOP_RESTARTS.labels(name).inc()
        await clock.sleep(backoff)
        backoff = min(backoff * 2, 60.0)
