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
        from controller import cli_run

        run = cli_run.add_parser(subparsers)
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
    # `joiner plan` as a program (not called in a process that goes on): what the imports made
    # lives until the process ends, so the collections of the command would only scan it again
    # (its first, right after, scans every object of them); frozen, they are left out
    short = argv is None and given[:1] == ["plan"]
    if short:
        gc.freeze()
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
    if short:
        # the process ends next: the interpreter's last collections would scan every object left
        # (about 5 % of the command), which the end of the process frees anyway
        gc.freeze()
    return result


if __name__ == "__main__":
    sys.exit(main())
