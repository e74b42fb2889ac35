"""``joiner run``: the controller's command line (every flag, its environment variable and its
default) and the start of the operator with the settings it makes."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
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
        "--reserve",
        action=argparse.BooleanOptionalAction,
        default=d.reserve,
        help="with --nominate: open each Node bought for pending pods with the joiner.sh/planned=<NodeClaim> "
        "taint, add its toleration to the pods planned there, and take the taint off once they are bound, so "
        "no other pod takes their room (off: nominations alone; default: on)",
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
    p.set_defaults(handler=run)
    use_durations(p)
    return p


def run(args: argparse.Namespace) -> int:
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
        reserve=args.reserve,
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
