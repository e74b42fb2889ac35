"""A real moto server on 127.0.0.1 for the aws provider's tests, and a fault-injecting proxy in front.

moto cannot run out of capacity or throttle, so :class:`FaultProxy` (a small HTTP server between the
provider and moto) answers chosen calls itself: an EC2 error (``RequestLimitExceeded`` with 503,
``InvalidParameterValue`` with 400), a CreateFleet answer whose overrides all failed with
``InsufficientInstanceCapacity``, or a canned DescribeCapacityReservations (moto lacks the call).
Every other request goes to moto unchanged. Nothing mocks aioboto3.

World set-up (VPC, subnets in three zones, security groups, tagged images, an IAM role) uses boto3,
which moto brings along; only the provider under test uses aioboto3.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import aioboto3
import boto3
import pytest
from moto.server import ThreadedMotoServer

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import FakeClock, format_time
from controller.cloudprovider.aws.api import AWSApi, RetryPolicy
from controller.cloudprovider.aws.instancetypes import on_demand_prices
from controller.cloudprovider.aws.nodeclass import resolve
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.aws.status import desired_status
from controller.cloudprovider.unavailable import UnavailableOfferings

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
Obj = dict[str, Any]
Params = dict[str, str]
Rule = Callable[[str, Params], tuple[int, str] | None]
_ids = itertools.count(1)
TEST_TYPES = ("m5.large", "m5.xlarge", "g6.xlarge", "g6.2xlarge", "p5.48xlarge")
# the shipped prices of a few types: fewer types to describe keeps the moto answers small and fast
TEST_PRICES = {name: price for name, price in on_demand_prices(REGION).items() if name in TEST_TYPES}


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ["AWS_DEFAULT_REGION"] = REGION
    # AWS's managed policies (AmazonEKSWorkerNodePolicy, ...) exist, as the getting-started guide needs
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


class FaultProxy:
    """Forwards to moto, except for requests a rule answers. Records the Action of every request."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.rules: list[Rule] = []
        self.actions: list[str] = []
        self.requests: list[tuple[str, Params]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                params = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
                action = params.get("Action") or str(self.headers.get("X-Amz-Target") or "")
                if "Action" not in params:  # the JSON protocol: the request is a JSON document
                    params = {"Body": body.decode("utf-8", "replace")}
                proxy.actions.append(action)
                proxy.requests.append((action, params))
                for rule in list(proxy.rules):
                    answer = rule(action, params)
                    if answer is not None:
                        json_answer = answer[1].startswith("{")  # the JSON protocol (Price List API)
                        kind = "application/x-amz-json-1.1" if json_answer else "text/xml"
                        self._send(answer[0], answer[1].encode(), content_type=kind)
                        return
                self._forward("POST", body)

            def do_GET(self) -> None:  # REST APIs (EKS DescribeCluster): forwarded as they are
                proxy.actions.append(f"GET {self.path}")
                self._forward("GET", None)

            def _forward(self, method: str, body: bytes | None) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                request = urllib.request.Request(proxy.upstream + self.path, data=body, headers=headers, method=method)
                try:
                    with urllib.request.urlopen(request, timeout=30) as resp:
                        self._send(resp.status, resp.read(), content_type=resp.headers.get("Content-Type"))
                except urllib.error.HTTPError as err:
                    self._send(err.code, err.read(), content_type=err.headers.get("Content-Type"))

            def _send(self, status: int, payload: bytes, *, content_type: str | None = "text/xml") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "text/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, action: str, *, code: str, status: int = 400, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``action`` with an EC2 error."""
        left = [times]

        def rule(got: str, params: Params) -> tuple[int, str] | None:
            if got != action or left[0] <= 0:
                return None
            left[0] -= 1
            return status, ec2_error(code, f"injected {code}")

        self.rules.append(rule)

    def count(self, action: str) -> int:
        return self.actions.count(action)


def ec2_error(code: str, message: str) -> str:
    return (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>injected</RequestID></Response>"
    )


def overrides_of(params: Params) -> list[tuple[str, str, str]]:
    """(template name, instance type, subnet) of every override in a CreateFleet request."""
    out = []
    for key, value in params.items():
        if key.startswith("LaunchTemplateConfigs.") and key.endswith(".InstanceType"):
            prefix = key.removesuffix(".InstanceType")
            config = key.split(".Overrides.")[0]
            template = params.get(f"{config}.LaunchTemplateSpecification.LaunchTemplateName", "")
            out.append((template, value, params.get(f"{prefix}.SubnetId", "")))
    return sorted(out)


def ice_answer(
    failed: list[tuple[str, str, str]],
    *,
    code: str = "InsufficientInstanceCapacity",
    message: str = "We currently do not have sufficient capacity in the Availability Zone you requested.",
    lifecycle: str = "on-demand",
) -> str:
    """A CreateFleet answer in which every override of ``failed`` failed with ``code``."""
    items = "".join(
        "<item><launchTemplateAndOverrides><launchTemplateSpecification>"
        f"<launchTemplateName>{t}</launchTemplateName><version>1</version></launchTemplateSpecification>"
        f"<overrides><instanceType>{it}</instanceType><subnetId>{subnet}</subnetId></overrides>"
        f"</launchTemplateAndOverrides><lifecycle>{lifecycle}</lifecycle>"
        f"<errorCode>{code}</errorCode><errorMessage>{message}</errorMessage></item>"
        for t, it, subnet in failed
    )
    return (
        '<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>injected</requestId>'
        f"<fleetId>fleet-injected</fleetId><errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
    )


@pytest.fixture
def proxy(moto_url: str) -> Iterator[FaultProxy]:
    p = FaultProxy(moto_url)
    yield p
    p.stop()


@dataclass
class World:
    """One test's slice of the moto account: its own tags, cluster name, subnets, groups, images."""

    tag: str
    cluster: str
    vpc: str
    subnets: dict[str, str]  # zone -> subnet id
    security_group: str  # the VPC's default group, tagged for the test
    named_group: str  # another group, untagged, named nodes-<tag>
    images: list[str]
    role: str
    ec2: Any
    iam: Any
    classes: dict[str, Obj] = field(default_factory=dict)

    def tag_image(self, image: str, *, on: bool) -> None:
        if on:
            self.ec2.create_tags(Resources=[image], Tags=[{"Key": "joiner.sh/test", "Value": self.tag}])
        else:
            self.ec2.delete_tags(Resources=[image], Tags=[{"Key": "joiner.sh/test"}])

    def nodeclass(self, name: str = "gpu", **spec: Any) -> Obj:
        body: Obj = {
            "role": self.role,
            "amiSelectorTerms": [{"tags": {"joiner.sh/test": self.tag}}],
            "subnetSelectorTerms": [{"tags": {"joiner.sh/test": self.tag}}],
            "securityGroupSelectorTerms": [{"tags": {"joiner.sh/test": self.tag}}],
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "200Gi", "volumeType": "gp3"}}
            ],
        }
        body.update(spec)
        return {
            "apiVersion": "joiner.sh/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name, "generation": 1},
            "spec": body,
        }


@pytest.fixture(scope="session")
def amazon_images(moto_url: str) -> tuple[str, str]:
    """Two x86_64 images moto ships (listing them is slow, so once per session)."""
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)
    found = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}])
    first, second = (i["ImageId"] for i in found["Images"][:2])
    return first, second


@pytest.fixture(scope="session")
def boto_clients(moto_url: str) -> tuple[Any, Any]:
    """Synchronous EC2 and IAM clients that set up each test's world."""
    return (
        boto3.client("ec2", region_name=REGION, endpoint_url=moto_url),
        boto3.client("iam", region_name=REGION, endpoint_url=moto_url),
    )


@pytest.fixture
def world(boto_clients: tuple[Any, Any], amazon_images: tuple[str, str]) -> World:
    n = next(_ids)
    tag = f"w{n}-{os.getpid()}"
    ec2, iam = boto_clients
    test_tag = [{"Key": "joiner.sh/test", "Value": tag}]
    vpc = ec2.create_vpc(CidrBlock=f"10.{n % 250}.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for i, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.{n % 250}.{i}.0/24", AvailabilityZone=zone)["Subnet"]
        ec2.create_tags(Resources=[subnet["SubnetId"]], Tags=test_tag)
        subnets[zone] = subnet["SubnetId"]
    # moto puts every instance in its VPC's default group whatever the launch template says, so the
    # world's classes select that group: what moto launches is then what AWS would launch
    group = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"][0]["GroupId"]
    ec2.create_tags(Resources=[group], Tags=test_tag)
    named = ec2.create_security_group(GroupName=f"nodes-{tag}", Description="nodes", VpcId=vpc)["GroupId"]
    images = list(amazon_images)
    ec2.create_tags(Resources=[images[0]], Tags=test_tag)
    role = f"node-role-{tag}"
    iam.create_role(RoleName=role, AssumeRolePolicyDocument="{}")
    return World(
        tag=tag,
        cluster=f"cluster-{tag}",
        vpc=vpc,
        subnets=subnets,
        security_group=group,
        named_group=named,
        images=images,
        role=role,
        ec2=ec2,
        iam=iam,
    )


@pytest.fixture(scope="session")
def aws_session(moto_url: str) -> Any:
    """One aioboto3 session for every test: it loads the EC2 service model once."""
    return aioboto3.Session(region_name=REGION)


@pytest.fixture
async def api(proxy: FaultProxy, aws_session: Any) -> AsyncIterator[AWSApi]:
    aws = AWSApi(
        region=REGION,
        endpoint_url=proxy.url,
        retry=RetryPolicy(attempts=4, base_seconds=0.01, cap_seconds=0.05),
        session=aws_session,
    )
    yield aws
    await aws.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def serve_ssm_parameters(proxy: FaultProxy, parameters: dict[str, str]) -> list[list[str]]:
    """Answer SSM GetParameters like AWS does for its public parameters (moto has none of EKS's and
    refuses to store names under /aws/): the known ones, the rest as InvalidParameters. Returns the
    names asked, per request."""
    asked: list[list[str]] = []

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "AmazonSSM.GetParameters":
            return None
        names = list(json.loads(params["Body"]).get("Names") or [])
        asked.append(names)
        found = [
            {"Name": n, "Type": "String", "Value": parameters[n], "Version": 1, "DataType": "aws:ec2:image"}
            for n in names
            if n in parameters
        ]
        return 200, json.dumps({"Parameters": found, "InvalidParameters": [n for n in names if n not in parameters]})

    proxy.rules.append(rule)
    return asked


def serve_placement_groups(proxy: FaultProxy) -> dict[str, dict[str, str]]:
    """EC2's placement group calls, which moto lacks: Create (with tags), Describe (by tag filter),
    Delete. Returns the groups by name, with their tags."""
    groups: dict[str, dict[str, str]] = {}
    xmlns = 'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"'

    def item(name: str) -> str:
        tags = "".join(f"<item><key>{k}</key><value>{v}</value></item>" for k, v in groups[name].items())
        return (
            f"<groupName>{name}</groupName><state>available</state><strategy>cluster</strategy>"
            f"<groupId>pg-{abs(hash(name)) % 10**12:012d}</groupId><tagSet>{tags}</tagSet>"
        )

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action == "CreatePlacementGroup":
            name = params["GroupName"]
            if name in groups:
                return 400, ec2_error(
                    "InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists."
                )
            tags = {}
            for key, value in params.items():
                if key.startswith("TagSpecification.1.Tag.") and key.endswith(".Key"):
                    tags[value] = params[key.removesuffix(".Key") + ".Value"]
            groups[name] = tags
            body = f"<requestId>x</requestId><placementGroup>{item(name)}</placementGroup>"
            return 200, f"<CreatePlacementGroupResponse {xmlns}>{body}</CreatePlacementGroupResponse>"
        if action == "DescribePlacementGroups":
            wanted = {
                params[k].removeprefix("tag:"): params[k.removesuffix("Name") + "Value.1"]
                for k in params
                if k.startswith("Filter.") and k.endswith(".Name")
            }
            found = [n for n, tags in groups.items() if all(tags.get(k) == v for k, v in wanted.items())]
            items = "".join(f"<item>{item(n)}</item>" for n in found)
            body = f"<requestId>x</requestId><placementGroupSet>{items}</placementGroupSet>"
            return 200, f"<DescribePlacementGroupsResponse {xmlns}>{body}</DescribePlacementGroupsResponse>"
        if action == "DeletePlacementGroup":
            if groups.pop(params["GroupName"], None) is None:
                return 400, ec2_error("InvalidPlacementGroup.Unknown", "The placement group is unknown.")
            body = "<requestId>x</requestId><return>true</return>"
            return 200, f"<DeletePlacementGroupResponse {xmlns}>{body}</DeletePlacementGroupResponse>"
        return None

    proxy.rules.append(rule)
    return groups


def named_image(world: World, name: str, *, arch: str = "x86_64") -> str:
    """An image in the moto account with an EKS-style name (a copy of one moto ships)."""
    found = world.ec2.describe_images(ImageIds=[world.images[0 if arch == "x86_64" else 1]])["Images"][0]
    copy = world.ec2.copy_image(SourceImageId=found["ImageId"], SourceRegion=REGION, Name=name)
    return str(copy["ImageId"])


async def resolve_into(
    world: World, obj: Obj, *, api: AWSApi, clock: FakeClock, kubernetes_version: str | None = None
) -> Obj:
    """Resolve an EC2NodeClass the way the status controller does and keep it with its status."""
    resolution = await resolve(
        api, EC2NodeClass.model_validate(obj), cluster=world.cluster, kubernetes_version=kubernetes_version
    )
    obj = {**obj, "status": desired_status(obj, resolution, now=format_time(clock.now()))}
    world.classes[obj["metadata"]["name"]] = obj
    return obj


@pytest.fixture
async def provider(world: World, api: AWSApi, clock: FakeClock) -> AWSCloudProvider:
    await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    return AWSCloudProvider(
        prices=TEST_PRICES,
        api=api,
        cluster_name=world.cluster,
        nodeclasses=lambda: world.classes,
        clock=clock,
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=180),
    )


def nodeclaim(
    name: str,
    *,
    types: list[str],
    capacity_types: list[str] | None = None,
    nodeclass: str = "gpu",
    uid: str | None = None,
) -> Obj:
    reqs: list[Obj] = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]
    if capacity_types:
        reqs.append({"key": "joiner.sh/capacity-type", "operator": "In", "values": capacity_types})
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "labels": {"joiner.sh/nodepool": "gpu"}},
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "EC2NodeClass", "name": nodeclass},
            "requirements": reqs,
            "resources": {"requests": {"cpu": "1"}},
        },
    }
