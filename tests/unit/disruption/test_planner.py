"""Candidate selection and consolidation decisions, proven on solver snapshots."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from controller.disruption.budgets import Budget
from controller.disruption.model import WHEN_EMPTY, Command
from controller.disruption.moves import restrict_price
from controller.disruption.planner import Options, plan, validate
from tests.unit.disruption.builders import (
    NOW,
    apply,
    node,
    pod,
    policy,
    price_of,
    snapshot,
)


def only(commands: tuple[Command, ...]) -> Command:
    assert len(commands) == 1, commands
    return commands[0]


# --- emptiness ---------------------------------------------------------------------------------


def test_an_empty_node_goes_once_stable_for_consolidate_after() -> None:
    busy = node("busy", "cpu-4", [pod("web-1")])
    empty = node("empty", "cpu-4", stable_since=NOW - timedelta(seconds=31))
    decision = plan(snapshot([busy, empty]))
    command = only(decision.commands)
    assert (command.reason, command.candidates, command.action) == ("Empty", ("claim-empty",), "delete")
    assert command.saving == 0.20
    assert decision.eligible["Empty"] == 1


def test_an_empty_node_waits_for_consolidate_after() -> None:
    empty = node("empty", "cpu-4", stable_since=NOW - timedelta(seconds=29))
    decision = plan(snapshot([empty]))
    assert decision.commands == ()
    assert decision.eligible["Empty"] == 0


def test_consolidate_after_never_disables_emptiness_and_consolidation() -> None:
    pools = {"cpu": policy("cpu", after=None)}
    nodes = [node("empty", "cpu-4"), node("half", "cpu-4", [pod("web-1")]), node("other", "cpu-4", [pod("web-2")])]
    assert plan(snapshot(nodes, pools=pools)).commands == ()


def test_a_node_pending_pods_will_land_on_is_not_empty() -> None:
    empty = node("empty", "cpu-4")
    decision = plan(snapshot([empty], pending=(pod("new-1"),)))
    assert decision.commands == ()


def test_daemon_only_nodes_are_empty() -> None:
    daemon = pod("ds-1", cpu=0.1, owner="DaemonSet/ds")
    # the daemon pod is in the solver view but not movable
    n = node("n", "cpu-4", [daemon])
    n = replace(n, movable=())
    assert only(plan(snapshot([n])).commands).reason == "Empty"


def test_empty_nodes_go_together_as_far_as_the_budget_allows_most_expensive_first() -> None:
    pools = {"cpu": policy("cpu", budgets=(Budget(nodes="2"),))}
    nodes = [node("a", "cpu-2"), node("b", "cpu-8"), node("c", "cpu-4"), node("keep", "cpu-4", [pod("web-1")])]
    decision = plan(snapshot(nodes, pools=pools))
    command = only(decision.commands)
    assert command.candidates == ("claim-b", "claim-c")
    assert [b.claim for b in decision.blocked] == ["claim-a"]
    assert "allows 2 of 4 nodes" in decision.blocked[0].why


def test_nodes_being_deleted_or_not_ready_use_up_the_budget() -> None:
    pools = {"cpu": policy("cpu", budgets=(Budget(nodes="2"),))}
    nodes = [
        node("empty", "cpu-4"),
        node("going", "cpu-4", deleting=True),
        node("sick", "cpu-4", [pod("web-1")], ready=False),
        node("ok", "cpu-4", [pod("web-2")]),
    ]
    decision = plan(snapshot(nodes, pools=pools))
    assert decision.commands == ()
    assert decision.blocked[0].claim == "claim-empty"
    assert decision.allowed[("cpu", "Empty")] == 0


def test_a_percent_budget_rounds_up() -> None:
    pools = {"cpu": policy("cpu", budgets=(Budget(nodes="10%"),))}
    empties = [node(f"e{i}", "cpu-2") for i in range(11)]
    command = only(plan(snapshot(empties, pools=pools)).commands)
    assert len(command.candidates) == 2  # 10% of 11 = 1.1 -> 2


def test_a_cron_window_blocks_outside_its_hours() -> None:
    office_only = (Budget(nodes="0"), Budget(nodes="100%", schedule="0 9 * * 1-5", duration=timedelta(hours=8)))
    pools = {"cpu": policy("cpu", budgets=office_only)}
    empty = node("empty", "cpu-4")
    # most restrictive wins: the always-on 0 blocks even inside the window
    assert plan(snapshot([empty], pools=pools)).commands == ()
    closed = (Budget(nodes="0", schedule="0 9 * * 1-5", duration=timedelta(hours=8)),)
    pools = {"cpu": policy("cpu", budgets=closed)}
    assert plan(snapshot([empty], pools=pools, now=NOW)).commands == ()  # Monday 12:00: blocked
    evening = NOW + timedelta(hours=8)
    assert only(plan(snapshot([empty], pools=pools, now=evening)).commands).reason == "Empty"


# --- safety ------------------------------------------------------------------------------------


def test_blocked_nodes_are_reported_not_disrupted() -> None:
    n = node("empty", "cpu-4", blockers=("pod default/x is annotated joiner.sh/do-not-disrupt",))
    decision = plan(snapshot([n]))
    assert decision.commands == ()
    [blocked] = decision.blocked
    assert (blocked.claim, blocked.reason) == ("claim-empty", "Empty")
    assert "do-not-disrupt" in blocked.why


def test_blocked_nodes_are_not_consolidated_or_replaced() -> None:
    pdb = ("eviction of default/web-1 is not allowed by its PodDisruptionBudget right now",)
    lonely = node("lonely", "cpu-8", [pod("web-1")], blockers=pdb, drift="template changed")
    roomy = node("roomy", "cpu-8", [pod("web-2")])
    decision = plan(snapshot([lonely, roomy]))
    assert all("claim-lonely" not in c.candidates for c in decision.commands)
    assert {b.reason for b in decision.blocked if b.claim == "claim-lonely"} == {"Drifted", "Underutilized"}


def test_bare_pods_block_consolidation_but_not_drift() -> None:
    bare = ("pod default/x has no controller: evicting it would delete it for good",)
    n = node("n", "cpu-8", [pod("web-1", owner=None)], consolidation_blockers=bare)
    other = node("other", "cpu-8", [pod("web-2")])
    decision = plan(snapshot([n, other]))
    assert all("claim-n" not in c.candidates for c in decision.commands)
    drifted = replace(n, drift="template changed")
    assert only(plan(snapshot([drifted, other])).commands).candidates == ("claim-n",)


def test_nodeclaims_held_by_a_running_command_are_left_alone() -> None:
    nodes = [node("empty", "cpu-4")]
    assert plan(snapshot(nodes, active=frozenset({"claim-empty"}))).commands == ()


# --- consolidation -----------------------------------------------------------------------------


def test_a_node_whose_pods_fit_elsewhere_is_deleted() -> None:
    a = node("a", "cpu-4", [pod("web-1"), pod("web-2")])
    b = node("b", "cpu-4", [pod("web-3")])
    command = only(plan(snapshot([a, b])).commands)
    assert command.reason == "Underutilized"
    assert command.candidates == ("claim-b",)
    assert command.action == "delete"
    assert command.placements == (("default/web-3", "a"),)
    _nodes, price = apply(snapshot([a, b]), command)
    assert price == 0.20


def test_a_node_is_replaced_by_one_cheaper_node() -> None:
    big = node("big", "cpu-16", [pod("web-1", cpu=1.5)])
    command = only(plan(snapshot([big])).commands)
    assert command.action == "replace"
    [new] = command.replacements
    assert new.choice.instance_type == "cpu-2"
    assert command.saving == 0.80 - 0.10
    # the replacement may not fall back to anything that would make the move dearer
    assert all(c.price <= 0.80 * 0.99 for c in new.candidates)


def test_a_node_already_cheapest_for_its_pods_stays() -> None:
    n = node("n", "cpu-2", [pod("web-1", cpu=1.5)])
    decision = plan(snapshot([n]))
    assert decision.commands == ()


def test_cpu_pods_holding_a_gpu_node_move_to_a_cpu_node() -> None:
    gpu = node("gpu", "gpu-4", [pod("web-1", cpu=2), pod("web-2", cpu=2)], pool="gpu")
    busy_gpu = node("trainer", "gpu-1", [pod("train-1", gpus=1)], pool="gpu")
    command = only(plan(snapshot([gpu, busy_gpu])).commands)
    assert command.candidates == ("claim-gpu",)
    [new] = command.replacements
    assert new.node_pool == "cpu"
    assert new.choice.instance_type == "cpu-4"  # one node for both pods, not two cpu-2
    assert command.saving == 4.40 - 0.20


def test_several_underused_nodes_are_merged_onto_fewer() -> None:
    nodes = [node(f"n{i}", "cpu-8", [pod(f"web-{i}", cpu=1.5)]) for i in range(4)]
    command = only(plan(snapshot(nodes)).commands)
    assert command.reason == "Underutilized"
    assert len(command.candidates) >= 2
    _after, price = apply(snapshot(nodes), command)
    assert price < price_of(snapshot(nodes))


def test_the_biggest_saving_per_disrupted_pod_goes_first() -> None:
    # deleting any one saves its price; per disrupted pod: crowded 0.08, sparse 0.40, host 0.10
    crowded = node("crowded", "cpu-8", [pod(f"a-{i}", cpu=0.5) for i in range(5)])
    sparse = node("sparse", "cpu-8", [pod("b-1", cpu=0.5)])
    host = node("host", "cpu-16", [pod(f"c-{i}", cpu=0.5) for i in range(8)])
    opts = Options(max_multi=1)  # single-node moves only
    command = only(plan(snapshot([crowded, sparse, host]), opts).commands)
    assert command.candidates == ("claim-sparse",)


def test_when_empty_pools_do_not_consolidate_underutilized_nodes() -> None:
    pools = {"cpu": policy("cpu", consolidation_policy=WHEN_EMPTY)}
    nodes = [node("a", "cpu-4", [pod("web-1")]), node("b", "cpu-4", [pod("web-2")])]
    assert plan(snapshot(nodes, pools=pools)).commands == ()


def test_recently_changed_nodes_are_not_consolidated() -> None:
    a = node("a", "cpu-4", [pod("web-1")], stable_since=NOW - timedelta(seconds=5))
    b = node("b", "cpu-4", [pod("web-2")], stable_since=NOW - timedelta(seconds=5))
    assert plan(snapshot([a, b])).commands == ()


def test_pods_that_fit_nowhere_else_keep_their_node() -> None:
    pinned = pod("web-1", cpu=7)
    a = node("a", "cpu-8", [pinned])
    pools = {"cpu": policy("cpu")}
    decision = plan(snapshot([a], pools=pools, templates=()))  # no NodePool to buy from
    assert decision.commands == ()


def test_consolidation_waits_while_the_cluster_scales_up() -> None:
    a = node("a", "cpu-4", [pod("web-1")])
    b = node("b", "cpu-4", [pod("web-2")])
    empty = node("empty", "cpu-2")
    decision = plan(snapshot([a, b, empty], pending=(pod("huge-1", cpu=12),)))
    command = only(decision.commands)
    assert command.reason == "Empty"  # emptiness still runs
    decision = plan(snapshot([a, b], pending=(pod("huge-1", cpu=12),)))
    assert decision.commands == ()
    assert decision.waiting is not None
    assert "scaling up" in decision.waiting


def test_consolidation_waits_while_kube_scheduler_places_a_backlog_on_existing_nodes() -> None:
    # a burst: pods wait for kube-scheduler with room for them on the nodes that exist
    a = node("a", "cpu-4", [pod("web-1")])
    b = node("b", "cpu-4", [pod("web-2")])
    backlog = (pod("new-1"),)
    decision = plan(snapshot([a, b], pending=backlog, scheduler_backlog=True))
    assert decision.commands == ()
    assert decision.waiting is not None
    assert "kube-scheduler is still placing 1 pending pod(s)" in decision.waiting
    # once kube-scheduler has stopped binding, the same cluster consolidates as before
    decision = plan(snapshot([a, b], pending=backlog))
    assert decision.waiting is None
    assert only(decision.commands).reason == "Underutilized"
    # and a backlog that needs no room on these nodes holds nothing
    empty = node("empty", "cpu-2")
    assert only(plan(snapshot([a, b, empty], scheduler_backlog=True)).commands).reason == "Empty"


# --- drift and expiry --------------------------------------------------------------------------


def test_a_drifted_node_is_replaced() -> None:
    n = node("n", "cpu-4", [pod("web-1", cpu=3)], drift="NodePool cpu spec.template changed")
    command = only(plan(snapshot([n])).commands)
    assert (command.reason, command.action) == ("Drifted", "replace")
    assert len(command.replacements) == 1
    assert "spec.template changed" in command.describe()


def test_drift_goes_one_budget_at_a_time() -> None:
    pools = {"cpu": policy("cpu", budgets=(Budget(nodes="1"),))}
    nodes = [node(f"n{i}", "cpu-4", [pod(f"web-{i}", cpu=3)], drift="changed") for i in range(3)]
    decision = plan(snapshot(nodes, pools=pools))
    command = only(decision.commands)
    assert len(command.candidates) == 1
    assert len([b for b in decision.blocked if b.reason == "Drifted"]) == 2
    # while it runs, the next pass starts nothing
    running = snapshot(nodes, pools=pools, active=frozenset(command.candidates))
    assert plan(running).commands == ()


def test_drifted_nodes_do_not_receive_pods_of_other_drifted_nodes() -> None:
    nodes = [node(f"n{i}", "cpu-8", [pod(f"web-{i}")], drift="changed") for i in range(2)]
    command = only(plan(snapshot(nodes, pools={"cpu": policy("cpu", budgets=(Budget(nodes="1"),))})).commands)
    assert command.action == "replace"
    assert dict(command.placements)["default/web-0"] != "n1"


def test_an_expired_node_is_replaced_before_drifted_ones() -> None:
    old = node("old", "cpu-4", [pod("web-1", cpu=3)], expires_at=NOW - timedelta(minutes=1))
    drifted = node("drifted", "cpu-4", [pod("web-2", cpu=3)], drift="changed")
    pools = {"cpu": policy("cpu", budgets=(Budget(nodes="1"),))}
    command = only(plan(snapshot([old, drifted], pools=pools)).commands)
    assert (command.reason, command.candidates) == ("Expired", ("claim-old",))
    not_yet = replace(old, expires_at=NOW + timedelta(minutes=1))
    assert only(plan(snapshot([not_yet, drifted], pools=pools)).commands).reason == "Drifted"


def test_an_expired_empty_node_is_just_deleted() -> None:
    pools = {"cpu": policy("cpu", after=None)}
    old = node("old", "cpu-4", expires_at=NOW - timedelta(minutes=1))
    command = only(plan(snapshot([old], pools=pools)).commands)
    assert (command.reason, command.action) == ("Expired", "delete")


# --- validation just before acting -------------------------------------------------------------


def test_validation_refuses_when_pods_changed_meanwhile() -> None:
    a = node("a", "cpu-4", [pod("web-1"), pod("web-2")])
    b = node("b", "cpu-4", [pod("web-3")])
    command = only(plan(snapshot([a, b])).commands)
    moved = replace(b, stable_since=NOW)
    assert "pods changed" in str(validate(snapshot([a, moved]), command, replacements_ready=False))
    # a filled up meanwhile: web-3 now needs a (cheaper) replacement, or has nowhere to go at all
    filled = replace(a, view=replace(a.view, pods=(*a.view.pods, pod("big-1", cpu=2))))
    fresh = validate(snapshot([filled, b]), command, replacements_ready=False)
    assert isinstance(fresh, Command)
    assert fresh.action == "replace"
    no_pools = snapshot([filled, b], templates=())
    assert "nowhere to go" in str(validate(no_pools, command, replacements_ready=False))
    running = snapshot([a, b], active=frozenset(command.candidates))
    assert validate(running, command, replacements_ready=False) == command


def test_validation_refuses_when_a_node_became_protected() -> None:
    empty = node("empty", "cpu-4")
    command = only(plan(snapshot([empty])).commands)
    protected = replace(empty, blockers=("pod default/x is annotated joiner.sh/do-not-disrupt",))
    assert "do-not-disrupt" in str(validate(snapshot([protected]), command, replacements_ready=False))
    gone = validate(snapshot([]), command, replacements_ready=False)
    assert gone == "NodeClaim claim-empty is gone"


def test_after_replacements_are_up_the_pods_must_fit_without_buying_more() -> None:
    big = node("big", "cpu-16", [pod("web-1", cpu=1.5)])
    command = only(plan(snapshot([big])).commands)
    [new] = command.replacements
    replacement = node("repl", new.choice.instance_type, protected_until=NOW + timedelta(minutes=1))
    ready = snapshot([big, replacement], active=frozenset(command.candidates))
    assert validate(ready, command, replacements_ready=True) == command
    tiny = replace(replacement, view=replace(replacement.view, pods=(pod("other-1", cpu=1.5),)))
    crowded = snapshot([big, tiny], active=frozenset(command.candidates))
    assert "no longer fit" in str(validate(crowded, command, replacements_ready=True))


def test_restricting_a_replacement_by_price_keeps_cheaper_types_only() -> None:
    big = node("big", "cpu-16", [pod("web-1", cpu=1.5)])
    command = only(plan(snapshot([big]), Options(min_saving_fraction=0.0)).commands)
    [new] = command.replacements
    cut = restrict_price(new, 0.25)
    assert [c.instance_type for c in cut.candidates] == ["cpu-2", "cpu-4"]
    assert cut.requirements.get("node.kubernetes.io/instance-type") is not None
    assert set(cut.requirements.get("node.kubernetes.io/instance-type").values) == {"cpu-2", "cpu-4"}  # type: ignore[union-attr]


def test_nodes_that_fit_nowhere_alone_are_merged_onto_one_cheaper_node() -> None:
    # each pod fills most of its cpu-2; no single move helps, all three fit one cpu-4 for 0.20 < 0.30
    nodes = [node(f"n{i}", "cpu-2", [pod(f"web-{i}", cpu=1.2)]) for i in range(3)]
    command = only(plan(snapshot(nodes)).commands)
    assert (command.reason, len(command.candidates)) == ("Underutilized", 3)
    [new] = command.replacements
    assert new.choice.instance_type == "cpu-4"
    _after, price = apply(snapshot(nodes), command)
    assert price == 0.20


def test_empty_nodes_that_stayed_empty_still_go_when_one_got_a_pod() -> None:
    nodes = [node("a", "cpu-4"), node("b", "cpu-4"), node("busy", "cpu-8", [pod("web-1")])]
    command = only(plan(snapshot(nodes)).commands)
    assert set(command.candidates) == {"claim-a", "claim-b"}
    landed = replace(nodes[1], movable=(pod("web-2"),), stable_since=NOW)
    fresh = validate(snapshot([nodes[0], landed, nodes[2]]), command, replacements_ready=False)
    assert isinstance(fresh, Command)
    assert fresh.candidates == ("claim-a",)
    assert fresh.old_price == 0.20
