"""The provisioner's plan, shared: which pending pods it planned on which NodeClaim.

The provisioner publishes it after every decision; the NodeClaim lifecycle reads it to keep a new
Node closed to kube-scheduler (its `joiner.sh/unregistered` taint on) until the pods planned there
are nominated to it. Without that, kube-scheduler places whatever pod it tries next on the first
Node that opens, before the nominations that keep its room for the planned pods arrive
(docs/provisioning.md, "Telling kube-scheduler the plan").

With reservations on (`Settings.reserve`), a new Node planned for pending pods opens with the
`joiner.sh/planned=<NodeClaim>` taint instead, the nominator gives the pods planned there its
toleration, and the lifecycle takes the taint off once none of them is still pending
(docs/provisioning.md, "Reserving a planned Node for its pods").

It lives in the shared layer so the two controllers stay independent of each other. In memory only:
after a restart the provisioner decides again and publishes again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from controller.state.reservations import DaemonSetsKeptOff
from controller.state.views import NodeClaimView, NodeView, Obj

MAX_TAINT_VALUE = 63  # a taint's value is a label value


class PlannedPods:
    """NodeClaim name -> the pod keys planned on it, as last published (empty while nominations are off)."""

    def __init__(self, *, reserve: bool = False) -> None:
        self._by_claim: dict[str, tuple[str, ...]] = {}
        self._claim_of: dict[str, str] = {}
        self._planned: frozenset[str] = frozenset()
        self.writing = False
        self.published = False  # the provisioner has published a plan since this process started
        self.version = 0  # moves when a publication plans a pod the one before did not
        # planned Nodes are reserved to their pods (taint and tolerations); the nominator turns it off
        # when the cluster refuses the pods' toleration patches
        self.reserve = reserve
        # pods whose toleration the cluster refused (an admission policy): they are nominated instead,
        # and a reservation does not wait for them
        self.untolerated: set[str] = set()
        self.kept_off = DaemonSetsKeptOff()

    def begin(self) -> None:
        """NodeClaims of a new plan are being written and their pods are not published yet: the
        lifecycle may already see (and launch, and register) the first ones, and must not open them
        (measured: with 11 NodeClaims written over a second on a loaded machine, the first Node
        opened before its 341 pods were known here, and took 191 pods planned elsewhere)."""
        self.writing = True

    def publish(self, nominations: Mapping[str, str]) -> None:
        """``nominations``: pod key -> NodeClaim name, the provisioner's whole current plan."""
        self.writing = False
        self.published = True
        by_claim: dict[str, list[str]] = {}
        for key, claim in nominations.items():
            by_claim.setdefault(claim, []).append(key)
        self._by_claim = {claim: tuple(keys) for claim, keys in by_claim.items()}
        self._claim_of = dict(nominations)
        self.untolerated &= self._claim_of.keys()
        planned = frozenset(nominations)
        if planned - self._planned:
            self.version += 1  # pods newly planned: their nominations are to be written
        self._planned = planned

    def add(self, claim: str, keys: Sequence[str]) -> None:
        """While a plan is written: ``claim`` was just created for these pods. With reservations on,
        its Node may open (reserved to them) and they may be given its toleration before the plan's
        other NodeClaims are written; `publish` then replaces the whole book."""
        if not keys:
            return
        self._by_claim[claim] = (*self._by_claim.get(claim, ()), *keys)
        for key in keys:
            self._claim_of[key] = claim
        if not self._planned.issuperset(keys):
            self.version += 1
            self._planned = self._planned | frozenset(keys)

    def claims(self) -> tuple[str, ...]:
        """Every NodeClaim the plan puts pending pods on."""
        return tuple(self._by_claim)

    def reservable(self, claim: NodeClaimView, daemonsets: Callable[[], Iterable[Obj]], node: NodeView | None) -> bool:
        """Whether ``claim``'s Node (``node``, None before it registers) opens reserved to its pods:
        reservations are on, its name fits in a taint's value (63 characters: a NodePool named with 58
        or more makes longer NodeClaim names), and no DaemonSet that would run there is kept off by the
        reservation, or its Node registered with every resource the NodeClaim asked for
        (`controller.state.reservations`)."""
        if not self.reserve or len(claim.name) > MAX_TAINT_VALUE:
            return False
        kept = self.kept_off.of(claim, daemonsets)
        return not kept or self.kept_off.despite(claim, node, kept)

    def claim_of(self, key: str) -> str | None:
        """The NodeClaim the plan puts pod ``key`` on, if any."""
        return self._claim_of.get(key)

    def on(self, claim: str) -> tuple[str, ...]:
        """The pods planned on ``claim`` (none when it was not bought for pending pods)."""
        return self._by_claim.get(claim, ())
