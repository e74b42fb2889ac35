"""The user data joiner writes so an instance joins the cluster (nodeadm NodeConfig, Bottlerocket TOML)."""

from __future__ import annotations

import base64
import email
import tomllib
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from controller.cloudprovider.aws import toml
from controller.cloudprovider.aws.bootstrap import (
    BootTaint,
    ClusterInfo,
    UserDataError,
    family_of,
    kubelet_labels,
    user_data_for,
)
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.types import CreateError
from tests.aws.conftest import World, nodeclaim, resolve_into

CLUSTER = ClusterInfo(
    name="prod", endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", ca_bundle="Q0E=", service_cidr="10.100.0.0/16"
)
LABELS = {
    "joiner.sh/nodepool": "gpu",
    "team": "ml",
    "joiner.sh/gang": "ns.train",  # per NodeClaim: registration puts it on the Node
    "kubernetes.io/arch": "amd64",  # the kubelet may not set this domain itself
    "node.kubernetes.io/role": "gpu",  # but this one it may
}
TAINTS = [
    BootTaint("nvidia.com/gpu", "NoSchedule", "true"),
    BootTaint("example.com/agent", "NoSchedule"),
    BootTaint("joiner.sh/gang", "NoSchedule", "ns.train"),
]


def parts(document: str) -> list[tuple[str, str]]:
    message = email.message_from_string(document)
    assert message.is_multipart()
    return [(p.get_content_type(), str(p.get_payload()).rstrip("\n")) for p in message.get_payload()]  # type: ignore[union-attr]


def node_config(document: str) -> Any:
    configs = [body for ctype, body in parts(document) if ctype == "application/node.eks.aws"]
    return yaml.safe_load(configs[-1])


def test_al2023_gets_a_node_config_with_the_cluster_labels_and_taints() -> None:
    out = user_data_for("al2023", CLUSTER, labels=LABELS, taints=TAINTS, user_data=None)
    assert out is not None
    config = node_config(out)
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": "prod",
        "apiServerEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": "Q0E=",
        "cidr": "10.100.0.0/16",
    }
    flags = config["spec"]["kubelet"]["flags"]
    assert "--node-labels=joiner.sh/nodepool=gpu,node.kubernetes.io/role=gpu,team=ml" in flags
    assert (
        "--register-with-taints=joiner.sh/unregistered=true:NoSchedule,nvidia.com/gpu=true:NoSchedule,"
        "example.com/agent:NoSchedule" in flags
    )


def test_the_users_script_and_mime_parts_come_first_and_are_kept() -> None:
    script = "#!/bin/bash\necho hello > /etc/motd\n"
    out = user_data_for("al2023", CLUSTER, labels={}, taints=[], user_data=script)
    assert out is not None
    got = parts(out)
    assert got[0] == ("text/x-shellscript", script.rstrip("\n"))
    assert got[1][0] == "application/node.eks.aws"
    theirs = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        "Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  kubelet:\n    config:\n      maxPods: 42\n\n--B\nContent-Type: text/x-shellscript\n\n"
        "#!/bin/sh\ntrue\n\n--B--\n"
    )
    out = user_data_for("al2023", CLUSTER, labels={}, taints=[], user_data=theirs)
    assert out is not None
    got = parts(out)
    assert [c for c, _ in got] == ["application/node.eks.aws", "text/x-shellscript", "application/node.eks.aws"]
    assert yaml.safe_load(got[0][1])["spec"]["kubelet"]["config"]["maxPods"] == 42
    assert got[1][1] == "#!/bin/sh\ntrue"


def test_bottlerocket_gets_kubernetes_settings_after_the_users_toml() -> None:
    out = user_data_for(
        "bottlerocket",
        CLUSTER,
        labels=LABELS,
        taints=TAINTS,
        user_data="[settings.host-containers.admin]\nenabled = true\n",
    )
    assert out is not None
    settings = tomllib.loads(out)["settings"]
    assert settings["host-containers"]["admin"]["enabled"] is True
    k8s = settings["kubernetes"]
    assert (k8s["cluster-name"], k8s["api-server"], k8s["cluster-certificate"]) == ("prod", CLUSTER.endpoint, "Q0E=")
    assert k8s["node-labels"] == {"joiner.sh/nodepool": "gpu", "node.kubernetes.io/role": "gpu", "team": "ml"}
    assert k8s["node-taints"] == {
        "joiner.sh/unregistered": ["true:NoSchedule"],
        "nvidia.com/gpu": ["true:NoSchedule"],
        "example.com/agent": [":NoSchedule"],
    }


def test_bottlerocket_merges_the_users_kubernetes_settings_into_one_valid_document() -> None:
    theirs = (
        "[settings.kubernetes]\n"
        'cluster-name = "someone-elses"\n'
        "max-pods = 7\n"
        'eviction-hard = {"memory.available" = "5%"}\n'
        "[settings.kubernetes.node-labels]\n"
        'team = "infra"\n'
        '"example.com/owner" = "me"\n'
        "[settings.kubernetes.node-taints]\n"
        '"example.com/agent" = ["x:NoExecute"]\n'
    )
    out = user_data_for("bottlerocket", CLUSTER, labels=LABELS, taints=TAINTS, user_data=theirs, max_pods=58)
    assert out is not None
    k8s = tomllib.loads(out)["settings"]["kubernetes"]  # before: "Cannot declare ('settings', 'kubernetes') twice"
    # joiner's: how the node reaches the cluster, and the pods the solver packed against
    assert (k8s["cluster-name"], k8s["api-server"], k8s["max-pods"]) == ("prod", CLUSTER.endpoint, 58)
    # the user's: everything else, and their labels and taints beside joiner's (joiner's keys win)
    assert k8s["eviction-hard"] == {"memory.available": "5%"}
    assert k8s["node-labels"]["example.com/owner"] == "me"
    assert k8s["node-labels"]["team"] == "ml"
    assert k8s["node-taints"]["example.com/agent"] == [":NoSchedule"]
    assert k8s["node-taints"]["joiner.sh/unregistered"] == ["true:NoSchedule"]


def test_bottlerocket_user_data_that_is_not_toml_is_refused_with_the_parse_error() -> None:
    with pytest.raises(UserDataError, match="not valid TOML"):
        user_data_for("bottlerocket", CLUSTER, labels={}, taints=[], user_data="[settings\n")


def test_al2023_tells_the_kubelet_its_max_pods() -> None:
    out = user_data_for("al2023", CLUSTER, labels={}, taints=[], user_data=None, max_pods=58)
    assert out is not None
    assert node_config(out)["spec"]["kubelet"]["config"] == {"maxPods": 58}


toml_chars = st.characters(codec="utf-8")  # no lone surrogates: TOML text is UTF-8
toml_keys = st.text(toml_chars, max_size=8)
toml_scalars = st.one_of(
    st.text(toml_chars, max_size=12),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(toml_keys, inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(toml_keys, toml_values, max_size=5))
@example({"0\n": {}})  # a key ending in a newline is not bare (found by this test)
@example({"0\n": []})
def test_toml_written_reads_back_the_same(document: dict[str, Any]) -> None:
    assert tomllib.loads(toml.dumps(document)) == document


def test_families_without_a_bootstrap_keep_the_user_data_as_written() -> None:
    assert user_data_for("custom", CLUSTER, labels=LABELS, taints=TAINTS, user_data="#!/bin/sh\n") == "#!/bin/sh\n"
    assert user_data_for("ubuntu", CLUSTER, labels=LABELS, taints=TAINTS, user_data=None) is None
    assert family_of(alias="al2023@v20250101", ami_family=None) == "al2023"
    assert family_of(alias=None, ami_family="Bottlerocket") == "bottlerocket"
    assert family_of(alias=None, ami_family=None) == "custom"


label_keys = st.from_regex(r"\A([a-z]{1,8}(\.[a-z]{1,5})?/)?[a-z][a-z0-9-]{0,10}\Z", fullmatch=True)


@given(
    st.dictionaries(label_keys, st.from_regex(r"\A[a-z0-9]{0,8}\Z", fullmatch=True), max_size=6),
    st.lists(
        st.builds(
            BootTaint,
            label_keys,
            st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
            st.from_regex(r"\A[a-z0-9]{0,6}\Z", fullmatch=True),
        ),
        max_size=5,
    ),
)
def test_any_labels_and_taints_make_a_parseable_node_config_with_every_allowed_one(
    labels: dict[str, str], taints: list[BootTaint]
) -> None:
    out = user_data_for("al2023", CLUSTER, labels=labels, taints=taints, user_data=None)
    assert out is not None
    flags = node_config(out)["spec"]["kubelet"]["flags"]
    taint_flag = next(f for f in flags if f.startswith("--register-with-taints="))
    assert taint_flag.split("=", 1)[1].split(",")[0] == "joiner.sh/unregistered=true:NoSchedule"
    allowed = kubelet_labels(labels)
    if allowed:
        label_flag = next(f for f in flags if f.startswith("--node-labels="))
        assert dict(i.split("=", 1) for i in label_flag.split("=", 1)[1].split(",")) == allowed


async def test_the_launch_template_joins_the_cluster_it_found_in_eks(
    provider: AWSCloudProvider, world: World, api: Any, clock: Any, moto_url: str
) -> None:
    import boto3

    eks = boto3.client("eks", region_name="us-east-1", endpoint_url=moto_url)
    eks.create_cluster(
        name=world.cluster, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": []}
    )
    found = eks.describe_cluster(name=world.cluster)["cluster"]
    await resolve_into(world, world.nodeclass("al2023", amiFamily="AL2023"), api=api, clock=clock)
    claim = nodeclaim("nc-boot", types=["g6.xlarge"], nodeclass="al2023")
    claim["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    inst = await provider.create(claim)
    iid = inst.provider_id.rsplit("/", 1)[-1]
    raw = world.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
    config = node_config(base64.b64decode(raw).decode())
    assert config["spec"]["cluster"]["apiServerEndpoint"] == found["endpoint"]
    assert config["spec"]["cluster"]["cidr"] == found["kubernetesNetworkConfig"]["serviceIpv4Cidr"]
    assert any("nvidia.com/gpu=true:NoSchedule" in f for f in config["spec"]["kubelet"]["flags"])


async def test_without_eks_or_settings_the_launch_fails_with_what_to_give(
    provider: AWSCloudProvider, world: World, api: Any, clock: Any
) -> None:
    await resolve_into(world, world.nodeclass("al2023", amiFamily="AL2023"), api=api, clock=clock)
    with pytest.raises(CreateError) as err:
        await provider.create(nodeclaim("nc-noboot", types=["m5.large"], nodeclass="al2023"))
    assert "--cluster-endpoint" in str(err.value)
    assert await provider.list() == []


def test_raid0_makes_the_local_nvme_drives_one_array_on_al2023_and_bottlerocket() -> None:
    out = user_data_for("al2023", CLUSTER, labels={}, taints=[], user_data=None, instance_store="RAID0")
    assert out is not None
    assert node_config(out)["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    none = user_data_for("al2023", CLUSTER, labels={}, taints=[], user_data=None)
    assert none is not None
    assert "instance" not in node_config(none)["spec"]
    out = user_data_for("bottlerocket", CLUSTER, labels={}, taints=[], user_data=None, instance_store="RAID0")
    assert out is not None
    command = tomllib.loads(out)["settings"]["bootstrap-commands"]["000-joiner-instance-store-raid0"]
    assert command["commands"][0] == ["apiclient", "ephemeral-storage", "init"]
    assert command["commands"][1][:4] == ["apiclient", "ephemeral-storage", "bind", "--dirs"]
    assert "/var/lib/kubelet" in command["commands"][1]
    assert (command["mode"], command["essential"]) == ("always", True)
