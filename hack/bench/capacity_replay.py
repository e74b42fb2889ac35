"""Replays a 4-week synthetic GPU demand trace through reactive provisioning, a static buffer, a
schedule and the forecast, on a simulated clock, and reports who waited and what it cost.

    .venv/bin/python -m hack.bench.capacity_replay [--seeds 1,2,3] [--png docs/capacity-forecast.png]

The model (minute steps): pods of one GPU arrive and run for their duration; machines have 8 GPUs
(p5.48xlarge, $55.04/h on demand) and take ``--boot-minutes`` (4) from purchase to usable. Every
minute, waiting pods go onto free GPUs of usable machines; machines are bought for the GPUs waiting
pods lack (counting machines still booting), plus whatever the strategy wants warm; a machine that
stayed empty for 10 minutes and is not needed for the warm target is given back (consolidation).

Strategies: ``reactive`` (nothing warm), ``buffer`` (16 free GPUs always), ``schedule`` (48 free GPUs
on weekdays 08:30-18:30 UTC) and ``forecast`` (joiner's ``controller.capacity.forecast.decide`` with
the NodePool defaults, learning online from the demand it sees: GPUs of running and waiting pods,
peak per hour). Weeks 1-3 warm the forecast up; every figure is measured on week 4.

Peak-hour pods are those arriving on weekdays between 08:45 and 09:45 UTC (the training burst and
whatever else arrives then).

The trace (seeded): weekday training bursts (about 48 GPUs arriving 08:45-09:15, running to about
18:00), a nightly batch (16 GPUs 01:00-03:00 every day), background noise (small jobs all day) and
one-off spikes (64 GPUs at a random hour, once in week 2 and once in week 4).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from controller.capacity.forecast import ForecastConfig, decide
from controller.capacity.history import History

START = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
WEEK_MINUTES = 7 * 24 * 60
GPUS_PER_NODE = 8
NODE_PRICE = 55.04  # p5.48xlarge, 8 x H100, on demand, $/h (the kwok catalog)
EMPTY_GRACE = 10  # minutes a machine stays empty before consolidation takes it
STRATEGIES = ("reactive", "buffer", "schedule", "forecast")


@dataclass(slots=True)
class Pod:
    arrive: int
    duration: int
    peak_hour: bool
    start: int | None = None


@dataclass(slots=True)
class Node:
    usable_at: int
    used: int = 0
    empty_since: int | None = None


@dataclass(slots=True)
class Result:
    waited: int = 0
    pods: int = 0
    waits: list[int] = field(default_factory=list)
    peak_pods: int = 0
    peak_started: int = 0
    node_minutes: int = 0
    demand: list[float] = field(default_factory=list)
    provisioned: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)


def trace(seed: int) -> list[Pod]:
    rng = random.Random(seed)
    pods: list[Pod] = []
    spike_minutes = {rng.randrange(WEEK_MINUTES, 2 * WEEK_MINUTES), rng.randrange(3 * WEEK_MINUTES, 4 * WEEK_MINUTES)}
    for day in range(28):
        base = day * 1440
        weekday = (START + timedelta(days=day)).weekday() < 5
        if weekday:
            for _ in range(rng.randint(44, 52)):  # training burst
                arrive = base + 9 * 60 + rng.randint(-15, 15)
                end = base + 18 * 60 + rng.randint(-30, 30)
                pods.append(Pod(arrive, end - arrive, False))
        for _ in range(16):  # nightly batch
            arrive = base + 60 + rng.randint(0, 10)
            pods.append(Pod(arrive, 120 + rng.randint(-10, 10), False))
        minute = base
        while True:  # background noise: a small job every ~40 minutes
            minute += int(rng.expovariate(1 / 40)) + 1
            if minute >= base + 1440:
                break
            for _ in range(rng.randint(1, 4)):
                pods.append(Pod(minute, rng.randint(30, 120), False))
    for spike in spike_minutes:
        for _ in range(64):
            pods.append(Pod(spike + rng.randint(0, 10), rng.randint(60, 180), False))
    for pod in pods:  # the peak hour: weekday arrivals 08:45-09:45 UTC, whatever the job
        t = START + timedelta(minutes=pod.arrive)
        pod.peak_hour = t.weekday() < 5 and 8 * 60 + 45 <= t.hour * 60 + t.minute < 9 * 60 + 45
    return sorted(pods, key=lambda p: p.arrive)


def warm_target(strategy: str, minute: int, *, decision: int) -> int:
    t = START + timedelta(minutes=minute)
    if strategy == "buffer":
        return 16
    if strategy == "schedule":
        in_window = t.weekday() < 5 and (8 * 60 + 30) <= t.hour * 60 + t.minute < (18 * 60 + 30)
        return 48 if in_window else 0
    if strategy == "forecast":
        return decision
    return 0


def simulate(strategy: str, pods: list[Pod], *, boot: int, measure_from: int) -> Result:
    config = ForecastConfig()
    history = History(unit="gpu")
    result = Result()
    nodes: list[Node] = []
    waiting: list[Pod] = []
    running: list[tuple[int, Pod, Node]] = []  # (end minute, pod, node)
    i = 0
    decision = 0
    predicted = 0.0
    for minute in range(4 * WEEK_MINUTES):
        # pods finishing
        still: list[tuple[int, Pod, Node]] = []
        for end, pod, node in running:
            if end <= minute:
                node.used -= 1
                if node.used == 0:
                    node.empty_since = minute
            else:
                still.append((end, pod, node))
        running = still
        while i < len(pods) and pods[i].arrive <= minute:
            waiting.append(pods[i])
            i += 1
        # place waiting pods on usable machines, fullest first (kube-scheduler-like bin packing)
        usable = sorted((n for n in nodes if n.usable_at <= minute), key=lambda n: -n.used)
        left: list[Pod] = []
        for pod in waiting:
            target_node = next((n for n in usable if n.used < GPUS_PER_NODE), None)
            if target_node is None:
                left.append(pod)
                continue
            target_node.used += 1
            target_node.empty_since = None
            pod.start = minute
            running.append((minute + pod.duration, pod, target_node))
        waiting = left
        demand = len(running) + len(waiting)
        now = START + timedelta(minutes=minute)
        history.record(float(demand), at=now)
        if strategy == "forecast" and minute % 5 == 0:
            d = decide(history.peaks, now=now, current=demand, config=config)
            decision, predicted = d.prewarm, (d.predicted if d.acted else 0.0)
        target = warm_target(strategy, minute, decision=decision)
        # buy: for waiting pods, then up to the warm target (free GPUs incl. booting machines)
        free = sum(GPUS_PER_NODE - n.used for n in nodes)
        short = len(waiting) + target - free
        for _ in range(max(0, math.ceil(short / GPUS_PER_NODE))):
            nodes.append(Node(usable_at=minute + boot, empty_since=minute + boot))
        # consolidation: empty for EMPTY_GRACE, and not needed for the warm target
        keep_free = target + len(waiting)
        for n in sorted(nodes, key=lambda n: n.empty_since or 0):
            if n.used == 0 and n.empty_since is not None and minute - n.empty_since >= EMPTY_GRACE:
                free_without = sum(GPUS_PER_NODE - m.used for m in nodes if m is not n)
                if free_without >= keep_free:
                    nodes.remove(n)
        if minute >= measure_from:
            result.node_minutes += len(nodes)
            if minute % 10 == 0:
                result.demand.append(float(demand))
                result.provisioned.append(float(len(nodes) * GPUS_PER_NODE))
                result.predicted.append(predicted)
    for pod in pods:
        if pod.arrive < measure_from or pod.start is None:
            continue
        wait = pod.start - pod.arrive
        result.pods += 1
        result.waits.append(wait)
        result.waited += wait > 0
        if pod.peak_hour:
            result.peak_pods += 1
            result.peak_started += wait == 0
    return result


def p95(values: list[int]) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]) if ordered else 0.0


def plot(result: Result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [i / 6 for i in range(len(result.demand))]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(hours, result.demand, label="demand (GPUs of running + waiting pods)", linewidth=1)
    ax.plot(hours, result.predicted, label="forecast (expected within the 30 min lead time)", linewidth=1)
    ax.plot(hours, result.provisioned, label="provisioned GPUs (machines bought)", linewidth=1, alpha=0.8)
    ax.set_xlabel("hours into week 4 (Monday 00:00 UTC = 0)")
    ax.set_ylabel("GPUs")
    ax.set_xticks(range(0, 169, 24))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("joiner forecast on a synthetic GPU trace: week 4 (learned from weeks 1-3)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--boot-minutes", type=int, default=4)
    parser.add_argument("--png", type=Path, help="write the week-4 plot of the first seed's forecast run here")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    measure_from = 3 * WEEK_MINUTES
    print(f"boot delay {args.boot_minutes} min, machines of {GPUS_PER_NODE} GPUs at ${NODE_PRICE}/h; week 4 measured")
    header = (
        f"{'seed':>4} {'strategy':<9} {'pods':>5} {'waited':>7} {'mean wait':>9} {'p95 wait':>8} "
        f"{'peak-hour pods started at once':>30} {'node-h':>7} {'$':>9} {'$ vs reactive':>13}"
    )
    print(header)
    summary: dict[str, list[tuple[float, float]]] = {s: [] for s in STRATEGIES}
    for seed in seeds:
        pods0 = trace(seed)
        cost_reactive = 0.0
        for strategy in STRATEGIES:
            pods = [Pod(p.arrive, p.duration, p.peak_hour) for p in pods0]
            r = simulate(strategy, pods, boot=args.boot_minutes, measure_from=measure_from)
            cost = r.node_minutes / 60 * NODE_PRICE
            if strategy == "reactive":
                cost_reactive = cost
            peak = r.peak_started / r.peak_pods if r.peak_pods else 0.0
            extra = cost / cost_reactive - 1 if cost_reactive else 0.0
            summary[strategy].append((peak, extra))
            print(
                f"{seed:>4} {strategy:<9} {r.pods:>5} {r.waited / r.pods:>7.1%} {statistics.mean(r.waits):>8.2f}m "
                f"{p95(r.waits):>7.0f}m {peak:>30.1%} {r.node_minutes / 60:>7.0f} {cost:>9,.0f} {extra:>+13.1%}"
            )
            if args.png and strategy == "forecast" and seed == seeds[0]:
                plot(r, args.png)
    for strategy, rows in summary.items():
        peaks = [p for p, _ in rows]
        extras = [e for _, e in rows]
        print(
            f"{strategy:<9} peak-hour pods started at once: {min(peaks):.1%}-{max(peaks):.1%}; "
            f"$ vs reactive: {min(extras):+.1%} to {max(extras):+.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
