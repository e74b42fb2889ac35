"""The disruption planner's inputs and outputs: frozen value types, no Kubernetes client types.

A :class:`Snapshot` is one consistent view of the cluster, built from the cache by
:mod:`controller.disruption.snapshot` (or directly by tests and benchmarks): the nodes joiner
manages (:class:`NodeState`), the other capacity, the NodePools' disruption settings
(:class:`PoolPolicy`) and their solver templates, the pending pods, and the NodeClaims that
disruption commands already hold. The planner turns it into :class:`Command` objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from controller.disruption.budgets import DEFAULT_BUDGETS, Budget
from controller.scheduling.model import ExistingNode, NewNodeClaim, NodePoolTemplate, OfferingKey, Pod
from controller.scheduling.tiermix import TierMix

WHEN_EMPTY: Final = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED: Final = "WhenEmptyOrUnderutilized"


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """A NodePool's ``spec.disruption``: ``consolidate_after`` None means ``Never``.

    ``problem`` says why the settings could not be read; such a pool is left alone.
    """

    name: str
    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after: timedelta | None = timedelta(0)
    budgets: tuple[Budget, ...] = DEFAULT_BUDGETS
    problem: str | None = None
    tier_mix: TierMix | None = None

    @property
    def consolidates(self) -> bool:
        return self.problem is None and self.consolidate_after is not None

    @property
    def underutilized(self) -> bool:
        return self.consolidates and self.consolidation_policy == WHEN_EMPTY_OR_UNDERUTILIZED


@dataclass(frozen=True, slots=True)
class NodeState:
    """One registered node joiner manages, with everything disruption decides on.

    ``view`` is the node as the solver sees it (all its pods, daemon pods included); ``movable``
    the pods that disrupting it would evict. ``price`` is its offering's $/hour (0: unknown).
    ``stable_since``: the later of its initialization and the last pod bound to or removed from it.
    ``blockers``: why it may not be disrupted at all now (do-not-disrupt, PDB, gang);
    ``consolidation_blockers``: why its pods may not be moved just to save money.
    ``protected_until``: a replacement disruption created is left alone until then.
    ``reclaimable``: pods (``namespace/name``) disrupting it evicts for good without a place
    elsewhere: its GPUs are idle (``GPUIdle``) and they opted in with ``joiner.sh/idle-gpu-reclaim``.
    ``keeps_buffer``: the NodePools whose warm buffer sits on it (their placeholders are in
    ``view.pods``); neither emptiness nor consolidation takes it while it does.
    """

    claim: str
    pool: str
    view: ExistingNode
    movable: tuple[Pod, ...] = ()
    price: float = 0.0
    created: datetime | None = None
    initialized: bool = True
    ready: bool = True
    deleting: bool = False
    stable_since: datetime | None = None
    expires_at: datetime | None = None
    drift: str | None = None
    blockers: tuple[str, ...] = ()
    consolidation_blockers: tuple[str, ...] = ()
    protected_until: datetime | None = None
    instance_type: str = ""
    reclaimable: tuple[str, ...] = ()
    keeps_buffer: tuple[str, ...] = ()

    @property
    def node(self) -> str:
        return self.view.name

    @property
    def empty(self) -> bool:
        return not self.movable


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one planning pass reads. ``active``: NodeClaims held by commands still running;
    ``scheduler_backlog``: kube-scheduler is still binding a burst's pending pods."""

    now: datetime
    nodes: tuple[NodeState, ...]
    pools: Mapping[str, PoolPolicy]
    templates: tuple[NodePoolTemplate, ...] = ()
    other_capacity: tuple[ExistingNode, ...] = ()
    daemons: tuple[Pod, ...] = ()
    pending: tuple[Pod, ...] = ()
    unavailable: frozenset[OfferingKey] = frozenset()
    active: frozenset[str] = frozenset()
    # kube-scheduler is working through a backlog: it bound a pod in the last few seconds and pods
    # created in the last minutes still wait (a burst); see `snapshot.scheduler_backlog`
    scheduler_backlog: bool = False


@dataclass(frozen=True, slots=True)
class Command:
    """Disrupt ``candidates`` (NodeClaim names) for ``reason``, after ``replacements`` are Initialized.

    ``old_price``/``new_price``: $/hour of the candidates and of the replacements; ``pods``: the
    pods that will be evicted (``namespace/name``).
    """

    reason: str
    candidates: tuple[str, ...]
    nodes: tuple[str, ...]
    pools: tuple[str, ...]
    replacements: tuple[NewNodeClaim, ...] = ()
    old_price: float = 0.0
    new_price: float = 0.0
    pods: tuple[str, ...] = ()
    detail: str = ""
    placements: tuple[tuple[str, str], ...] = ()
    """Where the simulation put each pod: ``(pod, node)``, the node an existing Node's name or a
    replacement's ``NewNodeClaim.name``. The proof that every pod has a place; kube-scheduler
    makes the real choice."""

    @property
    def saving(self) -> float:
        return self.old_price - self.new_price

    @property
    def action(self) -> str:
        return "replace" if self.replacements else "delete"

    def describe(self) -> str:
        what = f"{len(self.candidates)} node(s)"
        if self.replacements:
            types = ", ".join(r.choice.instance_type for r in self.replacements)
            how = f"replacing {what} with {len(self.replacements)} ({types})"
        else:
            how = f"deleting {what}"
        text = f"{self.reason}: {how}, {len(self.pods)} pod(s) to move"
        if self.reason in ("Empty", "Underutilized"):
            text += f", saving ${self.saving:.4f}/h"
        if self.detail:
            text += f"; {self.detail}"
        return text


@dataclass(frozen=True, slots=True)
class Blocked:
    """A node that would be disrupted for ``reason`` but is not, and why."""

    claim: str
    node: str
    reason: str
    why: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What one planning pass found.

    ``eligible``: per reason, how many nodes qualified before budgets and simulation.
    ``waiting``: why replacing moves (underutilized, drift, expiry) wait this pass, if they do.
    """

    commands: tuple[Command, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    eligible: Mapping[str, int] = field(default_factory=dict)
    waiting: str | None = None
    simulations: int = 0
    allowed: Mapping[tuple[str, str], int | None] = field(default_factory=dict)
    """(NodePool, reason) -> nodes the budgets still allow to start being disrupted (None: no limit)."""
