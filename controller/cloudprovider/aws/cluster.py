"""How the machines joiner launches reach the cluster: the endpoint, CA bundle and service CIDR the
bootstrap user data needs. The operator's ``--cluster-endpoint/--cluster-ca-bundle/--cluster-cidr``
win; what they leave out comes from EKS ``DescribeCluster`` (asked once, then cached).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import ClusterInfo
from controller.cloudprovider.types import CreateError

__all__ = ["ClusterInfoSource", "ClusterSettings"]

FLAGS = "give --cluster-endpoint, --cluster-ca-bundle and --cluster-cidr"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What the operator said of the cluster (``--cluster-endpoint`` ...); the rest comes from EKS."""

    endpoint: str | None = None
    ca_bundle: str | None = None
    service_cidr: str | None = None


class ClusterInfoSource:
    def __init__(self, api: AWSApi, cluster_name: str, settings: ClusterSettings | None = None) -> None:
        self._api = api
        self._name = cluster_name
        self._settings = settings or ClusterSettings()
        self._info: ClusterInfo | None = None

    async def get(self) -> ClusterInfo:
        """The cluster's endpoint, CA and service CIDR; CreateError when they cannot be known."""
        if self._info is not None:
            return self._info
        given = self._settings
        endpoint, ca, cidr = given.endpoint, given.ca_bundle, given.service_cidr
        if not (endpoint and ca and cidr):
            try:
                found = (await self._api.call("eks", "describe_cluster", name=self._name)).get("cluster") or {}
            except AWSError as err:
                raise CreateError(
                    f"cannot write the bootstrap user data: EKS DescribeCluster {self._name!r} failed "
                    f"({err.code}: {err.message}); {FLAGS}",
                    reason=err.code,
                ) from None
            endpoint = endpoint or str(found.get("endpoint") or "")
            ca = ca or str((found.get("certificateAuthority") or {}).get("data") or "")
            cidr = cidr or str((found.get("kubernetesNetworkConfig") or {}).get("serviceIpv4Cidr") or "")
        if not (endpoint and ca and cidr):
            raise CreateError(
                f"cannot write the bootstrap user data: the cluster endpoint, CA bundle or service CIDR of "
                f"{self._name!r} is unknown; {FLAGS}",
                reason="ClusterInfoMissing",
            )
        self._info = ClusterInfo(name=self._name, endpoint=endpoint, ca_bundle=ca, service_cidr=cidr)
        return self._info
