"""The disruption planner: which nodes to give back, each move proven with the solver. Pure.

One pass over a :class:`~controller.disruption.model.Snapshot` tries the methods in this order
and returns the first command found (the controller runs passes back to back):

1. **Empty** -- nodes with no pod to move for ``consolidateAfter``: deleted, as many at once as
   the budgets allow (most expensive first).
2. **Expired** -- NodeClaims older than their ``expireAfter``, oldest first.
3. **Drifted** -- NodeClaims whose NodePool template (or node class) changed since they were made.
   Expired and drifted nodes are replaced in batches of up to the budget; the other expired or
   drifted nodes receive no pods in the simulation, so nothing moves twice.
4. **Underutilized** (``WhenEmptyOrUnderutilized`` only) -- every candidate is first simulated
   alone (single-node: delete it, or replace it with one cheaper node); the valid ones are ranked
   by saving per disrupted pod, the others follow; then the longest prefix of that ranking that can
   go at once, onto the rest of the cluster plus fewer new nodes than it removes and for less
   money, is found by binary search (multi-node), once allowing replacements and once deleting
   only; the whole ranking is tried too. Of all the moves found, the one that saves the most
   wins; among moves saving about as much, the one that buys fewest nodes, then the one with the
   biggest saving per disrupted pod. A GPU node held only by CPU pods is just a candidate whose
   pods fit on a CPU node: its saving per pod is large, so it goes first.

Every simulation is the provisioning solver run on the snapshot without the candidate nodes: the
candidates' pods, the pods of nodes already being disrupted, and the pending pods that have a
place now must all still have one, on the remaining nodes or on new NodeClaims from the
NodePools. The new NodeClaims are the replacements; their candidate instance types are cut to
those that keep the move cheaper, so the provider cannot fall back to a dearer one.

Replacing moves wait while the cluster is scaling up (pending pods need new nodes, or NodeClaims
are still launching): the simulation could not tell their nodes from ours. Nodes where pending
pods are expected to land are never candidates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from controller.disruption.budgets import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_EXPIRED,
    REASON_UNDERUTILIZED,
    REASONS,
    Allowance,
    PoolCount,
    allowance,
    count_pool,
)
from controller.disruption.model import Blocked, Command, Decision, NodeState, PoolPolicy, Snapshot
from controller.disruption.moves import EPS, Simulation, least_churn, restrict_price, to_command
from controller.scheduling.model import ExistingNode, NewNodeClaim, Plan, Pod
from controller.scheduling.resources import ONE_POD, sum_resources
from controller.scheduling.solver import SolveCache, solve
from controller.scheduling.tiermix import apply as apply_tier_mix


@dataclass(frozen=True, slots=True)
class Options:
    """Bounds on one pass. ``min_saving_fraction``: a move that buys nodes must save at least this
    share of what it removes (deleting nodes outright only has to save something)."""

    max_single: int = 100
    max_multi: int = 100
    min_saving_fraction: float = 0.01


DEFAULT_OPTIONS: Final = Options()


class _Planner:
    def __init__(self, snap: Snapshot, options: Options, *, own: Collection[str] = ()) -> None:
        self.snap = snap
        self.opt = options
        self.now = snap.now
        self.active = snap.active - frozenset(own)
        self.sims = 0
        self.cache = SolveCache()  # the simulations of one pass share pools and nodes
        self.blocked: list[Blocked] = []
        self.eligible: dict[str, int] = {}
        self.by_claim = {n.claim: n for n in snap.nodes}
        self.gone = {n.claim for n in snap.nodes if n.deleting or n.claim in self.active}
        base: list[ExistingNode] = []
        displaced: list[Pod] = []
        for n in snap.nodes:
            if n.claim in self.gone:
                displaced.extend(n.movable)
            else:
                base.append(n.view if n.ready else replace(n.view, unschedulable=True))
        base.extend(snap.other_capacity)
        self.base = base
        seen: set[str] = set()
        waiting_pods: list[Pod] = []
        for pod in (*displaced, *snap.pending):
            if pod.key not in seen:
                seen.add(pod.key)
                waiting_pods.append(pod)
        self.baseline = self._solve(waiting_pods, base)
        self.placeable = tuple(p for p in waiting_pods if p.key not in self.baseline.unschedulable)
        self.nominated = frozenset(self.baseline.existing_placements)
        self.waiting: str | None = None
        launching = sum(1 for n in snap.other_capacity if n.in_flight)
        if self.baseline.new_nodes:
            pods = sum(len(n.pods) for n in self.baseline.new_nodes)
            self.waiting = f"the cluster is scaling up: {pods} pending pod(s) need new nodes"
        elif launching:
            self.waiting = f"the cluster is scaling up: {launching} NodeClaim(s) are still launching"
        elif snap.scheduler_backlog and self.baseline.existing_placements:
            pods = sum(len(keys) for keys in self.baseline.existing_placements.values())
            self.waiting = f"the cluster is scaling up: kube-scheduler is still placing {pods} pending pod(s)"
        flags: dict[str, list[tuple[bool, bool]]] = {}
        for n in snap.nodes:
            if n.initialized:
                flags.setdefault(n.pool, []).append((n.claim in self.gone, not n.ready))
        self.counts = {pool: count_pool(f) for pool, f in flags.items()}
        self._allowances: dict[tuple[str, str], Allowance] = {}

    # --- helpers ---------------------------------------------------------------------------

    def _solve(self, pods: Sequence[Pod], existing: Sequence[ExistingNode]) -> Plan:
        self.sims += 1
        return solve(
            pods=pods,
            node_pools=self.snap.templates,
            existing_nodes=existing,
            daemon_pods=self.snap.daemons,
            unavailable=self.snap.unavailable,
            cache=self.cache,
        )

    def allowance(self, pool: str, reason: str) -> Allowance:
        key = (pool, reason)
        hit = self._allowances.get(key)
        if hit is None:
            counted = self.counts.get(pool, PoolCount())
            policy = self.snap.pools.get(pool)
            budgets = policy.budgets if policy is not None else ()
            hit = allowance(budgets, reason=reason, total=counted.total, disrupting=counted.disrupting, now=self.now)
            self._allowances[key] = hit
        return hit

    def _block(self, node: NodeState, *, reason: str, why: str) -> None:
        self.blocked.append(Blocked(claim=node.claim, node=node.node, reason=reason, why=why))

    def _policy(self, node: NodeState) -> PoolPolicy | None:
        policy = self.snap.pools.get(node.pool)
        return policy if policy is not None and policy.problem is None else None

    def _available(self, node: NodeState) -> bool:
        """Initialized, not going away, not held by a command, not a fresh replacement, pool known."""
        return (
            node.initialized
            and not node.deleting
            and node.claim not in self.active
            and self._policy(node) is not None
            and not (node.protected_until is not None and node.protected_until > self.now)
        )

    def _stable(self, node: NodeState) -> bool:
        policy = self._policy(node)
        if policy is None or policy.consolidate_after is None:
            return False
        return node.stable_since is None or self.now - node.stable_since >= policy.consolidate_after

    def _simulate(self, nodes: Sequence[NodeState], *, cordon: Collection[str] = ()) -> Simulation:
        remove = {n.node for n in nodes}
        existing = [
            replace(e, unschedulable=True) if e.name in cordon and not e.unschedulable else e
            for e in self.base
            if e.name not in remove
        ]
        moved = [p for n in nodes for p in n.movable]
        plan = self._solve([*self.placeable, *moved], existing)
        moved_keys = tuple(p.key for p in moved)
        unplaced = tuple(k for k in moved_keys if k in plan.unschedulable)
        moved_set = set(moved_keys)
        lost = tuple(k for k in plan.unschedulable if k not in moved_set and k not in self.baseline.unschedulable)
        base_new = len(self.baseline.new_nodes)
        return Simulation(
            plan=plan,
            moved=moved_keys,
            unplaced=unplaced,
            lost=lost,
            new_nodes=plan.new_nodes if base_new == 0 else (),
            new_price=max(0.0, plan.total_price - self.baseline.total_price),
            pods=tuple(moved),
        )

    def _fewer(self, sim: Simulation) -> Simulation:
        """``sim`` with its new nodes merged into one, when one node can host them all for no more.

        The solver packs for the cheapest price per pod and may open two small nodes where one
        node of the same total price would do; a consolidation wants as few replacements as can be.
        """
        if len(sim.new_nodes) < 2:
            return sim
        by_key = {p.key: p for p in (*self.placeable, *sim.pods)}
        pods = [by_key[k] for n in sim.new_nodes for k in n.pods if k in by_key]
        total = sum_resources(p.requests + ONE_POD for p in pods)
        templates = [
            replace(t, instance_types=tuple(it for it in t.instance_types if total.fits_in(it.allocatable)))
            for t in self.snap.templates
        ]
        self.sims += 1
        merged = solve(
            pods=pods,
            node_pools=[t for t in templates if t.instance_types],
            daemon_pods=self.snap.daemons,
            unavailable=self.snap.unavailable,
        )
        if merged.unschedulable or len(merged.new_nodes) != 1 or merged.total_price > sim.new_price + EPS:
            return sim
        return replace(sim, new_nodes=merged.new_nodes, new_price=merged.total_price)

    def _tier_mixed(self, new: tuple[NewNodeClaim, ...], *, removed: Sequence[NodeState]) -> tuple[NewNodeClaim, ...]:
        """Replacements bought as their pool's tier mix wants, counting the pool without ``removed``:
        a consolidation keeps the shares rather than turning every replacement into spot."""
        mixes = {name: p.tier_mix for name, p in self.snap.pools.items() if p.tier_mix is not None}
        if not new or not any(r.node_pool in mixes for r in new):
            return new
        gone = {n.node for n in removed}
        remaining = [e for e in self.base if e.name not in gone]
        types = {it.name: it for t in self.snap.templates for it in t.instance_types}
        mixed, _ = apply_tier_mix(Plan(new_nodes=new), mixes=mixes, existing=remaining, instance_types=types)
        return mixed.new_nodes

    def _take_within_budget(self, nodes: Iterable[NodeState], reason: str) -> list[NodeState]:
        taken: Counter[str] = Counter()
        out = []
        for n in nodes:
            room = self.allowance(n.pool, reason)
            if room.permits(taken[n.pool] + 1):
                taken[n.pool] += 1
                out.append(n)
            else:
                self._block(n, reason=reason, why=room.explain())
        return out

    # --- methods ---------------------------------------------------------------------------

    def run(self) -> Decision:
        for method in (self._empty, self._expired, self._drifted, self._underutilized):
            command = method()
            if command is not None:
                return self._decision((command,))
        return self._decision(())

    def _decision(self, commands: tuple[Command, ...]) -> Decision:
        allowed = {
            (pool, reason): self.allowance(pool, reason).allowed for pool in self.snap.pools for reason in REASONS
        }
        return Decision(
            commands=commands,
            blocked=tuple(self.blocked),
            eligible=dict(self.eligible),
            waiting=self.waiting,
            simulations=self.sims,
            allowed=allowed,
        )

    def _empty_candidate(self, n: NodeState) -> bool:
        policy = self._policy(n)
        return (
            self._available(n)
            and policy is not None
            and policy.consolidates
            and n.empty
            and not n.keeps_buffer
            and self._stable(n)
            and n.node not in self.nominated
        )

    def _empty(self) -> Command | None:
        eligible = [n for n in self.snap.nodes if self._empty_candidate(n)]
        self.eligible[REASON_EMPTY] = len(eligible)
        safe = []
        for n in sorted(eligible, key=lambda n: (-n.price, n.claim)):
            if n.blockers:
                self._block(n, reason=REASON_EMPTY, why="; ".join(n.blockers))
            else:
                safe.append(n)
        chosen = self._take_within_budget(safe, REASON_EMPTY)
        if not chosen:
            return None
        return to_command(REASON_EMPTY, chosen, old_price=sum(n.price for n in chosen), detail="no pods to move")

    def _expired(self) -> Command | None:
        return self._replace_method(
            REASON_EXPIRED,
            lambda n: n.expires_at is not None and n.expires_at <= self.now,
            detail=lambda n: f"expired at {n.expires_at.isoformat() if n.expires_at else '?'}",
        )

    def _drifted(self) -> Command | None:
        return self._replace_method(REASON_DRIFTED, lambda n: n.drift is not None, detail=lambda n: n.drift or "")

    def _replace_method(
        self, reason: str, select: Callable[[NodeState], bool], *, detail: Callable[[NodeState], str]
    ) -> Command | None:
        eligible = [n for n in self.snap.nodes if self._available(n) and select(n)]
        self.eligible[reason] = len(eligible)
        if not eligible:
            return None
        far = self.now.replace(year=9999)
        ordered = sorted(eligible, key=lambda n: (n.expires_at or far, n.created or far, n.claim))
        safe = []
        for n in ordered:
            if n.blockers:
                self._block(n, reason=reason, why="; ".join(n.blockers))
            else:
                safe.append(n)
        if not safe:
            return None
        if self.waiting is not None:
            for n in safe:
                self._block(n, reason=reason, why=f"replacing waits: {self.waiting}")
            return None
        chosen = self._take_within_budget(safe, reason)
        if not chosen:
            return None
        cordon = {n.node for n in eligible}
        batches = [chosen] if len(chosen) == 1 else [chosen, chosen[:1]]
        sim: Simulation | None = None
        for batch in batches:
            sim = self._simulate(batch, cordon=cordon - {n.node for n in batch})
            if sim.ok:
                return to_command(
                    reason,
                    batch,
                    old_price=sum(n.price for n in batch),
                    replacements=sim.new_nodes,
                    new_price=sim.new_price,
                    pods=sim.moved,
                    detail="; ".join(dict.fromkeys(detail(n) for n in batch)),
                    placements=sim.placements(),
                )
        assert sim is not None
        self._block(chosen[0], reason=reason, why=f"its pods would have nowhere to go: {sim.why()}")
        return None

    def _underutilized_candidate(self, n: NodeState) -> bool:
        policy = self._policy(n)
        return (
            self._available(n)
            and policy is not None
            and policy.underutilized
            and not n.empty
            and not n.keeps_buffer
            and self._stable(n)
            and n.node not in self.nominated
        )

    def _consolidation(
        self, nodes: Sequence[NodeState], sim: Simulation, *, delete_only: bool = False
    ) -> Command | None:
        """The command for moving ``nodes``' pods as ``sim`` found, if it is a consolidation."""
        if not sim.ok or (delete_only and sim.new_nodes):
            return None
        sim = self._fewer(sim)
        k = len(nodes)
        new = self._tier_mixed(sim.new_nodes, removed=nodes)
        if len(new) > (1 if k == 1 else k - 1):
            return None
        old = sum(n.price for n in nodes)
        if new:
            target = old * (1 - self.opt.min_saving_fraction)
            if sum(r.price for r in new) > target + EPS:
                return None
            slack = (target - sim.new_price) / len(new)
            new = tuple(restrict_price(r, r.price + slack) for r in new)
        elif old <= 0:
            return None
        return to_command(
            REASON_UNDERUTILIZED,
            nodes,
            old_price=old,
            replacements=new,
            new_price=sum(r.price for r in new),
            pods=sim.moved,
            placements=sim.placements(),
        )

    def _underutilized(self) -> Command | None:
        eligible = [n for n in self.snap.nodes if self._underutilized_candidate(n)]
        self.eligible[REASON_UNDERUTILIZED] = len(eligible)
        if not eligible or self.waiting is not None:
            return None
        ready = []
        for n in eligible:
            if n.blockers or n.consolidation_blockers:
                self._block(n, reason=REASON_UNDERUTILIZED, why="; ".join((*n.blockers, *n.consolidation_blockers)))
            elif n.price <= 0:
                why = "its price is unknown, so no move can be shown to be cheaper"
                self._block(n, reason=REASON_UNDERUTILIZED, why=why)
            else:
                ready.append(n)
        ready.sort(key=lambda n: (-n.price / len(n.movable), n.claim))
        tried: list[NodeState] = []
        singles: list[tuple[float, float, NodeState, Command]] = []
        for n in ready[: self.opt.max_single]:
            room = self.allowance(n.pool, REASON_UNDERUTILIZED)
            if not room.permits(1):
                self._block(n, reason=REASON_UNDERUTILIZED, why=room.explain())
                continue
            tried.append(n)
            command = self._consolidation([n], self._simulate([n]))
            if command is not None:
                singles.append((command.saving / len(n.movable), command.saving, n, command))
        singles.sort(key=lambda s: (-s[0], -s[1], s[2].claim))
        # multi-node: the nodes that can go alone first (best saving per pod first), then the others
        # (nodes that fit nowhere alone may well fit together onto one cheaper node)
        alone = {s[2].claim for s in singles}
        ranked = [s[2] for s in singles] + [n for n in tried if n.claim not in alone]
        order = self._take_within_budget(ranked, REASON_UNDERUTILIZED)[: self.opt.max_multi]
        found = [s[3] for s in singles[:1]]
        if len(order) >= 2:
            # savings are not monotone in the prefix length (3 half-full nodes may merge onto one
            # cheaper node where 2 cannot), so the whole ranking is tried too
            whole = self._consolidation(order, self._simulate(order))
            found.extend([whole] if whole is not None else [])
            found.extend(self._prefix_search(order, delete_only=False))
            found.extend(self._prefix_search(order, delete_only=True))
        return least_churn(found)

    def _prefix_search(self, order: Sequence[NodeState], *, delete_only: bool) -> list[Command]:
        """Binary search for the longest prefix of ``order`` (two nodes or more) that consolidates;
        every valid command met on the way."""
        found: list[Command] = []
        lo, hi = 1, len(order)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            prefix = order[:mid]
            command = self._consolidation(prefix, self._simulate(prefix), delete_only=delete_only)
            if command is not None:
                lo = mid
                found.append(command)
            else:
                hi = mid - 1
        return found

    # --- validation ------------------------------------------------------------------------

    def validate(self, command: Command, *, replacements_ready: bool) -> Command | str:
        """The command as it stands on this snapshot, or why it must not go ahead."""
        reason = command.reason
        nodes: list[NodeState] = []
        problems: list[str] = []
        for claim in command.candidates:
            n = self.by_claim.get(claim)
            if n is None:
                problems.append(f"NodeClaim {claim} is gone")
            elif not self._available(n):
                problems.append(f"NodeClaim {claim} is being deleted, not initialized or its NodePool is gone")
            elif n.blockers:
                problems.append(f"NodeClaim {claim}: " + "; ".join(n.blockers))
            elif (problem := self._still(reason, n)) is not None:
                problems.append(f"NodeClaim {claim}: {problem}")
            else:
                nodes.append(n)
        # empty nodes are independent of each other: the ones still empty may go; other moves are all or nothing
        if problems and (reason != REASON_EMPTY or not nodes):
            return problems[0]
        if not replacements_ready:
            per_pool = Counter(n.pool for n in nodes)
            for pool, count in per_pool.items():
                room = self.allowance(pool, reason)
                if not room.permits(count):
                    return room.explain()
        if reason == REASON_EMPTY:
            return to_command(REASON_EMPTY, nodes, old_price=sum(n.price for n in nodes), detail=command.detail)
        if not replacements_ready and self.waiting is not None:
            return self.waiting
        cordon: set[str] = set()
        if reason in (REASON_DRIFTED, REASON_EXPIRED):
            select = (lambda n: n.drift is not None) if reason == REASON_DRIFTED else self._is_expired
            cordon = {n.node for n in self.snap.nodes if self._available(n) and select(n)} - {n.node for n in nodes}
        sim = self._simulate(nodes, cordon=cordon)
        if not sim.ok:
            return f"pods would have nowhere to go: {sim.why()}"
        if replacements_ready:
            if len(sim.plan.new_nodes) > len(self.baseline.new_nodes):
                return "the pods no longer fit on the remaining nodes and the replacements"
            return command
        if reason == REASON_UNDERUTILIZED:
            fresh = self._consolidation(nodes, sim)
            if fresh is None:
                return "the move no longer saves money"
            return fresh
        return replace(
            command,
            replacements=sim.new_nodes,
            new_price=sim.new_price,
            pods=sim.moved,
            placements=sim.placements(),
        )

    def _is_expired(self, n: NodeState) -> bool:
        return n.expires_at is not None and n.expires_at <= self.now

    def _still(self, reason: str, n: NodeState) -> str | None:
        if reason == REASON_EMPTY:
            if not n.empty:
                return "pods were scheduled on it"
            if not self._stable(n):
                return "pods changed on it within consolidateAfter"
            if n.node in self.nominated:
                return "pending pods are expected to land on it"
        elif reason == REASON_UNDERUTILIZED:
            policy = self._policy(n)
            if policy is None or not policy.underutilized:
                return "its NodePool no longer consolidates underutilized nodes"
            if not self._stable(n):
                return "pods changed on it within consolidateAfter"
            if n.consolidation_blockers:
                return "; ".join(n.consolidation_blockers)
        elif reason == REASON_DRIFTED:
            if n.drift is None:
                return "it is no longer drifted"
        elif reason == REASON_EXPIRED and not self._is_expired(n):
            return "it is no longer expired"
        return None


def plan(snapshot: Snapshot, options: Options = DEFAULT_OPTIONS) -> Decision:
    """One planning pass: at most one command, with what was eligible and what was blocked."""
    return _Planner(snapshot, options).run()


def validate(
    snapshot: Snapshot, command: Command, *, replacements_ready: bool, options: Options = DEFAULT_OPTIONS
) -> Command | str:
    """Re-check ``command`` on a fresh snapshot just before acting: the (possibly refreshed)
    command, or a sentence saying why it must not go ahead. Before replacements are made it is
    planned again (budgets, stability, safety, simulation); once they are Initialized, the
    candidates' pods must fit on the remaining nodes and the replacements with nothing new to buy."""
    return _Planner(snapshot, options, own=command.candidates).validate(command, replacements_ready=replacements_ready)
