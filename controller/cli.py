"""The `joiner` command: `joiner run` (the controller), `joiner plan` (the solver offline)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

# `joiner plan` is a short-lived command: what only `joiner run` and `joiner forecast` use
# (asyncio, the settings models, package metadata) is imported where they use it


class _Version(argparse.Action):
    """``--version``: reads the installed package's version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(f"joiner {_version()}\n")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("joiner")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _add_run(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from controller.envsettings import use_durations
    from controller.settings import Settings

    d = Settings()
    p = subparsers.add_parser(
        "run",
        help="run the controller",
        description="Watch unschedulable pods, provision NodeClaims and nodes, and manage their lifecycle. "
        "Every flag can also be set by an environment variable (docs/settings.md): the flag's name in upper "
        "case, e.g. BATCH_MAX_DURATION=10s; durations take Go's form (10s, 1m30s, 15m) or seconds.",
    )
    p.add_argument(
        "--provider", choices=["kwok", "aws", "gcp", "azure"], default="kwok", help="the cloud provider (default: kwok)"
    )
    p.add_argument(
        "--cluster-name",
        help="aws, gcp, azure: the cluster's name; instances are tagged joiner.sh/cluster=NAME "
        "(gcp: label joiner-cluster, azure: tag joiner-cluster)",
    )
    p.add_argument(
        "--region",
        help="aws: the region (default: from the standard AWS configuration); gcp: the region of the shipped "
        "price table (default: us-central1)",
    )
    p.add_argument(
        "--interruption-subscription",
        metavar="NAME",
        help="gcp: Pub/Sub subscription of the Compute Engine audit-log sink, projects/P/subscriptions/S",
    )
    p.add_argument(
        "--gcp-compute-endpoint",
        metavar="URL",
        help="gcp: the Compute Engine API root (tests: a fake server, e.g. http://127.0.0.1:8090/compute/v1/); "
        "an http:// endpoint is sent no credentials",
    )
    p.add_argument("--gcp-pubsub-endpoint", metavar="URL", help="gcp: the Pub/Sub API root (tests: a fake server)")
    p.add_argument(
        "--gcp-billing-endpoint", metavar="URL", help="gcp: the Cloud Billing API root (tests: a fake server)"
    )
    p.add_argument("--gcp-container-endpoint", metavar="URL", help="gcp: the GKE API root (tests: a fake server)")
    p.add_argument(
        "--azure-endpoint",
        metavar="URL",
        help="azure: the Resource Manager root (tests: a fake server); an http:// endpoint is sent no credentials",
    )
    p.add_argument("--azure-prices-endpoint", metavar="URL", help="azure: the Retail Prices API root (tests)")
    p.add_argument(
        "--azure-interruption-queue",
        metavar="URL",
        help="azure: Service Bus queue of Resource Health events, https://NAMESPACE.servicebus.windows.net/QUEUE",
    )
    p.add_argument("--interruption-queue", metavar="URL", help="aws: SQS queue URL of interruption events")
    p.add_argument("--aws-endpoint-url", metavar="URL", help="aws: send AWS calls here (tests, e.g. a moto server)")
    p.add_argument(
        "--cluster-endpoint",
        metavar="URL",
        help="aws: the API server URL kubelets join (default: from EKS DescribeCluster)",
    )
    p.add_argument(
        "--cluster-ca-bundle",
        metavar="BASE64",
        help="aws: the cluster's CA certificate, base64 PEM (default: from EKS DescribeCluster)",
    )
    p.add_argument(
        "--cluster-cidr",
        metavar="CIDR",
        help="aws: the cluster's service CIDR, for the kubelet's DNS (default: from EKS DescribeCluster)",
    )
    p.add_argument(
        "--cluster-version",
        metavar="VERSION",
        help="aws: the cluster's Kubernetes version (1.31), whose images the al2023 and bottlerocket "
        "aliases select (default: from EKS DescribeCluster)",
    )
    p.add_argument(
        "--aws-pricing-refresh",
        type=float,
        default=43200.0,
        metavar="SECONDS",
        help="aws: refresh the shipped on-demand prices from the AWS Price List API this often (0: never)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level")
    p.add_argument(
        "--log-format",
        choices=["json", "console", "auto"],
        default="auto",
        help="log lines as JSON or for a console (auto: console on a terminal)",
    )
    p.add_argument("--metrics-port", type=int, default=d.metrics_port, help="serve /metrics here (0: none)")
    p.add_argument("--health-port", type=int, default=d.health_port, help="serve /healthz and /readyz here")
    p.add_argument("--bind-address", default=d.bind_address, help="address the metrics and health servers listen on")
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader through a Lease so that only one replica acts (default: on)",
    )
    p.add_argument(
        "--leader-elect-lease-duration",
        type=float,
        default=d.leader_lease_seconds,
        metavar="SECONDS",
        help="how long a standby waits, after it last saw the Lease change, before it takes over",
    )
    p.add_argument(
        "--leader-elect-renew-deadline",
        type=float,
        default=d.leader_renew_deadline_seconds,
        metavar="SECONDS",
        help="the leader stops acting when it could not renew the Lease for this long (shorter than the lease)",
    )
    p.add_argument(
        "--leader-elect-retry-period",
        type=float,
        default=d.leader_retry_period_seconds,
        metavar="SECONDS",
        help="time between attempts to acquire or renew the Lease",
    )
    p.add_argument(
        "--leader-elect-namespace",
        default="kube-system",
        help="the controller's namespace: its Lease and the forecast's history ConfigMap live there",
    )
    p.add_argument(
        "--batch-idle-duration",
        type=float,
        default=d.batch_idle_seconds,
        metavar="SECONDS",
        help="a batch of pending pods closes after this long without a new one",
    )
    p.add_argument(
        "--batch-max-duration",
        type=float,
        default=d.batch_max_seconds,
        metavar="SECONDS",
        help="a batch closes this long after it opened at the latest",
    )
    p.add_argument(
        "--launch-timeout",
        type=float,
        default=d.launch_timeout_seconds,
        metavar="SECONDS",
        help="a NodeClaim not launched by then is deleted (its pods get a new decision)",
    )
    p.add_argument(
        "--registration-timeout",
        type=float,
        default=d.registration_timeout_seconds,
        metavar="SECONDS",
        help="a launched NodeClaim whose Node has not registered by then is deleted",
    )
    p.add_argument(
        "--initialization-timeout",
        type=float,
        default=d.initialization_timeout_seconds,
        metavar="SECONDS",
        help="a registered NodeClaim not Initialized (Ready, GPUs shown) by then is deleted",
    )
    p.add_argument(
        "--unavailable-offering-ttl",
        type=float,
        default=d.unavailable_offering_ttl_seconds,
        metavar="SECONDS",
        help="an offering that returned insufficient capacity is avoided this long",
    )
    p.add_argument(
        "--watch-timeout",
        type=float,
        default=d.watch_timeout_seconds,
        metavar="SECONDS",
        help="each watch is ended by the apiserver after this long and resumed from the last "
        "resourceVersion seen (a full list only after 410 Gone or an error)",
    )
    p.add_argument(
        "--gc-interval",
        type=float,
        default=d.gc_interval_seconds,
        metavar="SECONDS",
        help="time between garbage-collection passes (instances and Nodes without a NodeClaim)",
    )
    p.add_argument(
        "--disruption-poll-interval",
        type=float,
        default=d.disruption_poll_interval_seconds,
        metavar="SECONDS",
        help="seconds between disruption planning passes",
    )
    p.add_argument(
        "--disruption-validation-delay",
        type=float,
        default=d.disruption_validation_delay_seconds,
        metavar="SECONDS",
        help="seconds a consolidation waits before it is checked again and carried out",
    )
    p.add_argument(
        "--gang-timeout",
        type=float,
        default=d.gang_timeout_seconds,
        metavar="SECONDS",
        help="default deadline for every NodeClaim of a gang to be Initialized before it is rolled back",
    )
    p.add_argument(
        "--gang-member-wait",
        type=float,
        default=d.gang_member_wait_seconds,
        metavar="SECONDS",
        help="after this long, an incomplete gang gets an Event saying how many members are missing",
    )
    p.add_argument(
        "--gang-backoff",
        type=float,
        default=d.gang_backoff_seconds,
        metavar="SECONDS",
        help="wait after a gang's first rollback; doubles on each further rollback",
    )
    p.add_argument(
        "--gang-backoff-max",
        type=float,
        default=d.gang_backoff_max_seconds,
        metavar="SECONDS",
        help="the most a gang waits between attempts",
    )
    p.add_argument(
        "--provisioning-requests",
        action=argparse.BooleanOptionalAction,
        default=d.provisioning_requests,
        help="serve ProvisioningRequests (autoscaling.x-k8s.io/v1, what Kueue's ProvisioningRequest admission "
        "check creates; docs/kueue.md); default: when their CRD is installed at start",
    )
    p.add_argument(
        "--provisioning-request-booking",
        type=float,
        default=d.provisioning_request_booking_seconds,
        metavar="SECONDS",
        help="how long capacity provisioned for a ProvisioningRequest is held for its pods before BookingExpired=True",
    )
    p.add_argument(
        "--nominate",
        action=argparse.BooleanOptionalAction,
        default=d.nominate,
        help="set status.nominatedNodeName of each planned pod once its node exists, so kube-scheduler "
        "follows the plan (default: on)",
    )
    p.add_argument(
        "--plan-untried",
        action=argparse.BooleanOptionalAction,
        default=d.plan_untried_after_seconds is not None,
        help="also plan pending pods kube-scheduler has not tried yet, once they waited --plan-untried-after "
        "seconds (a scheduler backlog in a large burst); off: only pods it marked unschedulable (default: on)",
    )
    p.add_argument(
        "--plan-untried-after",
        type=float,
        default=d.plan_untried_after_seconds if d.plan_untried_after_seconds is not None else 2.0,
        metavar="SECONDS",
        help="how long a pod kube-scheduler has not tried waits before it is planned",
    )
    p.add_argument("--catalog", help="instance catalog JSON for the kwok provider (default: the built-in one)")
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="read DCGM GPU utilization (DCGM_FI_DEV_GPU_UTIL) from this Prometheus and mark idle GPU nodes "
        "(default: off)",
    )
    p.add_argument(
        "--gpu-idle-threshold",
        type=float,
        default=d.gpu_idle_threshold_percent,
        metavar="PERCENT",
        help="a node is idle while every GPU stays below this utilization (default: 20)",
    )
    p.add_argument(
        "--gpu-idle-window",
        type=float,
        default=d.gpu_idle_window_seconds,
        metavar="SECONDS",
        help="how long the GPUs must stay below the threshold",
    )
    p.add_argument(
        "--gpu-idle-poll",
        type=float,
        default=d.gpu_idle_poll_seconds,
        metavar="SECONDS",
        help="time between GPU utilization queries",
    )
    p.add_argument(
        "--gpu-utilization-node-label",
        default=d.gpu_utilization_node_label,
        metavar="LABEL",
        help="the label naming the node on DCGM series (dcgm-exporter: Hostname; often node after relabeling)",
    )
    p.set_defaults(handler=_run)
    use_durations(p)
    return p


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from controller.operator.app import AWSOptions, AzureOptions, GCPOptions, run_operator
    from controller.operator.leader import LeaderElectionError, check_timings
    from controller.operator.logging import configure
    from controller.settings import Settings

    try:
        check_timings(
            lease=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
    except LeaderElectionError as err:
        print(f"joiner run: {err}", file=sys.stderr)
        return 2
    if not args.plan_untried_after >= 0:
        print(f"joiner run: --plan-untried-after must be 0 or more, got {args.plan_untried_after}", file=sys.stderr)
        return 2
    if args.prometheus_url:
        from datetime import timedelta

        from controller.gpuidle.prometheus import utilization_query
        from controller.gpuidle.tracker import IdlePolicy, IdlePolicyError

        try:
            IdlePolicy(threshold_percent=args.gpu_idle_threshold, window=timedelta(seconds=args.gpu_idle_window))
            utilization_query(node_label=args.gpu_utilization_node_label, range_seconds=60)
        except (IdlePolicyError, ValueError) as err:
            print(f"joiner run: {err}", file=sys.stderr)
            return 2
        if not args.gpu_idle_poll > 0:
            print(f"joiner run: --gpu-idle-poll must be longer than zero, got {args.gpu_idle_poll}", file=sys.stderr)
            return 2
    if args.provider in ("aws", "gcp", "azure") and not args.cluster_name:
        print(f"joiner run: --provider {args.provider} needs --cluster-name", file=sys.stderr)
        return 2
    configure(level=args.log_level, json_output=None if args.log_format == "auto" else args.log_format == "json")
    settings = Settings(
        batch_idle_seconds=args.batch_idle_duration,
        batch_max_seconds=args.batch_max_duration,
        nominate=args.nominate,
        namespace=args.leader_elect_namespace,
        leader_lease_seconds=args.leader_elect_lease_duration,
        leader_renew_deadline_seconds=args.leader_elect_renew_deadline,
        leader_retry_period_seconds=args.leader_elect_retry_period,
        plan_untried_after_seconds=args.plan_untried_after if args.plan_untried else None,
        launch_timeout_seconds=args.launch_timeout,
        registration_timeout_seconds=args.registration_timeout,
        initialization_timeout_seconds=args.initialization_timeout,
        unavailable_offering_ttl_seconds=args.unavailable_offering_ttl,
        gc_interval_seconds=args.gc_interval,
        watch_timeout_seconds=args.watch_timeout,
        disruption_poll_interval_seconds=args.disruption_poll_interval,
        disruption_validation_delay_seconds=args.disruption_validation_delay,
        gang_timeout_seconds=args.gang_timeout,
        gang_member_wait_seconds=args.gang_member_wait,
        gang_backoff_seconds=args.gang_backoff,
        gang_backoff_max_seconds=args.gang_backoff_max,
        provisioning_requests=args.provisioning_requests,
        provisioning_request_booking_seconds=args.provisioning_request_booking,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        bind_address=args.bind_address,
        prometheus_url=args.prometheus_url,
        gpu_idle_threshold_percent=args.gpu_idle_threshold,
        gpu_idle_window_seconds=args.gpu_idle_window,
        gpu_idle_poll_seconds=args.gpu_idle_poll,
        gpu_utilization_node_label=args.gpu_utilization_node_label,
    )
    return asyncio.run(
        run_operator(
            kubeconfig=args.kubeconfig,
            provider=args.provider,
            settings=settings,
            leader_elect=args.leader_elect,
            leader_namespace=args.leader_elect_namespace,
            catalog=args.catalog,
            aws=AWSOptions(
                cluster_name=args.cluster_name,
                region=args.region,
                endpoint_url=args.aws_endpoint_url,
                pricing_refresh_seconds=args.aws_pricing_refresh,
                cluster_endpoint=args.cluster_endpoint,
                cluster_ca_bundle=args.cluster_ca_bundle,
                cluster_cidr=args.cluster_cidr,
                cluster_version=args.cluster_version,
                interruption_queue=args.interruption_queue,
            )
            if args.provider == "aws"
            else None,
            gcp=GCPOptions(
                cluster_name=args.cluster_name,
                region=args.region or "us-central1",
                compute_endpoint=args.gcp_compute_endpoint,
                pubsub_endpoint=args.gcp_pubsub_endpoint,
                billing_endpoint=args.gcp_billing_endpoint,
                container_endpoint=args.gcp_container_endpoint,
                interruption_subscription=args.interruption_subscription,
                anonymous=str(args.gcp_compute_endpoint or "").startswith("http://"),
            )
            if args.provider == "gcp"
            else None,
            azure=AzureOptions(
                cluster_name=args.cluster_name,
                endpoint=args.azure_endpoint,
                prices_endpoint=args.azure_prices_endpoint,
                interruption_queue=args.azure_interruption_queue,
            )
            if args.provider == "azure"
            else None,
        )
    )


def _add_forecast(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "forecast",
        help="show a NodePool's learned demand profile and the next pre-warm decision",
        description="Show the weekly demand profile the forecast learned for a NodePool, and what it would "
        "pre-warm now and how sure it is. Reads the history from the cluster (ConfigMap "
        "joiner-forecast-history) or from a file.",
    )
    p.add_argument("--nodepool", required=True, help="the NodePool")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--namespace", default="kube-system", help="the controller's namespace (default: kube-system)")
    p.add_argument("--history", help="read the history from this file instead (the ConfigMap as YAML/JSON)")
    p.add_argument("--at", help="decide as of this UTC time (ISO 8601; default: now)")
    p.add_argument("--current", type=float, help="demand in use now (default: 0 with --history; the cluster's)")
    p.add_argument("--lookback", default="168h", help="with --history: the lookback (default 168h)")
    p.add_argument("--lead-time", default="30m", help="with --history: the lead time (default 30m)")
    p.add_argument("--confidence", type=float, default=0.7, help="with --history: the threshold (default 0.7)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(handler=_forecast)


def _forecast(args: argparse.Namespace) -> int:
    import asyncio
    from datetime import UTC, datetime

    from api.v1.types import parse_duration
    from controller.capacity.explain import explain, to_json, to_text
    from controller.capacity.forecast import ForecastConfig, ForecastError
    from controller.capacity.history import History, HistoryError

    try:
        now = datetime.fromisoformat(args.at.replace("Z", "+00:00")).astimezone(UTC) if args.at else datetime.now(UTC)
    except ValueError:
        print(f"joiner forecast: --at {args.at!r} is not an ISO 8601 time", file=sys.stderr)
        return 2
    try:
        if args.history:
            from controller.serialization import load_yaml

            with open(args.history, encoding="utf-8") as f:
                doc = load_yaml(f.read(), strict=True)
            data = (doc.get("data") if isinstance(doc, dict) and "data" in doc else doc) or {}
            if args.nodepool not in data:
                print(f"joiner forecast: {args.history} has no history for NodePool {args.nodepool}", file=sys.stderr)
                return 1
            history = History.from_json(str(data[args.nodepool]))
            lookback, lead_time = parse_duration(args.lookback), parse_duration(args.lead_time)
            if lookback is None or lead_time is None:
                raise ValueError("--lookback and --lead-time must be durations such as 168h or 30m, not Never")
            config = ForecastConfig(lookback=lookback, lead_time=lead_time, confidence=args.confidence)
            current = args.current or 0.0
        else:
            history, config, current = asyncio.run(_forecast_from_cluster(args, now))
    except (OSError, HistoryError, ForecastError, ValueError) as err:
        print(f"joiner forecast: {err}", file=sys.stderr)
        return 1
    result = explain(args.nodepool, history, now=now, current=current, config=config)
    print(to_json(result) if args.output == "json" else to_text(result))
    return 0


async def _forecast_from_cluster(args: argparse.Namespace, now: object) -> tuple[Any, Any, float]:
    from api.v1.nodepool import NodePool
    from api.v1.validation import validate
    from controller.capacity.controller import HISTORY_CONFIGMAP, forecast_config
    from controller.capacity.forecast import ForecastConfig
    from controller.capacity.history import History
    from controller.kube.client import KubeClient, NotFoundError
    from controller.kube.resources import CONFIGMAPS, NODEPOOLS

    client = await KubeClient.connect(args.kubeconfig)
    try:
        try:
            pool = await client.get(NODEPOOLS, args.nodepool)
        except NotFoundError as err:
            raise ValueError(f"NodePool {args.nodepool} not found") from err
        model = validate(NodePool, pool)
        capacity = model.spec.capacity
        config = forecast_config(capacity.forecast if capacity else None) or ForecastConfig()
        try:
            cm = await client.get(CONFIGMAPS, HISTORY_CONFIGMAP, namespace=args.namespace)
            raw = (cm.get("data") or {}).get(args.nodepool)
        except NotFoundError:
            raw = None
        history = History.from_json(raw) if raw else History()
        current = args.current if args.current is not None else 0.0
        return history, config, current
    finally:
        await client.close()


def _add_aws(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    aws = subparsers.add_parser(
        "aws",
        help="AWS helpers: check an EC2NodeClass before the first launch",
        description="AWS helpers for the aws provider. 'joiner aws check --nodeclass NAME' checks, one line each, "
        "what the first launch of an EC2NodeClass needs, and says how to fix what fails.",
    )
    commands = aws.add_subparsers(title="commands", metavar="COMMAND")
    p = commands.add_parser(
        "check",
        help="check that an EC2NodeClass can launch: credentials, cluster, images, network, IAM, quotas",
        description="One line per check, ✔ or ✘ with the fix: credentials, region, EKS DescribeCluster, the "
        "images per Kubernetes version, subnets and security groups, the user data rendered and parsed, "
        "CreateLaunchTemplate/CreateFleet/RunInstances with DryRun, the Spot service-linked role and the "
        "G/P/Spot vCPU quotas. Creates nothing. Exit code 1 when any check fails.",
    )
    p.add_argument("--nodeclass", required=True, help="the EC2NodeClass (read from the cluster, or from --file)")
    p.add_argument("-f", "--file", help="read the EC2NodeClass from this manifest (YAML/JSON) instead of the cluster")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument(
        "--cluster-name", default=os.environ.get("CLUSTER_NAME"), help="the cluster's name (default: $CLUSTER_NAME)"
    )
    p.add_argument("--region", default=os.environ.get("AWS_REGION"), help="the region (default: the AWS config)")
    p.add_argument("--aws-endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"), help=argparse.SUPPRESS)
    for flag in ("--cluster-endpoint", "--cluster-ca-bundle", "--cluster-cidr", "--cluster-version"):
        p.add_argument(flag, default=os.environ.get(flag.strip("-").replace("-", "_").upper()), help="as for run")
    p.set_defaults(handler=_aws_check)


def _read_nodeclass(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    import yaml

    if args.file:
        with open(args.file, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                kind, meta = (doc.get("kind"), doc.get("metadata") or {}) if isinstance(doc, dict) else (None, {})
                if kind == "EC2NodeClass" and meta.get("name") == args.nodeclass:
                    return dict(doc)
        raise ValueError(f"{args.file} has no EC2NodeClass {args.nodeclass!r}")

    async def from_cluster() -> dict[str, Any]:
        from controller.kube.client import KubeClient, NotFoundError
        from controller.kube.resources import EC2NODECLASSES

        client = await KubeClient.connect(args.kubeconfig)
        try:
            found: dict[str, Any] = await client.get(EC2NODECLASSES, args.nodeclass)
            return found
        except NotFoundError as err:
            raise ValueError(f"EC2NodeClass {args.nodeclass} not found") from err
        finally:
            await client.close()

    return asyncio.run(from_cluster())


def _aws_check(args: argparse.Namespace) -> int:
    import asyncio

    if not args.cluster_name:
        print("joiner aws check: give --cluster-name (or CLUSTER_NAME)", file=sys.stderr)
        return 2
    try:
        nodeclass = _read_nodeclass(args)
    except (OSError, ValueError) as err:
        print(f"joiner aws check: {err}", file=sys.stderr)
        return 2

    async def check() -> int:
        from controller.clock import RealClock
        from controller.cloudprovider.aws.api import AWSApi, RetryPolicy
        from controller.cloudprovider.aws.check import run_checks
        from controller.cloudprovider.aws.cluster import ClusterInfoSource, ClusterSettings

        api = AWSApi(region=args.region, endpoint_url=args.aws_endpoint_url, retry=RetryPolicy(attempts=3))
        settings = ClusterSettings(
            endpoint=args.cluster_endpoint,
            ca_bundle=args.cluster_ca_bundle,
            service_cidr=args.cluster_cidr,
            version=args.cluster_version,
        )
        try:
            lines = await run_checks(
                api,
                cluster_name=args.cluster_name,
                nodeclass=nodeclass,
                source=ClusterInfoSource(api, args.cluster_name, settings),
                now=RealClock().now,
            )
        finally:
            await api.close()
        for line in lines:
            print(line.render())
        return 0 if all(line.ok for line in lines) else 1

    return asyncio.run(check())


def build_parser(*, only: str | None = None) -> argparse.ArgumentParser:
    """The ``joiner`` parser; ``only="plan"`` registers the plan command alone (``joiner plan``
    parses the same way and starts sooner)."""
    parser = argparse.ArgumentParser(
        prog="joiner",
        description="A node provisioner for GPU clusters: gangs, GPU-aware packing, warm capacity.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    if only != "plan":
        run = _add_run(subparsers)
        parser.set_defaults(run_parser=run)
    from controller import plan

    plan.add_parser(subparsers)
    if only != "plan":
        _add_forecast(subparsers)
        _add_aws(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["plan"]:
        # joiner's models use no pydantic plugins; looking for them reads the metadata of every
        # installed distribution (about 15 ms of a short command). A value the user set is kept.
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # importing the commands (the API models above all) makes many objects and frees none:
    # the cyclic collector would only re-scan them
    collecting = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(only="plan" if given[:1] == ["plan"] else None)
    finally:
        if collecting:
            gc.enable()
    run = parser.get_default("run_parser")
    if given[:1] == ["run"] and run is not None:
        from controller.envsettings import SettingsError, from_environment

        try:
            run.set_defaults(**from_environment(run, os.environ))  # flags given on the command line win
        except SettingsError as err:
            print(f"joiner run: environment: {err}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
